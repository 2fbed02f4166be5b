// The Mixture-of-Depths family as a Trainable (train/flat_trainable.h) and its entry in the train layer's family
// table (train/train_family.h).
#pragma once
#include "models/mod/forward.h"
#include "train/flat_trainable.h"
#include "train/train_family.h"
#include "train/train_step.h"

namespace fca {

struct ModFamily {
  using Model = ModModel<float>;
  using Config = ModConfig;
  using RunState = ModRunState<float>;
  using Live = ModLiveRouting<float>;
  static void forward(const Model& m, RunState& rs, const int32_t* tokens, int B, int T, Live& live) {
    mod_forward(m, rs, tokens, B, T, live);
  }
  static double loss(RunState& rs, const int32_t* targets) { return mod_loss(rs, targets, nullptr); }
  static double nll(RunState& rs, const int32_t* targets, double* window_nll) { return mod_loss(rs, targets, window_nll); }
  static int seq_len(const Config& c) { return c.seq_len; }
  static void backward(const Model& m, RunState& rs, Model& grads, float scale) { mod_backward(m, rs, grads, scale); }
};

// Settings: capacity, routed_every (docs/routed.md); single-file checkpoints.
TrainFamily mod_train_family();

}  // namespace fca
