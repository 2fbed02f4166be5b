// AdamW over a flat parameter buffer (decoupled weight decay, as torch.optim.AdamW), with the
// learning-rate schedule and global-norm gradient clipping of the training defaults (docs/model.md).
#pragma once
#include <cstdint>
#include <vector>

#include "models/base/tensor_slot.h"

namespace fca {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  AdamW(const std::vector<TensorSlot>& layout, size_t buffer_size, AdamWOptions options);
  // One update of params from grad_scale * grads at learning rate lr (grads is only read); decays
  // only slots with weight_decay set.
  void step(float* params, const float* grads, double lr, float grad_scale = 1.0f);
  void set_steps_taken(int64_t t) { t_ = t; }
  std::vector<float>& first_moment() { return m_; }
  std::vector<float>& second_moment() { return v_; }

 private:
  std::vector<TensorSlot> layout_;
  AdamWOptions options_;
  std::vector<float> m_, v_;
  int64_t t_ = 0;
  struct Chunk {
    size_t slot, offset;
    int64_t length;
  };
  std::vector<Chunk> chunks_;  // every slot in pieces of at most 16 Ki values, in buffer order
};

// Linear warm-up over `warmup` steps to peak_lr, then cosine decay to min_ratio * peak_lr at
// `total` steps. step counts from 0.
double learning_rate(int64_t step, int64_t total, int64_t warmup, double peak_lr, double min_ratio);

// The end of every optimizer step: the global gradient norm (before clipping), a divergence check,
// clipping to `clip` (0 = off; the factor is applied as AdamW reads each gradient, grads is left
// as it was) and the AdamW update. Returns the norm; throws Error on a non-finite loss or norm.
double clip_and_step(AdamW& optimizer, float* params, float* grads, size_t n, double loss, double clip, double lr);

// L2 norm of the whole buffer, summed in double over fixed 64Ki-element chunks combined in index
// order: the same bits for any thread count.
double global_norm(const float* grads, size_t n);

}  // namespace fca
