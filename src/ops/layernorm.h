// LayerNorm over the last axis: out = (x - mean) * rstd * weight + bias, biased variance, eps 1e-5.
#pragma once
#include <cstdint>

namespace fca {

inline constexpr double kLayerNormEps = 1e-5;

// out, inp: [N, C]; mean, rstd: [N] (saved for backward); weight, bias: [C].
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t N, int C);

// The residual add and the LayerNorm after it in one pass over the rows: sum = a + b [N, C] (kept:
// it is the LayerNorm's input for backward), then out, mean, rstd as layernorm_forward(sum).
template <typename T>
void residual_layernorm_forward(T* sum, T* out, T* mean, T* rstd, const T* a, const T* b, const T* weight, const T* bias,
                                int64_t N, int C);

// dinp[N,C] += d/dinp (accumulates: LayerNorm inputs are residual-stream values);
// dweight, dbias [C] += parameter gradients.
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* mean, const T* rstd,
                        const T* weight, int64_t N, int C);

}  // namespace fca
