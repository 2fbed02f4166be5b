// The MUDD forward pass in fp32 (spec "mode F": fp16-rounded RoPE tables, exact GELU, parallel
// residual, QK RMSNorm before partial rotary, per-stream LayerNorms, DA modules, signed unnormalised
// mixing), with a live, recording or replayed coefficient source.
#pragma once
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "models/mudd/coefficients.h"
#include "models/mudd/model.h"

namespace fca {

// Every activation of one forward pass, sized once for the largest batch. Stable names:
// hidden.{j} = X_j (j = 0..L), layers.{i}.alpha, final_stream, logits.
struct MuddRunState {
  MuddRunState(const MuddConfig& config, int max_batch, int max_tokens);
  MuddConfig config;
  int max_batch, max_tokens, batch = 0, tokens = 0;
  std::vector<float*> hidden;   // L+1 x [N, D]: the kept sources X_0 .. X_L
  float* streams[4];            // [N, D] each: Q, K, V, R inputs of the next block (stream 0 = final)
  float* normed[3];             // [N, D] LayerNorm outputs for q, k, v
  float *q, *k, *v;             // [N, D]
  float* qkv;                   // [N, 3D] packed for the attention kernel
  float* probs;                 // [B, H, T, T]
  float* attn_out;              // [N, D]
  float* attn_proj;             // [N, D]  A
  float* ffn_in;                // [N, D]
  float* ffn_hidden;            // [N, max F_i]
  float* ffn_out;               // [N, D]  F
  float* mean; float* rstd;     // [N] LayerNorm statistics (reused)
  std::vector<float*> alpha;    // L x [N, C_i * S_i]
  float* da_scratch;            // [N, D + max H_i]
  float* final_normed;          // [N, D]
  float* logits;                // [N, V]
  float* losses;                // [N]
  float *rope_cos, *rope_sin;   // [block_size, rot/2]
  size_t bytes() const { return arena.capacity(); }

 private:
  template <typename A>
  void layout(A& a);
  Arena arena;
};

// tokens [B, T] (ids < vocab_size, T <= block_size). Throws Error on bad ids or sizes.
void mudd_forward(const MuddModel& model, MuddRunState& rs, const int32_t* tokens, int B, int T,
                  MuddCoefficientSource& source, int first_window = 0);

// Per-window mean NLL of the last pass against targets [B, T] over all vocab rows; returns the mean.
double mudd_loss(MuddRunState& rs, const int32_t* targets, double* window_nll);

}  // namespace fca
