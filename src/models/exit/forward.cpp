#include "models/exit/forward.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/exec_counters.h"
#include "models/base/block.h"
#include "ops/attention.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"

namespace fca {

template <typename T>
template <typename A>
void ExitRunState<T>::layout(A& a, int windows) {
  const int64_t N = int64_t(windows) * max_tokens, D = config.d_model;
  take_block_activations(a, block, N, 0, D, true);
  x = a.template take<T>(N * D);
  rows = a.template take<int32_t>(N);
  window_rows = a.template take<int64_t>(windows + 1);
  positions = a.template take<int32_t>(N);
  frozen = a.template take<T>(N * D);
  depth = a.template take<int32_t>(N);
  kv = a.template take<T>(N * 2 * D);
  propagated = a.template take<int32_t>(N);
  propagated_ln = a.template take<T>(N * D);
  propagated_kv = a.template take<T>(N * 2 * D);
  classifier.z = a.template take<T>(N * D);
  classifier.mean = a.template take<T>(N);
  classifier.rstd = a.template take<T>(N);
  classifier.scores = a.template take<T>(N);
  exits = a.template take<uint8_t>(N);
  scratch_threads = omp_get_max_threads();
  attn_scratch = a.template take<T>(scratch_threads * attention_scratch_per_thread(max_tokens, config.head_dim(), false));
  ln_f_out = a.template take<T>(N * D);
  ln_f_mean = a.template take<T>(N);
  ln_f_rstd = a.template take<T>(N);
  logits = a.template take<T>(N * kByteVocab);
  losses = a.template take<T>(N);
  tokens_in = a.template take<int32_t>(N);
  targets = a.template take<int32_t>(N);
  prefix_state = a.template take<T>(N * D);
}

template <typename T>
ExitRunState<T>::ExitRunState(const ExitConfig& config_, int max_batch_, int max_tokens_)
    : config(config_), max_batch(max_batch_), max_tokens(max_tokens_) {
  arena = Arena::for_windows(max_batch, [this](auto& a, int windows) { layout(a, windows); });
}

namespace {

// Block k's K/V of the exited rows its active queries can see (need-based propagation, docs/exit.md):
// per window, every row u < the last active position that is not running. Returns |P_k|; the
// rows go to rs.propagated. K/V rows past the last active position up to the end of its attention
// tile (which the kernel reads with probability 0) are zeroed, so that nothing stale is read.
template <typename T>
int64_t propagation_rows(ExitRunState<T>& rs, int B, int Tn, int D) {
  int64_t np = 0;
  for (int b = 0; b < B; ++b) {
    const int64_t first = rs.window_rows[b], last = rs.window_rows[b + 1];
    if (first == last) continue;
    const int t_max = rs.positions[last - 1];
    int64_t next_active = first;
    for (int u = 0; u < t_max; ++u) {
      if (next_active < last && rs.positions[next_active] == u) {
        ++next_active;
        continue;
      }
      rs.propagated[np++] = int32_t(int64_t(b) * Tn + u);
    }
    const int key_end = int(attention_row_pairs(t_max, Tn));
    for (int u = t_max + 1; u < key_end; ++u) std::fill_n(rs.kv + (int64_t(b) * Tn + u) * 2 * D, 2 * D, T(0));
  }
  return np;
}

}  // namespace

template <typename T>
void exit_forward(const ExitModel<T>& model, ExitRunState<T>& rs, const int32_t* tokens, int B, int Tn,
                  ExitDepthSource<T>& depths, int first_window) {
  const ExitConfig& c = model.config();
  const BatchPosition position = begin_pass(rs, B, Tn, c.seq_len, first_window);
  const int D = c.d_model, H = c.n_head, L = c.n_layer, m = c.min_exit;
  const int64_t N = int64_t(B) * Tn;
  const auto& w = model.weights();
  ExecCounters* counters = exec_counters();
  // A replay of the windows of the last pass starts after block m (nothing before it depends on a
  // decision); a live pass never reuses (the audit enables reuse for its replays only).
  const bool reuse = !depths.evaluates_controller() && rs.prefix.reusable(tokens, B, Tn, rs.tokens_in);
  if (reuse) {
    ++rs.prefix.reused_passes;
    std::memcpy(rs.x, rs.prefix_state, sizeof(T) * size_t(N) * size_t(D));
  } else {
    rs.prefix.invalidate();
    for (int64_t i = 0; i < N; ++i) {
      if (tokens[i] < 0 || tokens[i] >= kByteVocab) throw Error("token id " + std::to_string(tokens[i]) + " is outside [0, 256)");
      rs.tokens_in[i] = tokens[i];
    }
    embedding_forward(rs.x, tokens, w.wte, w.wpe, B, Tn, D);
  }
  int64_t n = N;
  for (int64_t i = 0; i < N; ++i) {
    rs.rows[i] = int32_t(i);
    rs.positions[i] = int32_t(i % Tn);
  }
  rs.active_rows.assign(size_t(L), 0);
  rs.propagated_rows.assign(size_t(L), 0);
  depths.begin(position);
  BlockActivations<T>& a = rs.block;
  // Block k on the n running rows.
  auto run_block = [&](int k) {
    const auto& p = w.blocks[size_t(k - 1)];
    if (counters != nullptr) {
      counters->blocks_executed.fetch_add(1, std::memory_order_relaxed);
      counters->routed_rows.fetch_add(n, std::memory_order_relaxed);
    }
    rs.active_rows[size_t(k - 1)] = n;
    for (int b = 0, i = 0; b <= B; ++b) {  // rows are in (window, position) order
      while (i < n && rs.rows[i] / Tn < b) ++i;
      rs.window_rows[b] = i;
    }
    // The exited rows' keys and values: block k's ln1 and K/V projection of their frozen states.
    const int64_t np = propagation_rows(rs, B, Tn, D);
    rs.propagated_rows[size_t(k - 1)] = np;
    if (np > 0) {
      count_family(kPropagatedRows, np);
#pragma omp parallel for schedule(static)
      for (int64_t j = 0; j < np; ++j)
        std::memcpy(a.ln2_out + j * D, rs.frozen + int64_t(rs.propagated[j]) * D, sizeof(T) * size_t(D));
      layernorm_forward(rs.propagated_ln, a.ln2_mean, a.ln2_rstd, a.ln2_out, p.ln1_weight, p.ln1_bias, np, D);
      linear_forward(rs.propagated_kv, rs.propagated_ln, p.qkv_weight + int64_t(D) * D, p.qkv_bias + D, int(np), D, 2 * D);
#pragma omp parallel for schedule(static)
      for (int64_t j = 0; j < np; ++j)
        std::memcpy(rs.kv + int64_t(rs.propagated[j]) * 2 * D, rs.propagated_kv + j * 2 * D, sizeof(T) * size_t(2 * D));
    }
    // The running rows: the pre-norm block on n rows (the operations of attention_half_forward and
    // dense_mlp_forward, with attention over the running queries only).
    layernorm_forward(a.ln1_out, a.ln1_mean, a.ln1_rstd, rs.x, p.ln1_weight, p.ln1_bias, n, D);
    linear_forward(a.qkv, a.ln1_out, p.qkv_weight, p.qkv_bias, int(n), D, 3 * D);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(rs.kv + int64_t(rs.rows[i]) * 2 * D, a.qkv + i * 3 * D + D, sizeof(T) * size_t(2 * D));
    attention_rows_forward(a.attn_out, D, rs.attn_scratch, a.qkv, 3 * D, rs.kv, rs.positions, rs.window_rows, B, Tn, D, H);
    linear_forward(a.u, a.attn_out, p.proj_weight, p.proj_bias, int(n), D, D);
    residual_layernorm_forward(a.ln2_in, a.ln2_out, a.ln2_mean, a.ln2_rstd, rs.x, a.u, p.ln2_weight, p.ln2_bias, n, D);
    dense_mlp_forward(a, p, int(n), D);
    T* x = rs.x;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n * D; ++i) x[i] = x[i] + a.update[i];
    if (k == m && rs.prefix.enabled) {  // every row ran blocks 1..m: keep their output for the next replay
      std::memcpy(rs.prefix_state, rs.x, sizeof(T) * size_t(N) * size_t(D));
      rs.prefix.computed(B, Tn);
    }
  };
  for (int k = 1; k <= L && n > 0; ++k) {
    if (!(reuse && k <= m)) run_block(k);  // blocks 1..m of a reused prefix: the kept state
    if (k < m || k == L) continue;
    // Exit point k: the source decides; exiting rows freeze, the others move up (stable).
    depths.route(k, position, int(n), rs.rows, rs.x, rs.classifier, rs.exits);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t row = rs.rows[i];
      if (rs.exits[i]) {
        std::memcpy(rs.frozen + int64_t(row) * D, rs.x + i * D, sizeof(T) * size_t(D));
        rs.depth[row] = k;
        continue;
      }
      if (kept != i) {
        std::memcpy(rs.x + kept * D, rs.x + i * D, sizeof(T) * size_t(D));
        rs.rows[kept] = row;
        rs.positions[kept] = rs.positions[i];
      }
      ++kept;
    }
    n = kept;
  }
  for (int64_t i = 0; i < n; ++i) {  // the rows that ran every block
    std::memcpy(rs.frozen + int64_t(rs.rows[i]) * D, rs.x + i * D, sizeof(T) * size_t(D));
    rs.depth[rs.rows[i]] = L;
  }
  // The head, once per token whatever its depth.
  layernorm_forward(rs.ln_f_out, rs.ln_f_mean, rs.ln_f_rstd, rs.frozen, w.ln_f_weight, w.ln_f_bias, N, D);
  gemm<T>(false, true, int(N), kByteVocab, D, T(1), rs.ln_f_out, D, w.wte, D, T(0), rs.logits, kByteVocab);
}

template <typename T>
double exit_loss(ExitRunState<T>& rs, const int32_t* targets, double* window_nll) {
  return language_model_loss(rs.losses, rs.targets, rs.logits, targets, rs.batch, rs.tokens, kByteVocab, window_nll);
}

#define FCA_INSTANTIATE(T)                                                                                        \
  template struct ExitRunState<T>;                                                                                \
  template void exit_forward<T>(const ExitModel<T>&, ExitRunState<T>&, const int32_t*, int, int, ExitDepthSource<T>&, \
                                int);                                                                             \
  template double exit_loss<T>(ExitRunState<T>&, const int32_t*, double*);
FCA_INSTANTIATE(float)
FCA_INSTANTIATE(double)
#undef FCA_INSTANTIATE

}  // namespace fca
