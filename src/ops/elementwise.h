// Element-wise kernels: GELU (tanh approximation) and the gated residual update.
#pragma once
#include <cstdint>

namespace fca {

// out[i] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), i < n.
template <typename T>
void gelu_tanh_forward(T* out, const T* inp, int64_t n);
// The fc layer's epilogue in one pass over its rows (N rows of width C): pre[n, c] += bias[c], then
// act = GELU(pre) (tanh approximation). pre keeps the biased value for the backward pass.
template <typename T>
void bias_gelu_tanh_forward(T* pre, T* act, const T* bias, int64_t N, int C);
// dinp[i] = dout[i] * GELU'(inp[i]) (overwrites).
template <typename T>
void gelu_tanh_backward(T* dinp, const T* dout, const T* inp, int64_t n);

// The gated residual: h_next[n, :] = h[n, :] + g[n] * F[n, :], rows n < N of width C.
template <typename T>
void gated_residual_forward(T* h_next, const T* h, const T* g, const T* F, int64_t N, int C);
// Given dh_next: dF = g * dh_next (overwrites), dg[n] = <dh_next[n], F[n]> (overwrites; dg may be
// null when no gradient flows into the gate). dh = dh_next is the caller's identity path.
template <typename T>
void gated_residual_backward(T* dF, T* dg, const T* dh_next, const T* g, const T* F, int64_t N, int C);

}  // namespace fca
