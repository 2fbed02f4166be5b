#include "ops/attention.h"

#include <omp.h>

#include <cmath>
#include <limits>

#include "ops/gemm.h"

namespace fca {
namespace {

// Softmax of one causal row in place (row[u] = s[t,u] for u <= t on entry, p[t,u] on exit, zeros
// beyond t). With stats, also writes logp and the three head features. The arithmetic producing p is
// the same with and without stats, so replay (no stats) reproduces live runs bit for bit.
template <typename T>
void causal_softmax_row(T* row, int t, int Tn, T* logp, const T* prev_logp, T* features) {
  T mx = -std::numeric_limits<T>::infinity();
  for (int u = 0; u <= t; ++u) mx = row[u] > mx ? row[u] : mx;
  T sum = 0;
  for (int u = 0; u <= t; ++u) {
    const T shifted = row[u] - mx;
    if (logp != nullptr) logp[u] = shifted;
    const T e = std::exp(shifted);
    row[u] = e;
    sum += e;
  }
  const T inv = T(1) / sum;
  for (int u = 0; u <= t; ++u) row[u] *= inv;
  for (int u = t + 1; u < Tn; ++u) row[u] = 0;
  if (logp == nullptr) return;

  // logp = s - logsumexp(s), from the shifted scores: never the log of an underflowed probability.
  const T log_sum = std::log(sum);
  T neg_entropy = 0, kl = 0;
  for (int u = 0; u <= t; ++u) {
    logp[u] -= log_sum;
    neg_entropy += row[u] * logp[u];
    if (prev_logp != nullptr) kl += row[u] * (logp[u] - prev_logp[u]);
  }
  for (int u = t + 1; u < Tn; ++u) logp[u] = 0;
  const T log_positions = std::log(T(t + 1));
  features[0] = t == 0 ? T(0) : -neg_entropy / log_positions;
  features[1] = kl;
  features[2] = mx + log_sum - log_positions;
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* probs, const AttentionStats<T>* stats, const T* qkv, int B, int Tn, int D, int H) {
  const int dh = D / H;
  const T scale = T(1) / std::sqrt(T(dh));
  const int ld = 3 * D;
  const int64_t TT = int64_t(Tn) * Tn;
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * H; ++bh) {
    const int b = bh / H, h = bh % H;
    const T* q = qkv + int64_t(b) * Tn * ld + h * dh;
    const T* k = q + D;
    const T* v = q + 2 * D;
    T* p = probs + bh * TT;
    // Full T x T scores; the masked half is overwritten with zeros by the row softmax.
    gemm<T>(false, true, Tn, Tn, dh, scale, q, ld, k, ld, T(0), p, Tn);
    for (int t = 0; t < Tn; ++t) {
      T* logp = stats ? stats->logp + bh * TT + int64_t(t) * Tn : nullptr;
      const T* prev = stats && stats->prev_logp ? stats->prev_logp + bh * TT + int64_t(t) * Tn : nullptr;
      T* feat = stats ? stats->head_features + (int64_t(bh) * Tn + t) * 3 : nullptr;
      causal_softmax_row(p + int64_t(t) * Tn, t, Tn, logp, prev, feat);
    }
    gemm<T>(false, false, Tn, dh, Tn, T(1), p, Tn, v, ld, T(0), out + int64_t(b) * Tn * D + h * dh, D);
  }
}

template <typename T>
void attention_backward(T* dqkv, T* scratch, const T* dout, const T* probs, const T* qkv, int B, int Tn, int D,
                        int H) {
  const int dh = D / H;
  const T scale = T(1) / std::sqrt(T(dh));
  const int ld = 3 * D;
  const int64_t TT = int64_t(Tn) * Tn;
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * H; ++bh) {
    const int b = bh / H, h = bh % H;
    const int64_t row0 = int64_t(b) * Tn;
    const T* q = qkv + row0 * ld + h * dh;
    const T* k = q + D;
    const T* v = q + 2 * D;
    const T* dy = dout + row0 * D + h * dh;
    T* dq = dqkv + row0 * ld + h * dh;
    T* dk = dq + D;
    T* dv = dq + 2 * D;
    const T* p = probs + bh * TT;
    T* ds = scratch + omp_get_thread_num() * TT;
    gemm<T>(false, true, Tn, Tn, dh, T(1), dy, D, v, ld, T(0), ds, Tn);  // dP = dY V^T
    gemm<T>(true, false, Tn, dh, Tn, T(1), p, Tn, dy, D, T(0), dv, ld);  // dV = P^T dY
    for (int t = 0; t < Tn; ++t) {  // dS = P * (dP - rowsum(P * dP))
      const T* pr = p + int64_t(t) * Tn;
      T* r = ds + int64_t(t) * Tn;
      T dot = 0;
      for (int u = 0; u <= t; ++u) dot += pr[u] * r[u];
      for (int u = 0; u <= t; ++u) r[u] = pr[u] * (r[u] - dot);
      for (int u = t + 1; u < Tn; ++u) r[u] = 0;
    }
    gemm<T>(false, false, Tn, dh, Tn, scale, ds, Tn, k, ld, T(0), dq, ld);  // dQ = scale dS K
    gemm<T>(true, false, Tn, dh, Tn, scale, ds, Tn, q, ld, T(0), dk, ld);   // dK = scale dS^T Q
  }
}

template void attention_forward<float>(float*, float*, const AttentionStats<float>*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, const AttentionStats<double>*, const double*, int, int, int,
                                        int);
template void attention_backward<float>(float*, float*, const float*, const float*, const float*, int, int, int, int);
template void attention_backward<double>(double*, double*, const double*, const double*, const double*, int, int, int,
                                         int);

}  // namespace fca
