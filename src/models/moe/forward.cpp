#include "models/moe/forward.h"

#include <omp.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/exec_counters.h"
#include "models/base/block.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/rows.h"
#include "models/base/stream.h"

namespace fca {

template <typename T>
template <typename A>
void MoeRunState<T>::layout(A& a, int windows) {
  const int64_t N = int64_t(windows) * max_tokens, D = config.d_model, L = config.n_layer;
  const int64_t E = config.n_expert, k = config.top_k, F = config.hidden();
  const int64_t S = dense_experts ? E : k, R = N * S;
  const int64_t attn = keep_all_layers ? int64_t(windows) * config.n_head * max_tokens * max_tokens : 0;  // backward only
  const int kept = keep_all_layers ? int(L) : 1;
  blocks.assign(size_t(L), {});
  layers.assign(size_t(L), {});
  for (int l = 0; l < kept; ++l) {
    take_block_activations(a, blocks[size_t(l)], N, attn, D, false);
    auto& s = layers[size_t(l)];
    s.x = a.template take<T>(R * D);
    s.pre = a.template take<T>(R * F);
    s.act = a.template take<T>(R * F);
    s.y = a.template take<T>(R * D);
  }
  // Routing is small and kept per layer in every mode (exec reads the expert loads of each layer).
  for (int l = 0; l < L; ++l) {
    auto& s = layers[size_t(l)];
    if (l >= kept) s = layers[0];
    s.probs = a.template take<T>(N * E);
    s.experts = a.template take<int32_t>(N * k);
    s.weights = a.template take<T>(N * k);
    s.offsets = a.template take<int64_t>(E + 1);
    s.entry_rows = a.template take<int32_t>(N * S);
    s.entry_weights = a.template take<T>(N * S);
    s.row_tokens = a.template take<int32_t>(R);
  }
  for (int l = kept; l < L; ++l) blocks[size_t(l)] = blocks[0];
  this->take_stream(a, int(L), N, D, int(D / config.n_head), max_tokens, keep_all_layers);
  const int64_t nb = keep_all_layers ? N : 0, rb = keep_all_layers ? R : 0;
  d_x = a.template take<T>(rb * D);
  d_act = a.template take<T>(rb * F);
  d_y = a.template take<T>(rb * D);
  d_weights = a.template take<T>(nb * k);
  d_probs = a.template take<T>(nb * E);
}

template <typename T>
MoeRunState<T>::MoeRunState(const MoeConfig& config_, int max_batch_, int max_tokens_, bool keep_all_layers_,
                            bool dense_experts_)
    : config(config_), max_batch(max_batch_), max_tokens(max_tokens_), keep_all_layers(keep_all_layers_),
      dense_experts(dense_experts_) {
  arena = Arena::for_windows(max_batch, [this](auto& a, int windows) { layout(a, windows); });
}

namespace {

// Row plan of one layer from its routing: grouped, rows of expert e are the (token, slot) entries
// routed to e in token order; dense, expert e owns rows e*N .. e*N+N-1 (every token).
template <typename T>
void plan_rows(MoeLayerState<T>& s, int64_t N, int E, int k, bool dense) {
  if (dense) {
    for (int e = 0; e <= E; ++e) s.offsets[e] = int64_t(e) * N;
    for (int64_t n = 0; n < N; ++n) {
      for (int e = 0; e < E; ++e) {
        s.row_tokens[int64_t(e) * N + n] = int32_t(n);
        s.entry_rows[n * E + e] = int32_t(int64_t(e) * N + n);
        s.entry_weights[n * E + e] = T(0);
      }
      for (int j = 0; j < k; ++j) s.entry_weights[n * E + s.experts[n * k + j]] = s.weights[n * k + j];
    }
    return;
  }
  std::fill(s.offsets, s.offsets + E + 1, int64_t(0));
  for (int64_t i = 0; i < N * k; ++i) ++s.offsets[s.experts[i] + 1];
  for (int e = 0; e < E; ++e) s.offsets[e + 1] += s.offsets[e];
  std::vector<int64_t> next(s.offsets, s.offsets + E);
  for (int64_t n = 0; n < N; ++n)
    for (int j = 0; j < k; ++j) {
      const int64_t row = next[size_t(s.experts[n * k + j])]++;
      s.row_tokens[row] = int32_t(n);
      s.entry_rows[n * k + j] = int32_t(row);
      s.entry_weights[n * k + j] = s.weights[n * k + j];
    }
}

}  // namespace

template <typename T>
void moe_forward(const MoeModel<T>& model, MoeRunState<T>& rs, const int32_t* tokens, int B, int Tn,
                 MoeRoutingSource<T>& routing, int first_window) {
  const MoeConfig& c = model.config();
  const BatchPosition position = begin_pass(rs, B, Tn, c.seq_len, first_window);
  const int D = c.d_model, H = c.n_head, L = c.n_layer, E = c.n_expert, k = c.top_k, F = c.hidden();
  const int64_t N = int64_t(B) * Tn;
  const auto& w = model.weights();
  rs.live_router = routing.evaluates_controller();
  ExecCounters* counters = exec_counters();
  const int64_t S = rs.dense_experts ? E : k, R = N * S;
  stream_embed(rs, tokens, w.wte, w.wpe, B, Tn, D);
  for (int l = 0; l < L; ++l) {
    const auto& p = w.blocks[size_t(l)];
    auto& a = rs.blocks[size_t(l)];
    auto& s = rs.layers[size_t(l)];
    const T* h = rs.hidden[size_t(l)];
    if (counters != nullptr) counters->blocks_executed.fetch_add(1, std::memory_order_relaxed);
    attention_half_forward(a, rs.attn_scratch, p.attn, h, B, Tn, D, H, static_cast<const AttentionStats<T>*>(nullptr));
    routing.route(l, position, a.ln2_out, s.probs, s.experts, s.weights);
    plan_rows(s, N, E, k, rs.dense_experts);
    if (rs.live_router) {  // aux_l = E sum_e f_e P_e, f_e = share of the N k assignments, P_e = mean p_e
      count_controller_flops(int64_t(E) * (N + 4) + 1);
      s.aux = 0;
      for (int e = 0; e < E; ++e) {
        double P = 0;
        for (int64_t n = 0; n < N; ++n) P += s.probs[n * E + e];
        int64_t count = 0;
        for (int64_t i = 0; i < N * k; ++i) count += s.experts[i] == e ? 1 : 0;
        s.aux += double(count) / double(N * k) * (P / double(N));
      }
      s.aux *= E;
    }
    if (counters != nullptr) counters->routed_rows.fetch_add(R, std::memory_order_relaxed);
    gather_rows(s.x, a.ln2_out, s.row_tokens, R, D);
    grouped_mlp_forward(s.y, s.pre, s.act, s.x, p.fc_weight, p.fc_bias, p.proj_weight, p.proj_bias, s.offsets, E, D, F);
    std::copy(a.u, a.u + N * D, a.update);
    combine_rows(a.update, s.y, s.entry_rows, s.entry_weights, N, int(S), D, true);
    count_mixing_flops(2 * R * D);  // each routed row weighted and added
    T* next = rs.hidden[size_t(l + 1)];
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N * D; ++i) next[i] = h[i] + a.update[i];
  }
  stream_head_forward(rs, w.ln_f_weight, w.ln_f_bias, w.wte, L, N, D);
}

template <typename T>
double moe_loss(MoeRunState<T>& rs, const int32_t* targets, double* window_nll) {
  return language_model_loss(rs.losses, rs.targets, rs.logits, targets, rs.batch, rs.tokens, kByteVocab, window_nll);
}

template <typename T>
double moe_objective(const MoeRunState<T>& rs, double cross_entropy) {
  if (!rs.live_router) throw Error("the MoE objective needs a live pass (the auxiliary loss reads the router)");
  double aux = 0;
  for (const auto& s : rs.layers) aux += s.aux;
  return cross_entropy + rs.config.aux_loss * aux / double(rs.config.n_layer);
}

template <typename T>
void moe_backward(const MoeModel<T>& model, MoeRunState<T>& rs, MoeModel<T>& grads, T loss_scale) {
  if (!rs.keep_all_layers || rs.dense_experts) throw Error("MoE backward needs a run state with every layer kept and grouped experts");
  if (!rs.live_router) throw Error("MoE backward needs a live pass (the router's gradient)");
  if (omp_get_max_threads() > rs.scratch_threads)
    throw Error("backward: run state was sized for " + std::to_string(rs.scratch_threads) + " threads, now " +
                std::to_string(omp_get_max_threads()));
  const MoeConfig& c = model.config();
  const int D = c.d_model, H = c.n_head, L = c.n_layer, E = c.n_expert, k = c.top_k, F = c.hidden();
  const int B = rs.batch, Tn = rs.tokens;
  const int64_t N = int64_t(B) * Tn, R = N * k;
  const auto& w = model.weights();
  auto& dw = grads.weights();

  stream_head_backward(rs, dw.wte, dw.ln_f_weight, dw.ln_f_bias, w.ln_f_weight, w.wte, loss_scale, L, N, D);
  // d aux_l / d p[n, e] = E f_e / N; the objective weighs mean_l aux_l by alpha and the caller's
  // loss_scale sums positions, so each token's share is loss_scale * alpha / L * E * f_e.
  const T aux_scale = loss_scale * T(c.aux_loss / double(L) * E);
  for (int l = L - 1; l >= 0; --l) {
    const auto& p = w.blocks[size_t(l)];
    auto& dp = dw.blocks[size_t(l)];
    const auto& a = rs.blocks[size_t(l)];
    const auto& s = rs.layers[size_t(l)];
    const T* h = rs.hidden[size_t(l)];
    // h_{l+1} = h + F, F = u + y: dF = dh (the copy keeps it while d_hidden accumulates).
    std::copy(rs.d_hidden, rs.d_hidden + N * D, rs.d_update);
    combine_rows_backward(rs.d_y, rs.d_weights, rs.d_update, s.y, s.entry_rows, s.entry_weights, N, k, D);
    grouped_linear_backward(rs.d_act, dp.proj_weight, dp.proj_bias, rs.d_y, s.act, p.proj_weight, s.offsets, E, F, D);
    gelu_tanh_backward(rs.d_act, rs.d_act, s.pre, R * F);
    grouped_linear_backward(rs.d_x, dp.fc_weight, dp.fc_bias, rs.d_act, s.x, p.fc_weight, s.offsets, E, D, F);
    // d m: the experts' input gradients summed back per token, then the router's.
    combine_rows(rs.d_small, rs.d_x, s.entry_rows, static_cast<const T*>(nullptr), N, k, D, false);
    std::vector<double> f(size_t(E), 0.0);
    for (int64_t i = 0; i < N * k; ++i) f[size_t(s.experts[i])] += 1.0 / double(N * k);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* pn = s.probs + n * E;
      const int32_t* I = s.experts + n * k;
      const T* wn = s.weights + n * k;
      const T* dwn = rs.d_weights + n * k;
      T* dpn = rs.d_probs + n * E;
      for (int e = 0; e < E; ++e) dpn[e] = aux_scale * T(f[size_t(e)]);
      if (k == 1) {
        dpn[I[0]] += dwn[0];
      } else {  // w_j = p_Ij / S_n: dp_Ij = (dw_j - sum_i dw_i w_i) / S_n
        T sum_p = 0, dot = 0;
        for (int j = 0; j < k; ++j) sum_p += pn[I[j]], dot += dwn[j] * wn[j];
        for (int j = 0; j < k; ++j) dpn[I[j]] += (dwn[j] - dot) / sum_p;
      }
      // Softmax backward in place: dr_e = p_e (dp_e - sum_e' p_e' dp_e').
      T inner = 0;
      for (int e = 0; e < E; ++e) inner += pn[e] * dpn[e];
      for (int e = 0; e < E; ++e) dpn[e] = pn[e] * (dpn[e] - inner);
    }
    linear_backward(rs.d_small, dp.router, static_cast<T*>(nullptr), rs.d_probs, a.ln2_out, p.router, int(N), D, E, true);
    const BlockGradScratch<T> scratch{rs.d_u, rs.d_ln2_in, rs.d_small, nullptr, rs.d_qkv, rs.attn_scratch};
    attention_half_backward(rs.d_hidden, dp.attn, scratch, a, p.attn, h, rs.d_update, B, Tn, D, H);
  }
  embedding_backward(dw.wte, dw.wpe, rs.d_hidden, rs.tokens_in, B, Tn, D);
}

#define FCA_INSTANTIATE(T)                                                                                         \
  template struct MoeRunState<T>;                                                                                  \
  template void moe_forward<T>(const MoeModel<T>&, MoeRunState<T>&, const int32_t*, int, int, MoeRoutingSource<T>&, \
                               int);                                                                               \
  template double moe_loss<T>(MoeRunState<T>&, const int32_t*, double*);                                           \
  template double moe_objective<T>(const MoeRunState<T>&, double);                                                 \
  template void moe_backward<T>(const MoeModel<T>&, MoeRunState<T>&, MoeModel<T>&, T);
FCA_INSTANTIATE(float)
FCA_INSTANTIATE(double)
#undef FCA_INSTANTIATE

}  // namespace fca
