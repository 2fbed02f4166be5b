#include "ops/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/exec_counters.h"
#include "core/phase_timer.h"
#include "ops/fast_math.h"
#include "ops/gemm.h"

namespace fca {
namespace {

// Softmax of one causal row in place (row[u] = s[t,u] for u <= t on entry, p[t,u] on exit, zeros
// beyond t). With stats, also writes logp and the three head features. The arithmetic producing p is
// the same with and without stats, so replay (no stats) reproduces live runs bit for bit.
template <typename T>
void causal_softmax_row(T* row, int t, int Tn, T* logp, const T* prev_logp, T* features) {
  const int n = t + 1;
  T mx, log_sum, neg_entropy, cross = 0;
  if constexpr (std::is_same_v<T, float>) {
    // The same operations as the template path below, fused into three passes over the row.
    const simd::SoftmaxRowStats st = simd::softmax_row(row, n, logp, prev_logp);
    mx = st.max, log_sum = st.log_sum, neg_entropy = st.neg_entropy, cross = st.cross;
  } else {
    mx = lane_max(row, n);
    if (logp != nullptr)
      for (int u = 0; u < n; ++u) logp[u] = row[u] - mx;
    const T sum = exp_shifted_sum(row, row, n, mx);  // row[u] = exp(row[u] - mx), and its 16-lane sum
    const T inv = T(1) / sum;
    for (int u = 0; u < n; ++u) row[u] = inv * row[u];
    if (logp != nullptr) {
      // logp = s - logsumexp(s), from the shifted scores: never the log of an underflowed probability.
      log_sum = std::log(sum);
      for (int u = 0; u < n; ++u) logp[u] -= log_sum;
      neg_entropy = lane_dot(row, logp, n);
      if (prev_logp != nullptr) cross = lane_dot(row, prev_logp, n);
    }
  }
  for (int u = n; u < Tn; ++u) row[u] = 0;
  if (logp == nullptr) return;
  // logp beyond t is never read (the next layer's KL reads u <= t), so it is not written.
  const T kl = prev_logp != nullptr ? neg_entropy - cross : T(0);
  const T log_positions = std::log(T(n));
  features[0] = t == 0 ? T(0) : -neg_entropy / log_positions;
  features[1] = kl;
  features[2] = mx + log_sum - log_positions;
}

}  // namespace

// Causal blocking: rows are processed in blocks of kRowBlock; block [r0, r1) only needs keys
// [0, r1), so the products skip most of the masked upper triangle (5/8 of the full work at T = 256).
constexpr int kRowBlock = 64;

int64_t attention_executed_pairs(int Tn) {
  int64_t pairs = 0;
  for (int r0 = 0; r0 < Tn; r0 += kRowBlock) pairs += int64_t(std::min(Tn, r0 + kRowBlock) - r0) * std::min(Tn, r0 + kRowBlock);
  return pairs;
}

int64_t attention_statistics_flops(int B, int H, int Tn, bool with_kl) {
  // Per row t with n = t + 1 keys (causal_softmax_row): the shift n, log(sum) 1, the subtraction n,
  // the entropy dot 2n, log(n) 1, the normalised entropy 2 (t > 0), the log-partition 2; KL adds its
  // dot 2n and a subtraction.
  int64_t per_head = 0;
  for (int t = 0; t < Tn; ++t) {
    const int64_t n = t + 1;
    per_head += 4 * n + 4 + (t > 0 ? 2 : 0) + (with_kl ? 2 * n + 1 : 0);
  }
  return int64_t(B) * H * per_head;
}

template <typename T>
void attention_forward(T* out, T* probs, const AttentionStats<T>* stats, const T* qkv, int B, int Tn, int D, int H) {
  const PhaseScope phase_scope(Phase::attention);
  if (stats != nullptr) count_controller_flops(attention_statistics_flops(B, H, Tn, stats->prev_logp != nullptr));
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
    T* y = out + int64_t(b) * Tn * D + h * dh;
    for (int r0 = 0; r0 < Tn; r0 += kRowBlock) {
      const int r1 = std::min(Tn, r0 + kRowBlock), rows = r1 - r0;
      T* pb = p + int64_t(r0) * Tn;
      gemm<T>(false, true, rows, r1, dh, scale, q + int64_t(r0) * ld, ld, k, ld, T(0), pb, Tn);  // S = scale Q K^T
      for (int t = r0; t < r1; ++t) {
        T* logp = stats ? stats->logp + bh * TT + int64_t(t) * Tn : nullptr;
        const T* prev = stats && stats->prev_logp ? stats->prev_logp + bh * TT + int64_t(t) * Tn : nullptr;
        T* feat = stats ? stats->head_features + (int64_t(bh) * Tn + t) * 3 : nullptr;
        causal_softmax_row(p + int64_t(t) * Tn, t, Tn, logp, prev, feat);
      }
      gemm<T>(false, false, rows, dh, r1, T(1), pb, Tn, v, ld, T(0), y + int64_t(r0) * D, D);  // Y = P V
    }
  }
}

template <typename T>
void causal_softmax(T* scores, int heads, int Tn) {
  const PhaseScope phase_scope(Phase::attention);
#pragma omp parallel for schedule(static)
  for (int h = 0; h < heads; ++h)
    for (int t = 0; t < Tn; ++t)
      causal_softmax_row<T>(scores + (int64_t(h) * Tn + t) * Tn, t, Tn, nullptr, nullptr, nullptr);
}
template void causal_softmax<float>(float*, int, int);

template <typename T>
void attention_backward(T* dqkv, T* scratch, const T* dout, const T* probs, const T* qkv, int B, int Tn, int D,
                        int H) {
  const PhaseScope phase_scope(Phase::attention);
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
    // Row blocks from last to first: the last block reaches every key, so its dK and dV products
    // initialise them (beta 0) and the earlier, shorter blocks accumulate (beta 1) in a fixed order.
    const int last_r0 = (Tn - 1) / kRowBlock * kRowBlock;
    for (int r0 = last_r0; r0 >= 0; r0 -= kRowBlock) {
      const int r1 = std::min(Tn, r0 + kRowBlock), rows = r1 - r0;
      const T beta = r1 == Tn ? T(0) : T(1);
      const T* pb = p + int64_t(r0) * Tn;
      T* dsb = ds + int64_t(r0) * Tn;
      gemm<T>(false, true, rows, r1, dh, T(1), dy + int64_t(r0) * D, D, v, ld, T(0), dsb, Tn);  // dP = dY V^T
      gemm<T>(true, false, r1, dh, rows, T(1), pb, Tn, dy + int64_t(r0) * D, D, beta, dv, ld);  // dV += P^T dY
      for (int t = r0; t < r1; ++t) {  // dS = P * (dP - rowsum(P * dP)), zero above the diagonal
        const T* pr = p + int64_t(t) * Tn;
        T* r = ds + int64_t(t) * Tn;
        const T dot = lane_dot(pr, r, t + 1);
        for (int u = 0; u <= t; ++u) r[u] = pr[u] * (r[u] - dot);
        for (int u = t + 1; u < r1; ++u) r[u] = 0;
      }
      gemm<T>(false, false, rows, dh, r1, scale, dsb, Tn, k, ld, T(0), dq + int64_t(r0) * ld, ld);  // dQ = s dS K
      gemm<T>(true, false, r1, dh, rows, scale, dsb, Tn, q + int64_t(r0) * ld, ld, beta, dk, ld);   // dK += s dS^T Q
    }
  }
}

template void attention_forward<float>(float*, float*, const AttentionStats<float>*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, const AttentionStats<double>*, const double*, int, int, int,
                                        int);
template void attention_backward<float>(float*, float*, const float*, const float*, const float*, int, int, int, int);
template void attention_backward<double>(double*, double*, const double*, const double*, const double*, int, int, int,
                                         int);

}  // namespace fca
