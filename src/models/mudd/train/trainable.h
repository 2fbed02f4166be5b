// Byte-level MUDD models (docs/mudd.md, "Training") as a Trainable (FlatTrainable, like every
// family), saved as Hugging Face folders (config.json + model.safetensors) that the same loader
// reads, and the family's entry in the train layer's family table (train/train_family.h).
#pragma once
#include "models/mudd/forward.h"
#include "models/mudd/model.h"
#include "train/flat_trainable.h"
#include "train/train_step.h"
#include "train/train_family.h"
#include "train/trainable.h"

namespace fca {

// MUDD's passes for TrainStep and FlatTrainable (gradients reach every DA generator through the
// live source).
struct MuddFamily {
  using Model = MuddModel<float>;
  using Config = MuddConfig;
  using RunState = MuddRunState<float>;
  using Live = MuddLiveCoefficients<float>;
  static void forward(const Model& m, RunState& rs, const int32_t* tokens, int B, int T, Live& live) {
    mudd_forward(m, rs, tokens, B, T, live);
  }
  static double loss(RunState& rs, const int32_t* targets) { return mudd_loss(rs, targets, nullptr); }
  static double nll(RunState& rs, const int32_t* targets, double* window_nll) { return mudd_loss(rs, targets, window_nll); }
  static int seq_len(const Config& c) { return c.block_size; }
  static void backward(const Model& m, RunState& rs, Model& grads, float scale) { mudd_backward(m, rs, grads, scale); }
};
using MuddTrainStep = TrainStep<MuddFamily>;
using MuddTrainable = FlatTrainable<MuddFamily>;

// No settings of its own: the shape gives vocab 256, intermediate 4D re-allocated per layer, RoPE
// on a quarter of each head and the DA widths by the round64 rule. Folder checkpoints.
TrainFamily mudd_train_family();

}  // namespace fca
