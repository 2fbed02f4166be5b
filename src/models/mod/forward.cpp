#include "models/mod/forward.h"

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
void ModRunState<T>::layout(A& a, int windows) {
  const int64_t N = int64_t(windows) * max_tokens, D = config.d_model, L = config.n_layer;
  const int64_t K = config.selected_tokens(max_tokens), Ns = int64_t(windows) * K;
  const int kept = keep_all_layers ? int(L) : 1;
  blocks.assign(size_t(L), {});
  routed.assign(size_t(L), {});
  for (int l = 0; l < kept; ++l) {
    // Inference reuses one full-size set for every block (a routed block needs fewer rows).
    const bool sub = keep_all_layers && config.routed(l);
    const int64_t seq = sub ? K : max_tokens;
    take_block_activations(a, blocks[size_t(l)], sub ? Ns : N, keep_all_layers ? int64_t(windows) * config.n_head * seq * seq : 0, D, true);
  }
  for (int l = kept; l < L; ++l) blocks[size_t(l)] = blocks[0];
  for (int l = 0; l < L; ++l) {
    if (!config.routed(l)) continue;
    auto& r = routed[size_t(l)];
    r.scores = a.template take<T>(N);
    r.rows = a.template take<int32_t>(Ns);
    r.weights = a.template take<T>(Ns);
    r.h_sub = a.template take<T>(Ns * D);
  }
  this->take_stream(a, int(L), N, D, int(D / config.n_head), max_tokens, keep_all_layers);
  const int64_t nb = keep_all_layers ? N : 0, sb = keep_all_layers ? Ns : 0;
  d_wide = a.template take<T>(nb * 4 * D);
  d_sub = a.template take<T>(sb * D);
  d_sel = a.template take<T>(sb * D);
  d_sig = a.template take<T>(sb);
}

template <typename T>
ModRunState<T>::ModRunState(const ModConfig& config_, int max_batch_, int max_tokens_, bool keep_all_layers_)
    : config(config_), max_batch(max_batch_), max_tokens(max_tokens_), keep_all_layers(keep_all_layers_) {
  arena = Arena::for_windows(max_batch, [this](auto& a, int windows) { layout(a, windows); });
}

template <typename T>
void mod_forward(const ModModel<T>& model, ModRunState<T>& rs, const int32_t* tokens, int B, int Tn,
                 ModRoutingSource<T>& routing, int first_window) {
  const ModConfig& c = model.config();
  const BatchPosition position = begin_pass(rs, B, Tn, c.seq_len, first_window);
  const int D = c.d_model, H = c.n_head, L = c.n_layer, K = c.selected_tokens(Tn);
  const int64_t N = int64_t(B) * Tn, Ns = int64_t(B) * K;
  const auto& w = model.weights();
  rs.selected = K;
  rs.live_router = routing.evaluates_controller();
  ExecCounters* counters = exec_counters();
  stream_embed(rs, tokens, w.wte, w.wpe, B, Tn, D);
  for (int l = 0; l < L; ++l) {
    const auto& p = w.blocks[size_t(l)];
    auto& a = rs.blocks[size_t(l)];
    const T* h = rs.hidden[size_t(l)];
    T* next = rs.hidden[size_t(l + 1)];
    if (counters != nullptr) counters->blocks_executed.fetch_add(1, std::memory_order_relaxed);
    if (!c.routed(l)) {
      dense_block_forward(a, rs.attn_scratch, p, h, next, B, Tn, D, H);
      continue;
    }
    auto& r = rs.routed[size_t(l)];
    routing.route(l, position, K, h, r.scores, r.rows, r.weights);
    if (counters != nullptr) counters->routed_rows.fetch_add(Ns, std::memory_order_relaxed);
    gather_rows(r.h_sub, h, r.rows, Ns, D);
    attention_half_forward(a, rs.attn_scratch, p, r.h_sub, B, K, D, H, static_cast<const AttentionStats<T>*>(nullptr));
    dense_mlp_forward(a, p, int(Ns), D);
    std::copy(h, h + N * D, next);
    scatter_add_rows(next, a.update, r.rows, r.weights, Ns, D);
    count_mixing_flops(2 * Ns * D);  // h + w F on the selected rows
  }
  stream_head_forward(rs, w.ln_f_weight, w.ln_f_bias, w.wte, L, N, D);
}

template <typename T>
double mod_loss(ModRunState<T>& rs, const int32_t* targets, double* window_nll) {
  return language_model_loss(rs.losses, rs.targets, rs.logits, targets, rs.batch, rs.tokens, kByteVocab, window_nll);
}

template <typename T>
void mod_backward(const ModModel<T>& model, ModRunState<T>& rs, ModModel<T>& grads, T loss_scale) {
  if (!rs.keep_all_layers) throw Error("MoD backward needs a run state that keeps every layer's activations");
  if (!rs.live_router) throw Error("MoD backward needs a live pass (the router's gradient)");
  if (omp_get_max_threads() > rs.scratch_threads)
    throw Error("backward: run state was sized for " + std::to_string(rs.scratch_threads) + " threads, now " +
                std::to_string(omp_get_max_threads()));
  const ModConfig& c = model.config();
  const int D = c.d_model, H = c.n_head, L = c.n_layer, B = rs.batch, Tn = rs.tokens, K = rs.selected;
  const int64_t N = int64_t(B) * Tn, Ns = int64_t(B) * K;
  const auto& w = model.weights();
  auto& dw = grads.weights();

  stream_head_backward(rs, dw.wte, dw.ln_f_weight, dw.ln_f_bias, w.ln_f_weight, w.wte, loss_scale, L, N, D);
  const BlockGradScratch<T> scratch{rs.d_u, rs.d_ln2_in, rs.d_small, rs.d_wide, rs.d_qkv, rs.attn_scratch};
  for (int l = L - 1; l >= 0; --l) {
    const auto& p = w.blocks[size_t(l)];
    auto& dp = dw.blocks[size_t(l)];
    const auto& a = rs.blocks[size_t(l)];
    const T* h = rs.hidden[size_t(l)];
    if (!c.routed(l)) {  // h_{l+1} = h + F: dF = dh, and dh keeps its identity path
      std::copy(rs.d_hidden, rs.d_hidden + N * D, rs.d_update);
      dense_mlp_backward(dp, scratch, a, p, rs.d_update, int(N), D);
      attention_half_backward(rs.d_hidden, dp, scratch, a, p, h, rs.d_update, B, Tn, D, H);
      continue;
    }
    const auto& r = rs.routed[size_t(l)];
    // h_{l+1,t} = h_t + sig_t F_t on the selected rows: dF = sig dh, dsig = <dh, F>.
    gather_rows(rs.d_sel, rs.d_hidden, r.rows, Ns, D);
    gated_residual_backward(rs.d_update, rs.d_sig, rs.d_sel, r.weights, a.update, Ns, D);
    // The router: s = h . w + b, dsig/ds = sig (1 - sig); its rows are summed in row order.
    T* drw = dw.router_weight[size_t(l)];
    for (int64_t i = 0; i < Ns; ++i) {
      const T ds = rs.d_sig[i] * r.weights[i] * (T(1) - r.weights[i]);
      rs.d_sig[i] = ds;
      dw.router_bias[size_t(l)][0] += ds;
    }
#pragma omp parallel for schedule(static)
    for (int d = 0; d < D; ++d) {
      T acc = 0;
      for (int64_t i = 0; i < Ns; ++i) acc += rs.d_sig[i] * h[int64_t(r.rows[i]) * D + d];
      drw[d] += acc;
    }
    const T* rw = w.router_weight[size_t(l)];
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < Ns; ++i) {
      T* dh = rs.d_hidden + int64_t(r.rows[i]) * D;
      for (int d = 0; d < D; ++d) dh[d] += rs.d_sig[i] * rw[d];
    }
    // The block on the subsequence; its input gradient goes back to the selected rows.
    std::fill(rs.d_sub, rs.d_sub + Ns * D, T(0));
    dense_mlp_backward(dp, scratch, a, p, rs.d_update, int(Ns), D);
    attention_half_backward(rs.d_sub, dp, scratch, a, p, r.h_sub, rs.d_update, B, K, D, H);
    scatter_add_rows(rs.d_hidden, rs.d_sub, r.rows, static_cast<const T*>(nullptr), Ns, D);
  }
  embedding_backward(dw.wte, dw.wpe, rs.d_hidden, rs.tokens_in, B, Tn, D);
}

#define FCA_INSTANTIATE(T)                                                                                         \
  template struct ModRunState<T>;                                                                                  \
  template void mod_forward<T>(const ModModel<T>&, ModRunState<T>&, const int32_t*, int, int, ModRoutingSource<T>&, \
                               int);                                                                               \
  template double mod_loss<T>(ModRunState<T>&, const int32_t*, double*);                                           \
  template void mod_backward<T>(const ModModel<T>&, ModRunState<T>&, ModModel<T>&, T);
FCA_INSTANTIATE(float)
FCA_INSTANTIATE(double)
#undef FCA_INSTANTIATE

}  // namespace fca
