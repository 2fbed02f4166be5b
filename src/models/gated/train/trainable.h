// The gated family as a Trainable, its optimizer step (also timed by `fca bench train`) and its
// entry in the train layer's family table (train/train_family.h).
#pragma once
#include <memory>

#include "models/gated/forward.h"
#include "train/train_step.h"
#include "train/train_family.h"
#include "train/trainable.h"

namespace fca {

// The gated family's passes for TrainStep.
struct GatedFamily {
  using Model = GatedModel<float>;
  using RunState = GatedRunState<float>;
  using Live = LiveCoefficients<float>;
  static void forward(const Model& m, RunState& rs, const int32_t* tokens, int B, int T, Live& live) {
    gated_forward(m, rs, tokens, B, T, live);
  }
  static double loss(RunState& rs, const int32_t* targets) { return gated_loss(rs, targets, nullptr); }
  static void backward(const Model& m, RunState& rs, Model& grads, float scale) { gated_backward(m, rs, grads, scale); }
};
using GatedTrainStep = TrainStep<GatedFamily>;

class GatedTrainable : public Trainable {
 public:
  GatedTrainable(const GatedConfig& config, uint64_t seed, int batch, AdamWOptions adamw, double clip);
  nlohmann::ordered_json config_json() const override;
  int seq_len() const override { return model_.config().seq_len; }
  size_t parameter_count() const override { return gated_parameter_count(model_.config()); }
  const std::vector<TensorSlot>& layout() const override { return model_.layout(); }
  AdamW& optimizer() override { return step_.optimizer(); }
  StepStats step(const int32_t* inputs, const int32_t* targets, int micro_batches, double lr,
                 const Communicator& comm) override {
    return step_.run(inputs, targets, micro_batches, lr, comm);
  }
  ValidStats validate(const TextSplit& valid, int64_t windows, int batch) override;
  void save(const std::string& out, const std::map<std::string, std::string>& metadata) const override;
  void load(const std::string& out) override;
  size_t run_state_bytes() const override { return step_.run_state_bytes(); }

 private:
  GatedModel<float> model_;
  GatedTrainStep step_;
};

// Settings: gate (the gate kind) and gate_value (the fixed gate's value); single-file checkpoints.
TrainFamily gated_train_family();
// The validated config of a fresh model of this shape and these (resolved) settings; errors
// prefixed by `where`.
GatedConfig gated_config_of(const ModelShape& shape, const nlohmann::json& settings, const std::string& where);

}  // namespace fca
