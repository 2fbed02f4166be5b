// The exit family as a Trainable (docs/exit.md): the main steps are phase 1 (the trunk with every exit
// supervised, TrainStep over ExitTrunkFamily), and one later phase, "exit_heads" (phase 2: the
// classifiers on the frozen trunk, their own AdamW over exit.* alone); its entry in the train
// layer's family table.
#pragma once
#include <memory>

#include "models/exit/train_pass.h"
#include "train/train_family.h"
#include "train/train_step.h"
#include "train/trainable.h"

namespace fca {

// Phase 1's passes for TrainStep (exit.* receives no gradient; its AdamW moments stay 0, and its
// slots have no weight decay, so phase 1 leaves it at 0).
struct ExitTrunkFamily {
  using Model = ExitModel<float>;
  using Config = ExitConfig;
  using RunState = ExitTrainState<float>;
  struct Live {  // phase 1 has no controller in its graph
    explicit Live(const Model&) {}
  };
  static void forward(const Model& m, RunState& rs, const int32_t* tokens, int B, int T, Live&) {
    exit_trunk_forward(m, rs, tokens, B, T);
  }
  static double loss(RunState& rs, const int32_t* targets) { return exit_trunk_loss(rs, targets); }
  static void backward(const Model& m, RunState& rs, Model& grads, float scale) { exit_trunk_backward(m, rs, grads, scale); }
};

class ExitTrainable : public Trainable {
 public:
  ExitTrainable(const ExitConfig& config, const TrainableArgs& args);
  nlohmann::ordered_json config_json() const override;
  int seq_len() const override { return model_.config().seq_len; }
  size_t parameter_count() const override;
  const std::vector<TensorSlot>& layout() const override { return model_.layout(); }
  AdamW& optimizer() override { return trunk_.optimizer(); }
  StepStats step(const int32_t* inputs, const int32_t* targets, int micro_batches, double lr,
                 const Communicator& comm) override {
    return trunk_.run(inputs, targets, micro_batches, lr, comm);
  }
  // Full-depth NLL (the last exit's head).
  ValidStats validate(const TextSplit& valid, int64_t windows, int batch) override;
  std::vector<TrainPhase> later_phases() const override;
  StepStats phase_step(size_t phase, const int32_t* inputs, const int32_t* targets, double lr) override;
  void save(const std::string& out, const std::map<std::string, std::string>& metadata) const override {
    model_.save(out, metadata);
  }
  void load(const std::string& out) override;
  size_t run_state_bytes() const override { return trunk_.run_state_bytes(); }
  const ExitModel<float>& model() const { return model_; }

 private:
  ExitModel<float> model_;
  TrainableArgs args_;
  TrainStep<ExitTrunkFamily> trunk_;
  // Phase 2: exit.weight and exit.bias as one sub-buffer of the parameters (from exit.weight's
  // offset), its gradients and its optimizer; created at the first phase step.
  size_t probe_offset_ = 0, probe_size_ = 0;
  std::vector<TensorSlot> probe_layout_;
  std::vector<float> probe_grads_;
  std::unique_ptr<AdamW> probe_optimizer_;
  std::unique_ptr<ExitTrainState<float>> probe_state_;
};

// Settings: min_exit, exit_threshold (the default of eval, audit and exec), exit_head_steps;
// single-file checkpoints.
TrainFamily exit_train_family();

}  // namespace fca
