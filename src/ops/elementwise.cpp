#include "ops/elementwise.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "ops/fast_math.h"
#include "ops/simd.h"
#include "core/phase_timer.h"

namespace fca {
namespace {
template <typename T>
constexpr T kSqrt2OverPi = T(0.7978845608028654);
}

// Float GELU runs the dispatched SIMD kernel over fixed chunks (element-wise: the chunking cannot
// change a result).
constexpr int64_t kGeluChunk = 4096;

template <>
void gelu_tanh_forward<float>(float* out, const float* inp, int64_t n) {
  const PhaseScope phase_scope(Phase::elementwise);
  const int64_t chunks = (n + kGeluChunk - 1) / kGeluChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c)
    simd::gelu_tanh_forward(out + c * kGeluChunk, inp + c * kGeluChunk, std::min(kGeluChunk, n - c * kGeluChunk));
}

template <>
void gelu_tanh_backward<float>(float* dinp, const float* dout, const float* inp, int64_t n) {
  const PhaseScope phase_scope(Phase::elementwise);
  const int64_t chunks = (n + kGeluChunk - 1) / kGeluChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c)
    simd::gelu_tanh_backward(dinp + c * kGeluChunk, dout + c * kGeluChunk, inp + c * kGeluChunk,
                             std::min(kGeluChunk, n - c * kGeluChunk));
}

template <typename T>
void bias_gelu_tanh_forward(T* pre, T* act, const T* bias, int64_t N, int C) {
  const PhaseScope phase_scope(Phase::elementwise);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    T* p = pre + n * C;
    T* y = act + n * C;
    for (int c = 0; c < C; ++c) p[c] += bias[c];
    if constexpr (std::is_same_v<T, float>) {
      simd::gelu_tanh_forward(y, p, C);  // the row is still in L1
    } else {
      for (int c = 0; c < C; ++c) y[c] = T(0.5) * p[c] * (T(1) + fast_tanh(kSqrt2OverPi<T> * (p[c] + T(0.044715) * p[c] * p[c] * p[c])));
    }
  }
}
template void bias_gelu_tanh_forward<float>(float*, float*, const float*, int64_t, int);
template void bias_gelu_tanh_forward<double>(double*, double*, const double*, int64_t, int);

template <typename T>
void gelu_tanh_forward(T* out, const T* inp, int64_t n) {
  const PhaseScope phase_scope(Phase::elementwise);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const T x = inp[i];
    out[i] = T(0.5) * x * (T(1) + fast_tanh(kSqrt2OverPi<T> * (x + T(0.044715) * x * x * x)));
  }
}

template <typename T>
void gelu_tanh_backward(T* dinp, const T* dout, const T* inp, int64_t n) {
  const PhaseScope phase_scope(Phase::elementwise);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T th = fast_tanh(kSqrt2OverPi<T> * (x + T(0.044715) * x * x * x));
    const T dtanh_arg = kSqrt2OverPi<T> * (T(1) + T(3 * 0.044715) * x * x);
    dinp[i] = dout[i] * (T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * dtanh_arg);
  }
}

template <typename T>
void gated_residual_forward(T* h_next, const T* h, const T* g, const T* F, int64_t N, int C) {
  const PhaseScope phase_scope(Phase::elementwise);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T gn = g[n];
    const T* f = F + n * C;
    const T* x = h + n * C;
    T* y = h_next + n * C;
    if constexpr (std::is_same_v<T, float>) {
      simd::residual_row(y, x, gn, f, C);
    } else {
      for (int c = 0; c < C; ++c) y[c] = x[c] + gn * f[c];
    }
  }
}

template <typename T>
void gated_residual_backward(T* dF, T* dg, const T* dh_next, const T* g, const T* F, int64_t N, int C) {
  const PhaseScope phase_scope(Phase::elementwise);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T gn = g[n];
    const T* dy = dh_next + n * C;
    const T* f = F + n * C;
    T* df = dF + n * C;
    T dot = 0;
    for (int c = 0; c < C; ++c) {
      df[c] = gn * dy[c];
      dot += dy[c] * f[c];
    }
    if (dg != nullptr) dg[n] = dot;
  }
}

// Float GELU is the explicit specialisation above; double instantiates the scalar template.
template void gelu_tanh_forward<double>(double*, const double*, int64_t);
template void gelu_tanh_backward<double>(double*, const double*, const double*, int64_t);
#define FCA_INSTANTIATE(T)                                                                  \
  template void gated_residual_forward<T>(T*, const T*, const T*, const T*, int64_t, int); \
  template void gated_residual_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, int);
FCA_INSTANTIATE(float)
FCA_INSTANTIATE(double)
#undef FCA_INSTANTIATE

}  // namespace fca
