// The shared base of every model family built from the pre-norm transformer block of the
// gated family's definition (docs/model.md; src/models/base/): one block's saved activations and the residual
// stream's state (hidden states, tied byte head, backward scratch), carved from one arena.
#pragma once
#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/attention.h"

namespace fca {

inline constexpr int kByteVocab = 256;                     // V: every byte is a token

// One block's saved activations. N = B*T' rows.
template <typename T>
struct BlockActivations {
  T* ln1_out;  // [N, D]
  T* ln1_mean; T* ln1_rstd;  // [N]
  T* qkv;      // [N, 3D]
  T* probs;    // [B, H, T', T'] attention probabilities (exact zeros above the diagonal); null without backward
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
// attention probabilities of `attn` entries ([B, H, T', T']; 0 for a run state without backward:
// probs is then null and attention keeps each tile's probabilities in its scratch); dense_mlp adds fc_pre and fc_act
// [rows, 4D] (the MoE's experts keep their own row buffers). Shared by every family built from
// the pre-norm block (gated, moe, mod), so that no buffer can be forgotten in one of them.
template <typename T, typename A>
void take_block_activations(A& a, BlockActivations<T>& b, int64_t rows, int64_t attn, int64_t D, bool dense_mlp) {
  b.ln1_out = a.template take<T>(rows * D);
  b.ln1_mean = a.template take<T>(rows);
  b.ln1_rstd = a.template take<T>(rows);
  b.qkv = a.template take<T>(rows * 3 * D);
  b.probs = attn > 0 ? a.template take<T>(attn) : nullptr;
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
// the pre-norm block shares (gated, moe, mod): run states derive from it and carve it with
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

}  // namespace fca
