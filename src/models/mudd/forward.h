// The MUDD forward pass (docs/mudd.md's "mode F" in float: fp16-rounded RoPE tables, exact GELU, parallel
// residual, QK RMSNorm before partial rotary, per-stream LayerNorms, DA modules, signed unnormalised
// mixing) with a live, recording or replayed coefficient source, and its backward pass.
#pragma once
#include "models/prefix_reuse.h"
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "models/mudd/coefficients.h"
#include "models/mudd/model.h"

namespace fca {

// One block's and DA module's saved activations; N = B*T rows.
template <typename T>
struct MuddLayerActivations {
  T* normed[3];            // [N, D] LayerNorm outputs feeding q, k, v (block 0: only [0])
  T* ln_mean[3];           // [N]
  T* ln_rstd[3];           // [N]
  T *q_raw, *k_raw;        // [N, D] projections before the QK-norm (keep_all_layers only: the backward's)
  T *q_rstd, *k_rstd;      // [N * H] QK-norm statistics
  T* qkv;                  // [N, 3D] normed and rotated q, k; v
  T* probs;                // [B, H, T, T]; null without keep_all_layers (no backward)
  T* attn_out;             // [N, D] heads concatenated
  T* attn_proj;            // [N, D] A
  T *ffn_mean, *ffn_rstd;  // [N]
  T* ffn_in;               // [N, D] LN_ffn(R)
  T* ffn_pre;              // [N, F_i]
  T* ffn_act;              // [N, F_i]
  T* ffn_out;              // [N, D] F
  MuddDaSaved<T> da;       // the DA generator's activations
  T* streams[4];           // [N, D] Y_i^c: the mixed streams made by DA module i
};

// Every activation of a pass, in one arena sized once for the largest batch. keep_all_layers keeps
// every layer's activations (training); otherwise layers share one set (inference). Stable names:
// hidden.{j} = X_j, layers.{i}.alpha, final_stream, logits.
template <typename T>
struct MuddRunState {
  MuddRunState(const MuddConfig& config, int max_batch, int max_tokens, bool keep_all_layers = false);
  MuddConfig config;
  int max_batch, max_tokens, batch = 0, tokens = 0;
  // Evaluations of the DA generator in this run state's passes, counted by the generator itself
  // (count_controller_evaluation); a replay must leave it unchanged.
  int64_t controller_evaluations = 0;
  bool keep_all_layers;
  std::vector<MuddLayerActivations<T>> layers;  // L entries (aliases of one set when not keeping all)
  std::vector<T*> hidden;   // L+1 x [N, D]: the kept sources X_0 .. X_L
  PrefixReuse prefix;       // X_0 and X_1 (block 0's output), kept for replays of the same windows
  std::vector<T*> alpha;    // L x [N, C_i * S_i]
  T *final_mean, *final_rstd, *final_normed;  // [N], [N], [N, D]
  T* logits;                // [N, V]; overwritten by dlogits in backward
  T* losses;                // [N]
  int32_t *tokens_in, *targets;  // [N]
  T *rope_cos, *rope_sin;   // [block_size, rot/2]
  // Backward buffers (training only).
  std::vector<T*> d_hidden;  // L+1 x [N, D] accumulators for dL/dX_j
  T* d_streams[4];           // [N, D] gradients of the streams of the DA being processed
  T *d_a, *d_b, *d_c;        // [N, D] scratch
  T* d_qkv;                  // [N, 3D]
  T* d_wide;                 // [N, max(F_i, H_i)]
  T* d_alpha;                // [N, 4 (L+1)]
  T* attn_scratch;           // attention_scratch_per_thread(T, dh, backward) per thread
  int scratch_threads = 0;
  T* final_stream() const { return layers.back().streams[0]; }
  size_t bytes() const { return arena.capacity(); }

 private:
  template <typename A>
  void layout(A& a, int windows);  // the buffers of `windows` windows (Arena::for_windows)
  Arena arena;
};

// tokens [B, T] (ids < vocab_size, T <= block_size). Throws Error on bad ids or sizes.
template <typename T>
void mudd_forward(const MuddModel<T>& model, MuddRunState<T>& rs, const int32_t* tokens, int B, int Tn,
                  MuddCoefficientSource<T>& source, int first_window = 0);

// Per-window mean NLL of the last pass against targets [B, T] over all vocab rows; returns the mean.
template <typename T>
double mudd_loss(MuddRunState<T>& rs, const int32_t* targets, double* window_nll);

// Adds loss_scale * d(sum of per-position losses)/d(parameters) of the last pass into `grads`.
// Needs keep_all_layers and a live source (gradients reach the DA generators).
template <typename T>
void mudd_backward(const MuddModel<T>& model, MuddRunState<T>& rs, MuddModel<T>& grads, T loss_scale);

}  // namespace fca
