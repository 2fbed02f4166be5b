// The gated family as a Trainable, its optimizer step (also timed by `fca bench train`) and its
// entry in the train layer's family table (train/train_family.h).
#pragma once
#include <memory>

#include "models/gated/forward.h"
#include "train/flat_trainable.h"
#include "train/train_step.h"
#include "train/train_family.h"
#include "train/trainable.h"

namespace fca {

// The gated family's passes for TrainStep and FlatTrainable; validation also reports the gate mass.
struct GatedFamily {
  using Model = GatedModel<float>;
  using Config = GatedConfig;
  using RunState = GatedRunState<float>;
  using Live = LiveCoefficients<float>;
  static void forward(const Model& m, RunState& rs, const int32_t* tokens, int B, int T, Live& live) {
    gated_forward(m, rs, tokens, B, T, live);
  }
  static double loss(RunState& rs, const int32_t* targets) { return gated_loss(rs, targets, nullptr); }
  static double nll(RunState& rs, const int32_t* targets, double* window_nll) { return gated_loss(rs, targets, window_nll); }
  static int seq_len(const Config& c) { return c.seq_len; }
  static void backward(const Model& m, RunState& rs, Model& grads, float scale) { gated_backward(m, rs, grads, scale); }
  // Adds the gates of the last pass into `sum` (layer, then rows) and returns how many.
  static int64_t add_gates(const RunState& rs, int B, int T, double& sum) {
    const int L = rs.config.n_layer;
    for (int l = 0; l < L; ++l)
      for (int64_t n = 0; n < int64_t(B) * T; ++n) sum += rs.gates[int64_t(l) * B * T + n];
    return int64_t(L) * B * T;
  }
};
using GatedTrainStep = TrainStep<GatedFamily>;
using GatedTrainable = FlatTrainable<GatedFamily>;

// Settings: gate (the gate kind) and gate_value (the fixed gate's value); single-file checkpoints.
TrainFamily gated_train_family();
// The validated config of a fresh model of this shape and these (resolved) settings; errors
// prefixed by `where`.
GatedConfig gated_config_of(const ModelShape& shape, const nlohmann::json& settings, const std::string& where);
// The family's objective in double for the conformance suite's gradient check (gradient_probe.cpp).
GradientProbe gated_gradient_probe(const ModelShape& shape, const nlohmann::json& settings, uint64_t seed);

}  // namespace fca
