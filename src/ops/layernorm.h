// LayerNorm over the last axis: out = (x - mean) * rstd * weight + bias, biased variance, eps 1e-5.
#pragma once
#include <cstdint>
#include <initializer_list>

namespace fca {

inline constexpr double kLayerNormEps = 1e-5;

// out, inp: [N, C]; mean, rstd: [N] (saved for backward); weight, bias: [C].
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t N, int C);

// One LayerNorm of layernorm_forward_group: out, inp [N, C], mean, rstd [N], weight, bias [C].
template <typename T>
struct LayerNormOperands {
  T* out;
  T* mean;
  T* rstd;
  const T* inp;
  const T* weight;
  const T* bias;
};
// LayerNorms of independent inputs over the same rows in one parallel pass (one fork and join for
// all): bitwise layernorm_forward on each.
template <typename T>
void layernorm_forward_group(std::initializer_list<LayerNormOperands<T>> norms, int64_t N, int C);
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
