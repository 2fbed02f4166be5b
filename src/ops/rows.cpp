#include "ops/rows.h"

#include <algorithm>
#include <cstring>

#include "ops/gemm.h"
#include "core/phase_timer.h"

namespace fca {

template <typename T>
void gather_rows(T* out, const T* x, const int32_t* rows, int64_t R, int C) {
  const PhaseScope phase_scope(Phase::elementwise);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) std::memcpy(out + r * C, x + int64_t(rows[r]) * C, sizeof(T) * size_t(C));
}

template <typename T>
void scatter_add_rows(T* y, const T* src, const int32_t* rows, const T* weights, int64_t R, int C) {
  const PhaseScope phase_scope(Phase::elementwise);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    T* dst = y + int64_t(rows[r]) * C;
    const T* s = src + r * C;
    const T w = weights != nullptr ? weights[r] : T(1);
    for (int c = 0; c < C; ++c) dst[c] += w * s[c];
  }
}

template <typename T>
void combine_rows(T* y, const T* src, const int32_t* rows, const T* weights, int64_t N, int S, int C, bool accumulate) {
  const PhaseScope phase_scope(Phase::elementwise);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    T* out = y + n * C;
    if (!accumulate) std::fill(out, out + C, T(0));
    for (int j = 0; j < S; ++j) {
      const T w = weights != nullptr ? weights[n * S + j] : T(1);
      const T* s = src + int64_t(rows[n * S + j]) * C;
      for (int c = 0; c < C; ++c) out[c] += w * s[c];
    }
  }
}

template <typename T>
void combine_rows_backward(T* dsrc, T* dweights, const T* dy, const T* src, const int32_t* rows, const T* weights,
                           int64_t N, int S, int C) {
  const PhaseScope phase_scope(Phase::elementwise);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* g = dy + n * C;
    for (int j = 0; j < S; ++j) {
      const int64_t r = rows[n * S + j];
      const T w = weights != nullptr ? weights[n * S + j] : T(1);
      T* d = dsrc + r * C;
      const T* s = src + r * C;
      T dot = 0;
      for (int c = 0; c < C; ++c) {
        d[c] = w * g[c];
        dot += g[c] * s[c];
      }
      if (dweights != nullptr) dweights[n * S + j] = dot;
    }
  }
}

template <typename T>
void grouped_mlp_forward(T* y, T* pre, T* act, const T* x, const T* fc_weight, const T* fc_bias, const T* proj_weight,
                         const T* proj_bias, const int64_t* offsets, int groups, int in, int F) {
  for (int g = 0; g < groups; ++g) {
    const int64_t r0 = offsets[g], n = offsets[g + 1] - r0;
    if (n == 0) continue;
    mlp_forward(y + r0 * in, pre + r0 * F, act + r0 * F, x + r0 * in, fc_weight + int64_t(g) * F * in,
                fc_bias != nullptr ? fc_bias + int64_t(g) * F : nullptr, proj_weight + int64_t(g) * in * F,
                proj_bias != nullptr ? proj_bias + int64_t(g) * in : nullptr, int(n), in, F, false);
  }
}

template <typename T>
void grouped_linear_backward(T* dx, T* dweight, T* dbias, const T* dy, const T* x, const T* weight,
                             const int64_t* offsets, int groups, int in, int out) {
  for (int g = 0; g < groups; ++g) {
    const int64_t r0 = offsets[g], n = offsets[g + 1] - r0;
    if (n == 0) continue;
    linear_backward(dx != nullptr ? dx + r0 * in : nullptr, dweight + int64_t(g) * out * in,
                    dbias != nullptr ? dbias + int64_t(g) * out : nullptr, dy + r0 * out, x + r0 * in,
                    weight + int64_t(g) * out * in, int(n), in, out);
  }
}

#define FCA_INSTANTIATE(T)                                                                                          \
  template void gather_rows<T>(T*, const T*, const int32_t*, int64_t, int);                                        \
  template void scatter_add_rows<T>(T*, const T*, const int32_t*, const T*, int64_t, int);                         \
  template void combine_rows<T>(T*, const T*, const int32_t*, const T*, int64_t, int, int, bool);                  \
  template void combine_rows_backward<T>(T*, T*, const T*, const T*, const int32_t*, const T*, int64_t, int, int); \
  template void grouped_mlp_forward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const int64_t*, int, int, \
                                       int);                                                                        \
  template void grouped_linear_backward<T>(T*, T*, T*, const T*, const T*, const T*, const int64_t*, int, int, int);
FCA_INSTANTIATE(float)
FCA_INSTANTIATE(double)
#undef FCA_INSTANTIATE

}  // namespace fca
