// The MoE family as a Trainable (train/flat_trainable.h) and its entry in the train layer's family
// table (train/train_family.h).
#pragma once
#include "models/moe/forward.h"
#include "train/flat_trainable.h"
#include "train/train_family.h"
#include "train/train_step.h"

namespace fca {

// The MoE's passes: the objective is cross-entropy + alpha * mean_l aux_l (the auxiliary term
// reaches the router through P); validation NLL is cross-entropy only.
struct MoeFamily {
  using Model = MoeModel<float>;
  using Config = MoeConfig;
  using RunState = MoeRunState<float>;
  using Live = MoeLiveRouting<float>;
  static void forward(const Model& m, RunState& rs, const int32_t* tokens, int B, int T, Live& live) {
    moe_forward(m, rs, tokens, B, T, live);
  }
  static double loss(RunState& rs, const int32_t* targets) { return moe_objective(rs, moe_loss(rs, targets, nullptr)); }
  static double nll(RunState& rs, const int32_t* targets, double* window_nll) { return moe_loss(rs, targets, window_nll); }
  static int seq_len(const Config& c) { return c.seq_len; }
  static void backward(const Model& m, RunState& rs, Model& grads, float scale) { moe_backward(m, rs, grads, scale); }
};

// Settings: experts, top_k, expert_hidden, aux_loss (docs/routed.md); single-file checkpoints.
TrainFamily moe_train_family();

}  // namespace fca
