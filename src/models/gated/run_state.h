// Per-run state of the gated model: every activation of one forward pass (and what backward reads),
// carved from one arena sized once for the largest batch. Stable names (docs/model.md) address them:
// hidden.{l} = h_l, blocks.{l}.gate = g_l, blocks.{l}.features = phi_l, logits.
#pragma once
#include "models/prefix_reuse.h"
#include <omp.h>

#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "models/gated/config.h"
#include "ops/attention.h"

namespace fca {

// One block's saved activations. N = B*T' rows.
template <typename T>
struct GatedBlockActivations {
  T* ln1_out;  // [N, D]
  T* ln1_mean; T* ln1_rstd;  // [N]
  T* qkv;      // [N, 3D]
  T* probs;    // [B, H, T', T'] attention probabilities (exact zeros above the diagonal)
  T* attn_out; // [N, D] heads concatenated, before the output projection
  T* u;        // [N, D] attention update u_l
  T* ln2_in;   // [N, D] h_l + u_l
  T* ln2_out;  // [N, D]
  T* ln2_mean; T* ln2_rstd;  // [N]
  T* fc_pre;   // [N, 4D] before GELU
  T* fc_act;   // [N, 4D] after GELU
  T* update;   // [N, D] F_l = u_l + w_l
};

// Carves one block's activations from an arena (or ArenaMeasure) for `rows` rows of width D, with
// attention probabilities of `attn` entries ([B, H, T', T']); dense_mlp adds fc_pre and fc_act
// [rows, 4D] (the MoE's experts keep their own row buffers). Shared by every family built from
// the gated block (gated, moe, mod), so that no buffer can be forgotten in one of them.
template <typename T, typename A>
void take_block_activations(A& a, GatedBlockActivations<T>& b, int64_t rows, int64_t attn, int64_t D, bool dense_mlp) {
  b.ln1_out = a.template take<T>(rows * D);
  b.ln1_mean = a.template take<T>(rows);
  b.ln1_rstd = a.template take<T>(rows);
  b.qkv = a.template take<T>(rows * 3 * D);
  b.probs = a.template take<T>(attn);
  b.attn_out = a.template take<T>(rows * D);
  b.u = a.template take<T>(rows * D);
  b.ln2_in = a.template take<T>(rows * D);
  b.ln2_out = a.template take<T>(rows * D);
  b.ln2_mean = a.template take<T>(rows);
  b.ln2_rstd = a.template take<T>(rows);
  b.fc_pre = a.template take<T>(dense_mlp ? rows * 4 * D : 0);
  b.fc_act = a.template take<T>(dense_mlp ? rows * 4 * D : 0);
  b.update = a.template take<T>(rows * D);
}

// The residual stream, the tied byte head and the backward scratch that every family built from
// the gated block shares (gated, moe, mod): run states derive from it and carve it with
// take_stream(). N = B*T' rows of width D.
template <typename T>
struct StreamState {
  std::vector<T*> hidden;  // L+1 entries, [N, D]: h_0 .. h_L
  T* ln_f_out; T* ln_f_mean; T* ln_f_rstd;  // [N, D], [N], [N]
  T* logits;               // [N, 256]; overwritten by dlogits in backward
  T* losses;               // [N] per-position cross-entropy
  int32_t* tokens_in;      // [N] inputs of the last pass
  int32_t* targets;        // [N]
  // Backward scratch (empty unless `backward`): [N, D] except d_qkv [N, 3D]. attn_scratch:
  // attention_scratch_per_thread(T', dh, backward) per OpenMP thread (forward needs it too).
  T *d_hidden, *d_update, *d_u, *d_ln2_in, *d_small, *d_qkv;
  T* attn_scratch;
  int scratch_threads = 0;
  // Evaluations of controller code in this run state's passes, counted by the controller itself
  // (count_controller_evaluation); a replay must leave it unchanged.
  int64_t controller_evaluations = 0;

  template <typename A>
  void take_stream(A& a, int L, int64_t N, int64_t D, int head_dim, int max_tokens, bool backward) {
    hidden.assign(size_t(L + 1), nullptr);
    for (auto& h : hidden) h = a.template take<T>(N * D);
    ln_f_out = a.template take<T>(N * D);
    ln_f_mean = a.template take<T>(N);
    ln_f_rstd = a.template take<T>(N);
    logits = a.template take<T>(N * 256);
    losses = a.template take<T>(N);
    tokens_in = a.template take<int32_t>(N);
    targets = a.template take<int32_t>(N);
    const int64_t nb = backward ? N : 0;
    d_hidden = a.template take<T>(nb * D);
    d_update = a.template take<T>(nb * D);
    d_u = a.template take<T>(nb * D);
    d_ln2_in = a.template take<T>(nb * D);
    d_small = a.template take<T>(nb * D);
    d_qkv = a.template take<T>(nb * 3 * D);
    scratch_threads = omp_get_max_threads();
    attn_scratch = a.template take<T>(scratch_threads * attention_scratch_per_thread(max_tokens, head_dim, backward));
  }
};

template <typename T>
struct GatedRunState : StreamState<T> {
  // keep_all_layers: keep every block's activations (training, traces); otherwise one set is reused
  // by all layers (inference), which is all a forward pass needs.
  GatedRunState(const GatedConfig& config, int max_batch, int max_tokens, bool keep_all_layers);

  GatedConfig config;
  int max_batch, max_tokens;
  bool keep_all_layers;
  int batch = 0, tokens = 0;  // of the last forward pass

  // L entries. Without keep_all_layers, block 0 has its own set (its update F_0 stays for prefix
  // reuse) and blocks 1 .. L-1 share a second one.
  std::vector<GatedBlockActivations<T>> blocks;
  PrefixReuse prefix;      // h_0 and F_0 = blocks[0].update, kept for replays of the same windows
  T* gates;                // [L, N]   g_l
  T* features;             // [L, N, 4] phi_l (featuregate, live only)
  T* logp[2];              // [B, H, T', T'] log-softmax of the previous and current layer (featuregate)
  T* head_features;        // [B, H, T', 3]
  // Backward scratch beyond the stream's.
  T* d_wide;     // [N, 4D]
  T* d_gate;     // [N]

  size_t bytes() const { return arena.capacity(); }

 private:
  template <typename A>
  void layout(A& a);
  Arena arena;
};

}  // namespace fca
