// One optimizer step of any model family: forward, loss and backward over each micro-batch, then
// the shared clip_and_step. A family supplies its types and its three passes (GatedFamily in
// gated_trainable.h, MuddFamily in mudd_trainable.h); `fca train` and `fca bench train` both use it.
#pragma once
#include <algorithm>
#include <cstdint>

#include "train/adamw.h"
#include "train/trainable.h"

namespace fca {

template <typename Family>
class TrainStep {
 public:
  using Model = typename Family::Model;
  TrainStep(Model& model, int batch, int tokens, AdamWOptions adamw, double clip)
      : model_(model),
        grads_(model.config()),
        rs_(model.config(), batch, tokens, true),
        optimizer_(model.layout(), model.buffer_size(), adamw),
        clip_(clip) {}

  // inputs/targets: [micro_batches, batch, tokens]. Throws Error on a non-finite loss or norm.
  StepStats run(const int32_t* inputs, const int32_t* targets, int micro_batches, double lr) {
    const int B = rs_.max_batch, T = rs_.max_tokens;
    const float loss_scale = 1.0f / float(int64_t(B) * T * micro_batches);
    std::fill(grads_.data(), grads_.data() + grads_.buffer_size(), 0.0f);
    StepStats stats{0, 0};
    for (int k = 0; k < micro_batches; ++k) {
      typename Family::Live live(model_);
      const int64_t offset = int64_t(k) * B * T;
      Family::forward(model_, rs_, inputs + offset, B, T, live);
      stats.loss += Family::loss(rs_, targets + offset) / micro_batches;
      Family::backward(model_, rs_, grads_, loss_scale);
    }
    stats.grad_norm = clip_and_step(optimizer_, model_.data(), grads_.data(), grads_.buffer_size(), stats.loss, clip_, lr);
    return stats;
  }
  AdamW& optimizer() { return optimizer_; }
  size_t run_state_bytes() const { return rs_.bytes(); }

 private:
  Model& model_;
  Model grads_;
  typename Family::RunState rs_;
  AdamW optimizer_;
  double clip_;
};

}  // namespace fca
