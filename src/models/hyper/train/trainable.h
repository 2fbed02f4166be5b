// The hyper-connection family as a Trainable (train/flat_trainable.h) and its entry in the train
// layer's family table (train/train_family.h).
#pragma once
#include "models/hyper/forward.h"
#include "train/flat_trainable.h"
#include "train/train_family.h"
#include "train/train_step.h"

namespace fca {

struct HyperFamily {
  using Model = HyperModel<float>;
  using Config = HyperConfig;
  using RunState = HyperRunState<float>;
  using Live = HyperLiveCoefficients<float>;
  static void forward(const Model& m, RunState& rs, const int32_t* tokens, int B, int T, Live& live) {
    hyper_forward(m, rs, tokens, B, T, live);
  }
  static double loss(RunState& rs, const int32_t* targets) { return hyper_loss(rs, targets, nullptr); }
  static double nll(RunState& rs, const int32_t* targets, double* window_nll) { return hyper_loss(rs, targets, window_nll); }
  static int seq_len(const Config& c) { return c.seq_len; }
  static void backward(const Model& m, RunState& rs, Model& grads, float scale) { hyper_backward(m, rs, grads, scale); }
};

// Settings: hc_variant, hc_streams, hc_tanh, hc_scale_init, hc_sinkhorn_iters, hc_eps, hc_norm_eps,
// hc_pre_logit, hc_res_offdiag_init (docs/hyper.md, the same defaults); single-file checkpoints.
TrainFamily hyper_train_family();

}  // namespace fca
