// One optimizer step of any model family: forward, loss and backward over each micro-batch, then
// the shared clip_and_step. A family supplies its types and its three passes (its
// src/models/<family>/train/trainable.h); `fca train` and `fca bench train` both use it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/error.h"
#include "ops/simd.h"

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
  //
  // The step's gradient is the sum of the micro-batches' gradients in their order, ((g_0 + g_1) +
  // g_2) ..., each computed from zero: so that data parallelism gives the same bits. Over MPI
  // (docs/cluster.md) rank r holds micro-batch r of the step alone (micro_batches 1 per rank) and
  // comm.sum_in_rank_order() forms the same sum, so N ranks are bitwise one process with N
  // micro-batches; every rank then takes the same optimizer step.
  StepStats run(const int32_t* inputs, const int32_t* targets, int micro_batches, double lr,
                const Communicator& comm = single_process()) {
    const int B = rs_.max_batch, T = rs_.max_tokens;
    if (comm.size() > 1 && micro_batches != 1)
      throw Error("data-parallel training takes one micro-batch per rank (--grad-accum 1 under mpirun, found " +
                  std::to_string(micro_batches) + "): N ranks are one process with --grad-accum N");
    const int total_micro_batches = micro_batches * comm.size();
    const float loss_scale = 1.0f / float(int64_t(B) * T * total_micro_batches);
    const size_t n = grads_.buffer_size();
    std::fill(grads_.data(), grads_.data() + n, 0.0f);
    if (micro_batches > 1 && !micro_grads_) micro_grads_ = std::make_unique<Model>(model_.config());
    std::vector<double> losses;
    for (int k = 0; k < micro_batches; ++k) {
      Model& into = k == 0 ? grads_ : *micro_grads_;
      if (k > 0) std::fill(into.data(), into.data() + n, 0.0f);
      typename Family::Live live(model_);
      const int64_t offset = int64_t(k) * B * T;
      Family::forward(model_, rs_, inputs + offset, B, T, live);
      losses.push_back(Family::loss(rs_, targets + offset));
      Family::backward(model_, rs_, into, loss_scale);
      if (k > 0) simd::axpy(grads_.data(), micro_grads_->data(), 1.0f, int64_t(n));  // g + 1 * g_k == g + g_k
    }
    if (comm.size() > 1) {
      comm.sum_in_rank_order(grads_.data(), n);
      losses = comm.all_gather(losses[0]);
    }
    StepStats stats{0, 0};
    for (double loss : losses) stats.loss += loss / total_micro_batches;
    stats.grad_norm = clip_and_step(optimizer_, model_.data(), grads_.data(), n, stats.loss, clip_, lr);
    return stats;
  }
  AdamW& optimizer() { return optimizer_; }
  size_t run_state_bytes() const { return rs_.bytes(); }

 private:
  Model& model_;
  Model grads_;
  std::unique_ptr<Model> micro_grads_;  // micro-batches after the first, before they join grads_
  typename Family::RunState rs_;
  AdamW optimizer_;
  double clip_;
};

}  // namespace fca
