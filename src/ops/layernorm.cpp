#include "ops/layernorm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "ops/fast_math.h"
#include "ops/simd.h"
#include "core/phase_timer.h"

namespace fca {

namespace {
// One row: 16-lane sums (ops/fast_math.h), a fixed order that vectorises; a two-pass variance, so
// no cancellation for rows with a large mean.
template <typename T>
inline void layernorm_row(T* y, T* mean, T* rstd, const T* x, const T* weight, const T* bias, int C) {
  const T m = lane_sum(x, C) / T(C);
  const T var = lane_squared_deviation_sum(x, C, m);
  const T r = T(1) / std::sqrt(var / T(C) + T(kLayerNormEps));
  for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * r * weight[c] + bias[c];
  *mean = m;
  *rstd = r;
}

// Rows [n0, n0 + rows) of one LayerNorm. Float: the same operations at the CPU's vector width
// (this file is built for baseline x86-64 unless FCA_NATIVE), simd::kMaxNormRows rows at a time.
template <typename T>
inline void layernorm_block(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t n0, int rows,
                            int C) {
  if constexpr (std::is_same_v<T, float>) {
    simd::layernorm_rows(out + n0 * C, C, inp + n0 * C, C, weight, bias, rows, C, float(kLayerNormEps), mean + n0, rstd + n0);
  } else {
    for (int64_t n = n0; n < n0 + rows; ++n) layernorm_row(out + n * C, mean + n, rstd + n, inp + n * C, weight, bias, C);
  }
}
constexpr int kBlockRows = simd::kMaxNormRows;
}  // namespace

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t N, int C) {
  const PhaseScope phase_scope(Phase::elementwise);
#pragma omp parallel for schedule(static)
  for (int64_t n0 = 0; n0 < N; n0 += kBlockRows)
    layernorm_block(out, mean, rstd, inp, weight, bias, n0, int(std::min<int64_t>(kBlockRows, N - n0)), C);
}

template <typename T>
void layernorm_forward_group(std::initializer_list<LayerNormOperands<T>> norms, int64_t N, int C) {
  const PhaseScope phase_scope(Phase::elementwise);
  const LayerNormOperands<T>* first = norms.begin();
  const int count = int(norms.size());
#pragma omp parallel for schedule(static)
  for (int64_t n0 = 0; n0 < N; n0 += kBlockRows)
    for (int q = 0; q < count; ++q) {
      const LayerNormOperands<T>& l = first[q];
      layernorm_block(l.out, l.mean, l.rstd, l.inp, l.weight, l.bias, n0, int(std::min<int64_t>(kBlockRows, N - n0)), C);
    }
}

template <typename T>
void residual_layernorm_forward(T* sum, T* out, T* mean, T* rstd, const T* a, const T* b, const T* weight, const T* bias,
                                int64_t N, int C) {
  const PhaseScope phase_scope(Phase::elementwise);
#pragma omp parallel for schedule(static)
  for (int64_t n0 = 0; n0 < N; n0 += kBlockRows) {
    const int rows = int(std::min<int64_t>(kBlockRows, N - n0));
    for (int64_t n = n0; n < n0 + rows; ++n) {
      T* s = sum + n * C;
      if constexpr (std::is_same_v<T, float>)
        simd::residual_row(s, a + n * C, 1.0f, b + n * C, C);  // a + 1 b: 1 b is b exactly, so a + b
      else
        for (int c = 0; c < C; ++c) s[c] = a[n * C + c] + b[n * C + c];
    }
    layernorm_block(out, mean, rstd, sum, weight, bias, n0, rows, C);  // the rows are still in L1
  }
}

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* mean, const T* rstd,
                        const T* weight, int64_t N, int C) {
  const PhaseScope phase_scope(Phase::elementwise);
  // Input gradient, row-parallel: dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    const T* dy = dout + n * C;
    const T m = mean[n], r = rstd[n];
    // 16-lane sums (vectorised, fixed order): sum of dxhat = dy w, and of dxhat xhat.
    const T sum_dxhat = lane_dot(dy, weight, C);
    const T sum_dxhat_xhat = lane_centered_product_sum(dy, weight, x, C, m, r);
    const T mean_dxhat = sum_dxhat / T(C), mean_dxhat_xhat = sum_dxhat_xhat / T(C);
    T* dx = dinp + n * C;
    for (int c = 0; c < C; ++c) {
      const T xhat = (x[c] - m) * r;
      dx[c] += r * (dy[c] * weight[c] - mean_dxhat - xhat * mean_dxhat_xhat);
    }
  }
  // Parameter gradients, column-parallel so that each column is summed in row order.
  const int blocks = (C + 15) / 16;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * 16, c1 = c0 + 16 < C ? c0 + 16 : C;
    T dw[16] = {}, db[16] = {};
    for (int64_t n = 0; n < N; ++n) {
      const T* x = inp + n * C;
      const T* dy = dout + n * C;
      const T m = mean[n], r = rstd[n];
      for (int c = c0; c < c1; ++c) {
        dw[c - c0] += dy[c] * (x[c] - m) * r;
        db[c - c0] += dy[c];
      }
    }
    for (int c = c0; c < c1; ++c) {
      dweight[c] += dw[c - c0];
      dbias[c] += db[c - c0];
    }
  }
}

template void residual_layernorm_forward<float>(float*, float*, float*, float*, const float*, const float*, const float*,
                                                const float*, int64_t, int);
template void residual_layernorm_forward<double>(double*, double*, double*, double*, const double*, const double*,
                                                 const double*, const double*, int64_t, int);
template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*, int64_t, int);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*, const double*, int64_t, int);
template void layernorm_forward_group<float>(std::initializer_list<LayerNormOperands<float>>, int64_t, int);
template void layernorm_forward_group<double>(std::initializer_list<LayerNormOperands<double>>, int64_t, int);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*,
                                        const float*, int64_t, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         const double*, const double*, int64_t, int);

}  // namespace fca
