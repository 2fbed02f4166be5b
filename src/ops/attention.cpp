#include "ops/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "core/exec_counters.h"
#include "core/phase_timer.h"
#include "core/threads.h"
#include "ops/fast_math.h"

namespace fca {
namespace {

// Softmax of one causal row in place (row[u] = s[t,u] for u <= t on entry, p[t,u] on exit, zeros
// for t < u < zero_to). With stats, also writes logp and the three head features. The arithmetic producing p is
// the same with and without stats, so replay (no stats) reproduces live runs bit for bit.
template <typename T>
void causal_softmax_row(T* row, int t, int zero_to, T* logp, const T* prev_logp, T* features) {
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
  for (int u = n; u < zero_to; ++u) row[u] = 0;
  if (logp == nullptr) return;
  // logp beyond t is never read (the next layer's KL reads u <= t), so it is not written.
  const T kl = prev_logp != nullptr ? neg_entropy - cross : T(0);
  const T log_positions = std::log(T(n));
  features[0] = t == 0 ? T(0) : -neg_entropy / log_positions;
  features[1] = kl;
  features[2] = mx + log_sum - log_positions;
}

}  // namespace

// Causal tiling: rows are processed in tiles of kRowTile; the scores of tile [r0, r1) are computed
// for keys [0, keys_of_tile(r1)), the causal range rounded up to kKeyRound columns (whole vectors
// on every target, so the count does not depend on the CPU) and capped at T; the masked rest of the
// tile's rows is zeroed by the softmax. P V runs over the same keys (the zeros add nothing). At
// T = 256 that executes 1.06x the causal triangle's pairs.
constexpr int kRowTile = 8;
static_assert(kRowTile == 8, "attention_scratch_per_thread (attention.h) sizes one tile of 8 rows");
template <typename T>
constexpr const T* kNoAddend = nullptr;  // tile_matmul writes its products, adding nothing
constexpr int kKeyRound = 16;

int keys_of_tile(int r1, int Tn) { return std::min(Tn, (r1 + kKeyRound - 1) / kKeyRound * kKeyRound); }

int64_t attention_executed_pairs(int Tn) {
  int64_t pairs = 0;
  for (int r0 = 0; r0 < Tn; r0 += kRowTile) {
    const int r1 = std::min(Tn, r0 + kRowTile);
    pairs += int64_t(r1 - r0) * keys_of_tile(r1, Tn);
  }
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

void check_attention_scratch_threads(int sized_for) {
  if (omp_get_max_threads() > sized_for)
    throw Error("attention: the run state's scratch was sized for " + std::to_string(sized_for) + " threads, now " +
                std::to_string(omp_get_max_threads()) + " (create the run state after setting the thread count)");
}

namespace {

// x^T of one head's [Tn, dh] columns of the qkv buffer (row stride ld) into buffer [dh, Tn], so that
// products with x^T read contiguous rows.
template <typename T>
const T* transposed_head(T* buffer, const T* x, int64_t ld, int Tn, int dh) {
  // Float: the GEMM's packer, which transposes squares in vector registers (buffer is one panel
  // Tn wide: buffer[i * Tn + u] = x[u * ld + i]).
  if constexpr (std::is_same_v<T, float>) {
    simd::pack_transposed(buffer, Tn, x, ld, dh);
  } else {
    // 16 x 16 blocks: each block reads 16 cache lines of x and writes 16 rows of 16 values.
    constexpr int kBlock = 16;
    for (int u0 = 0; u0 < Tn; u0 += kBlock)
      for (int i0 = 0; i0 < dh; i0 += kBlock) {
        const int u1 = std::min(Tn, u0 + kBlock), i1 = std::min(dh, i0 + kBlock);
        for (int i = i0; i < i1; ++i) {
          T* row = buffer + int64_t(i) * Tn;
          for (int u = u0; u < u1; ++u) row[u] = x[u * ld + i];
        }
      }
  }
  return buffer;
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* probs, T* scratch, const AttentionStats<T>* stats, const T* qkv, int B, int Tn, int D,
                       int H) {
  const PhaseScope phase_scope(Phase::attention);
  if (stats != nullptr) count_controller_flops(attention_statistics_flops(B, H, Tn, stats->prev_logp != nullptr));
  const int dh = D / H;
  const T scale = T(1) / std::sqrt(T(dh));
  const int ld = 3 * D;
  const int64_t TT = int64_t(Tn) * Tn;
  // Each (window, head) is one thread's work from start to end, so its results do not depend on
  // the batch, the thread count or which thread takes it (UnitRuns, core/threads.h).
  UnitRuns runs(thread_count());
  runs.reset(B * H);
#pragma omp parallel num_threads(runs.threads())
  run_units(runs, omp_get_thread_num(), [&](int bh) {
    const int b = bh / H, h = bh % H;
    const T* q = qkv + int64_t(b) * Tn * ld + h * dh;
    T* own = scratch + omp_get_thread_num() * attention_scratch_per_thread(Tn, dh, false);
    const T* kt = transposed_head(own, q + D, ld, Tn, dh);  // [dh, Tn]
    const T* v = q + 2 * D;
    T* p = probs != nullptr ? probs + bh * TT : nullptr;
    T* p_tile = own + int64_t(dh) * Tn;  // [kRowTile, Tn]: the tile's probabilities when probs is null
    T* y = out + int64_t(b) * Tn * D + h * dh;
    int64_t pairs = 0;  // (query, key) pairs of the tiles that ran
    for (int r0 = 0; r0 < Tn; r0 += kRowTile) {
      const int r1 = std::min(Tn, r0 + kRowTile), rows = r1 - r0, keys = keys_of_tile(r1, Tn);
      pairs += int64_t(rows) * keys;
      T* pb = p != nullptr ? p + int64_t(r0) * Tn : p_tile;  // row t of the tile at pb + (t - r0) Tn
      tile_matmul(pb, Tn, q + int64_t(r0) * ld, ld, 1, kt, Tn, rows, keys, dh, scale, kNoAddend<T>, 0);  // S = scale Q K^T
      for (int t = r0; t < r1; ++t) {
        T* logp = stats ? stats->logp + bh * TT + int64_t(t) * Tn : nullptr;
        const T* prev = stats && stats->prev_logp ? stats->prev_logp + bh * TT + int64_t(t) * Tn : nullptr;
        if (prev != nullptr && t + 1 < Tn)  // the next row of the previous layer's logp: cold, read once
          for (int u = 0; u <= t + 1; u += int(64 / sizeof(T))) __builtin_prefetch(prev + Tn + u);
        if (logp != nullptr && t + 1 < Tn)  // and the next row this layer's logp goes to
          for (int u = 0; u <= t + 1; u += int(64 / sizeof(T))) __builtin_prefetch(logp + Tn + u, 1);
        T* feat = stats ? stats->head_features + (int64_t(bh) * Tn + t) * 3 : nullptr;
        causal_softmax_row(pb + int64_t(t - r0) * Tn, t, keys, logp, prev, feat);
      }
      tile_matmul(y + int64_t(r0) * D, D, pb, Tn, 1, v, ld, rows, dh, keys, T(1), kNoAddend<T>, 0);  // Y = P V
    }
    // Two products, S = Q K^T and Y = P V, over the pairs the tiles ran: counted from the loop, so
    // that exec's check against attention_executed_pairs fails if a tile is skipped or repeated.
    count_gemm_flops(2 * 2 * pairs * dh, 2);
  });
}

int64_t attention_row_pairs(int t, int Tn) { return keys_of_tile(std::min(Tn, (t / kRowTile + 1) * kRowTile), Tn); }

template <typename T>
void attention_rows_forward(T* out, int64_t ldo, T* scratch, const T* q, int64_t ldq, const T* kv, const int32_t* pos,
                            const int64_t* row_begin, int B, int Tn, int D, int H) {
  const PhaseScope phase_scope(Phase::attention);
  const int dh = D / H;
  const T scale = T(1) / std::sqrt(T(dh));
  const int64_t ldkv = 2 * int64_t(D);
  // As attention_forward: one (window, head) per unit.
  UnitRuns runs(thread_count());
  runs.reset(B * H);
#pragma omp parallel num_threads(runs.threads())
  run_units(runs, omp_get_thread_num(), [&](int bh) {
    const int b = bh / H, h = bh % H;
    const int64_t first = row_begin[b], last = row_begin[b + 1];
    if (first == last) return;  // no active query in this window
    T* own = scratch + omp_get_thread_num() * attention_scratch_per_thread(Tn, dh, false);
    // Keys up to the last active query's tile: no row reads beyond them.
    const int key_count = int(attention_row_pairs(pos[last - 1], Tn));
    const T* k = kv + int64_t(b) * Tn * ldkv + h * dh;
    const T* kt = transposed_head(own, k, ldkv, key_count, dh);  // [dh, key_count]
    const T* v = k + D;
    T* s = own + int64_t(dh) * Tn;  // [kRowTile, Tn]: one tile's scores, then probabilities
    int64_t pairs = 0;
    for (int64_t i0 = first; i0 < last;) {
      // The active queries of one of the dense kernel's row tiles: the same key count per row.
      const int tile = pos[i0] / kRowTile;
      int64_t i1 = i0 + 1;
      while (i1 < last && pos[i1] / kRowTile == tile) ++i1;
      const int rows = int(i1 - i0), keys = int(attention_row_pairs(pos[i0], Tn));
      pairs += int64_t(rows) * keys;
      tile_matmul(s, Tn, q + i0 * ldq + h * dh, ldq, 1, kt, key_count, rows, keys, dh, scale, kNoAddend<T>, 0);
      for (int r = 0; r < rows; ++r)
        causal_softmax_row<T>(s + int64_t(r) * Tn, pos[i0 + r], keys, nullptr, nullptr, nullptr);
      tile_matmul(out + i0 * ldo + h * dh, ldo, s, Tn, 1, v, ldkv, rows, dh, keys, T(1), kNoAddend<T>, 0);
      i0 = i1;
    }
    count_gemm_flops(2 * 2 * pairs * dh, 2);
  });
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
    T* ds = scratch + omp_get_thread_num() * attention_scratch_per_thread(Tn, dh, true);  // [Tn, Tn]
    const T* vt = transposed_head(ds + TT, q + 2 * D, ld, Tn, dh);                      // [dh, Tn]
    const T* dy = dout + row0 * D + h * dh;
    T* dq = dqkv + row0 * ld + h * dh;
    T* dk = dq + D;
    T* dv = dq + 2 * D;
    const T* p = probs + bh * TT;
    // Query tiles: dP = dY V^T, then dS = P * (dP - rowsum(P * dP)) with zeros above the diagonal
    // (up to the tile's keys, which covers every entry the key tiles below read), then dQ = s dS K.
    // Four products per (window, head): dP and dQ over the query tiles' pairs, dV and dK over each
    // key tile's queries t >= u0; counted from the tiles that ran.
    int64_t query_tile_pairs = 0, key_tile_pairs = 0;
    for (int r0 = 0; r0 < Tn; r0 += kRowTile) {
      const int r1 = std::min(Tn, r0 + kRowTile), rows = r1 - r0, keys = keys_of_tile(r1, Tn);
      query_tile_pairs += int64_t(rows) * keys;
      T* dsb = ds + int64_t(r0) * Tn;
      tile_matmul(dsb, Tn, dy + int64_t(r0) * D, D, 1, vt, Tn, rows, keys, dh, T(1), kNoAddend<T>, 0);
      for (int t = r0; t < r1; ++t) {
        const T* pr = p + int64_t(t) * Tn;
        T* r = ds + int64_t(t) * Tn;
        const T dot = lane_dot(pr, r, t + 1);
        for (int u = 0; u <= t; ++u) r[u] = pr[u] * (r[u] - dot);
        for (int u = t + 1; u < keys; ++u) r[u] = 0;
      }
      tile_matmul(dq + int64_t(r0) * ld, ld, dsb, Tn, 1, k, ld, rows, dh, keys, scale, kNoAddend<T>, 0);
    }
    // Key tiles [u0, u1): dV = P^T dY and dK = s dS^T Q over the queries t >= u0 (P and dS are zero
    // for t < u), reading the transposes in place (A(i, p) = P[u0 + p, u0 + i]).
    for (int u0 = 0; u0 < Tn; u0 += kRowTile) {
      const int rows = std::min(Tn, u0 + kRowTile) - u0, queries = Tn - u0;
      const int64_t at = int64_t(u0) * Tn + u0;
      key_tile_pairs += int64_t(rows) * queries;
      tile_matmul(dv + int64_t(u0) * ld, ld, p + at, 1, Tn, dy + int64_t(u0) * D, D, rows, dh, queries, T(1), kNoAddend<T>, 0);
      tile_matmul(dk + int64_t(u0) * ld, ld, ds + at, 1, Tn, q + int64_t(u0) * ld, ld, rows, dh, queries, scale, kNoAddend<T>, 0);
    }
    count_gemm_flops(2 * 2 * (query_tile_pairs + key_tile_pairs) * dh, 4);
  }
}

template void attention_forward<float>(float*, float*, float*, const AttentionStats<float>*, const float*, int, int, int,
                                       int);
template void attention_forward<double>(double*, double*, double*, const AttentionStats<double>*, const double*, int, int,
                                        int, int);
template void attention_rows_forward<float>(float*, int64_t, float*, const float*, int64_t, const float*, const int32_t*,
                                           const int64_t*, int, int, int, int);
template void attention_rows_forward<double>(double*, int64_t, double*, const double*, int64_t, const double*,
                                            const int32_t*, const int64_t*, int, int, int, int);
template void attention_backward<float>(float*, float*, const float*, const float*, const float*, int, int, int, int);
template void attention_backward<double>(double*, double*, const double*, const double*, const double*, int, int, int,
                                         int);

}  // namespace fca
