// MUDD's kernels: RMS normalisation (the QK-norm with a per-dim scale shared by heads, and the DA
// input norm without a scale), exact (erf) GELU, and partial rotary embeddings; forward and backward.
#pragma once
#include <cstdint>

namespace fca {

// RMS norm over groups of C values: token n (row stride `stride`) holds G contiguous groups (heads),
// out[n, g, :] = x[n, g, :] * r[n, g] * (scale ? scale : 1), r = 1 / sqrt(mean(x[n, g, :]^2) + eps).
// rstd (may be null) receives r [N * G]. out may alias x. The DA norm is G = 1, C = D.
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* scale, int64_t N, int G, int C, int64_t stride, double eps);
// dx[n, g, :] += r (s*dy - xhat mean(s*dy*xhat)) with xhat = x r, s = scale (or 1); dscale[c] +=
// sum over (n, g) of dy xhat (scale and dscale may be null); parameter sums in row order.
template <typename T>
void rmsnorm_backward(T* dx, T* dscale, const T* dy, const T* x, const T* rstd, const T* scale, int64_t N, int G, int C,
                      int64_t stride);

// out[i] = 0.5 x (1 + erf(x / sqrt 2)). out may alias inp.
template <typename T>
void gelu_erf_forward(T* out, const T* inp, int64_t n);
// dinp[i] = dout[i] (Phi(x) + x phi(x)) (overwrites; may alias dout).
template <typename T>
void gelu_erf_backward(T* dinp, const T* dout, const T* inp, int64_t n);

// The QK-norm then the rotary embedding of the same heads in one pass over the tokens, in place:
// rmsnorm_forward(x, rstd, x, scale, B * Tn, H, dh, stride, eps) (rstd [B * Tn * H] may be null),
// then on the first `rot` dims of every head the NeoX "rotate half" pairing (dim m with m + rot/2),
// at positions 0..Tn-1 of each of the B windows: x_m' = x_m cos - x_{m+h} sin,
// x_{m+h}' = x_{m+h} cos + x_m sin. cos/sin tables [positions, rot/2].
template <typename T>
void rmsnorm_rope_forward(T* x, T* rstd, const T* scale, const T* cos_table, const T* sin_table, int B, int Tn, int H,
                          int dh, int rot, int64_t stride, double eps);
// The transpose (inverse) rotation applied to gradients, in place (the rotary part's backward).
template <typename T>
void rope_backward(T* dx, const T* cos_table, const T* sin_table, int B, int Tn, int H, int dh, int rot, int64_t stride);

// The reference's tables: w_m = 1 / base^(2m/rot) and theta = t w_m in float, cos/sin in float,
// then rounded to IEEE half precision (an artefact of the PyTorch port kept for parity).
template <typename T>
void rope_tables(T* cos_table, T* sin_table, int positions, int rot, double base);

}  // namespace fca
