// RMS normalisation (MUDD's QK-norm and DA input norm) and exact (erf) GELU, forward kernels.
#pragma once
#include <cstdint>

namespace fca {

// out[n, :] = x[n, :] / sqrt(mean(x[n, :]^2) + eps) * (scale ? scale : 1), rows n < N of width C,
// row stride `stride` for both (so q heads inside a [N, D] buffer can be normalised in place with
// C = dh and N = tokens * heads). out may alias x.
void rmsnorm_forward(float* out, const float* x, const float* scale, int64_t N, int C, int64_t stride, double eps);

// out[i] = 0.5 x (1 + erf(x / sqrt 2)). out may alias inp.
void gelu_erf_forward(float* out, const float* inp, int64_t n);

// Rotary embedding on the first `rot` dims of every head, NeoX "rotate half" pairing (dim m with
// m + rot/2), for x [B*T, H*dh] at positions 0..T-1: x_m' = x_m cos - x_{m+h} sin,
// x_{m+h}' = x_{m+h} cos + x_m sin. cos/sin tables [T_max, rot/2].
void rope_forward(float* x, const float* cos_table, const float* sin_table, int B, int T, int H, int dh, int rot);

// The reference's tables: w_m = 1 / base^(2m/rot) and theta = t w_m in float, cos/sin in float,
// then rounded to IEEE half precision (an artefact of the PyTorch port kept for parity).
void rope_tables(float* cos_table, float* sin_table, int positions, int rot, double base);

}  // namespace fca
