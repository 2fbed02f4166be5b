// Byte-level MUDD models (spec muddpythia.md section 11) as a Trainable, saved as Hugging Face
// folders (config.json + model.safetensors) that the same loader reads, and the family's entry in the
// train layer's family table (train/train_family.h).
#pragma once
#include "models/mudd/forward.h"
#include "models/mudd/model.h"
#include "train/train_step.h"
#include "train/train_family.h"
#include "train/trainable.h"

namespace fca {

// MUDD's passes for TrainStep (gradients reach every DA generator through the live source).
struct MuddFamily {
  using Model = MuddModel<float>;
  using RunState = MuddRunState<float>;
  using Live = MuddLiveCoefficients<float>;
  static void forward(const Model& m, RunState& rs, const int32_t* tokens, int B, int T, Live& live) {
    mudd_forward(m, rs, tokens, B, T, live);
  }
  static double loss(RunState& rs, const int32_t* targets) { return mudd_loss(rs, targets, nullptr); }
  static void backward(const Model& m, RunState& rs, Model& grads, float scale) { mudd_backward(m, rs, grads, scale); }
};
using MuddTrainStep = TrainStep<MuddFamily>;

class MuddTrainable : public Trainable {
 public:
  MuddTrainable(const MuddConfig& config, uint64_t seed, int batch, AdamWOptions adamw, double clip);
  nlohmann::ordered_json config_json() const override;
  int seq_len() const override { return model_.config().block_size; }
  size_t parameter_count() const override { return model_.parameter_count(); }
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
  MuddModel<float> model_;
  MuddTrainStep step_;
};

// No settings of its own: the shape gives vocab 256, intermediate 4D re-allocated per layer, RoPE
// on a quarter of each head and the DA widths by the round64 rule. Folder checkpoints.
TrainFamily mudd_train_family();

}  // namespace fca
