#include "ops/embedding.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/phase_timer.h"
#include "ops/fast_math.h"

namespace fca {

template <typename T>
void embedding_forward(T* h0, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C) {
  const PhaseScope phase_scope(Phase::elementwise);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < int64_t(B) * Tn; ++n) {
    const T* e = wte + int64_t(tokens[n]) * C;
    const T* p = wpe + (n % Tn) * C;
    T* y = h0 + n * C;
    for (int c = 0; c < C; ++c) y[c] = e[c] + p[c];
  }
}

template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dh0, const int32_t* tokens, int B, int Tn, int C) {
  const PhaseScope phase_scope(Phase::elementwise);
  const int blocks = (C + 15) / 16;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * 16, c1 = std::min(c0 + 16, C);
    for (int64_t n = 0; n < int64_t(B) * Tn; ++n) {
      const T* d = dh0 + n * C;
      T* e = dwte + int64_t(tokens[n]) * C;
      T* p = dwpe + (n % Tn) * C;
      for (int c = c0; c < c1; ++c) {
        e[c] += d[c];
        p[c] += d[c];
      }
    }
  }
}

template <typename T>
void cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int64_t N, int V) {
  const PhaseScope phase_scope(Phase::elementwise);
#pragma omp parallel
  {
    std::vector<T> e(static_cast<size_t>(V));  // one row's exponentials, per thread
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* z = logits + n * V;
      const T mx = lane_max(z, V);
      losses[n] = mx + std::log(exp_shifted_sum(e.data(), z, V, mx)) - z[targets[n]];
    }
  }
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const int32_t* targets, T scale, int64_t N, int V) {
  const PhaseScope phase_scope(Phase::elementwise);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* z = logits + n * V;
    T* dz = dlogits + n * V;
    const T mx = lane_max(z, V);
    const T factor = scale / exp_shifted_sum(dz, z, V, mx);  // dz may alias z
    for (int v = 0; v < V; ++v) dz[v] *= factor;
    dz[targets[n]] -= scale;
  }
}

template <typename T>
double language_model_loss(T* losses, int32_t* saved_targets, const T* logits, const int32_t* targets, int B, int Tn,
                           int V, double* window_nll) {
  const int64_t N = int64_t(B) * Tn;
  for (int64_t i = 0; i < N; ++i) {
    if (targets[i] < 0 || targets[i] >= V)
      throw Error("target id " + std::to_string(targets[i]) + " is outside [0, " + std::to_string(V) + ")");
    saved_targets[i] = targets[i];
  }
  cross_entropy_forward(losses, logits, saved_targets, N, V);
  double total = 0;
  for (int b = 0; b < B; ++b) {
    double window = 0;
    for (int t = 0; t < Tn; ++t) window += losses[int64_t(b) * Tn + t];
    if (window_nll != nullptr) window_nll[b] = window / Tn;
    total += window;
  }
  return total / double(N);
}

#define FCA_INSTANTIATE(T)                                                                         \
  template double language_model_loss<T>(T*, int32_t*, const T*, const int32_t*, int, int, int, double*); \
  template void embedding_forward<T>(T*, const int32_t*, const T*, const T*, int, int, int);      \
  template void embedding_backward<T>(T*, T*, const T*, const int32_t*, int, int, int);           \
  template void cross_entropy_forward<T>(T*, const T*, const int32_t*, int64_t, int);             \
  template void cross_entropy_backward<T>(T*, const T*, const int32_t*, T, int64_t, int);
FCA_INSTANTIATE(float)
FCA_INSTANTIATE(double)
#undef FCA_INSTANTIATE

}  // namespace fca
