#include "train/adamw.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "ops/simd.h"
#include "core/phase_timer.h"

namespace fca {

AdamW::AdamW(const std::vector<TensorSlot>& layout, size_t buffer_size, AdamWOptions options)
    : layout_(layout), options_(options), m_(buffer_size, 0.0f), v_(buffer_size, 0.0f) {
  constexpr int64_t kChunk = 16384;
  for (size_t s = 0; s < layout_.size(); ++s)
    for (int64_t i = 0; i < int64_t(layout_[s].numel); i += kChunk)
      chunks_.push_back({s, layout_[s].offset + size_t(i), std::min(kChunk, int64_t(layout_[s].numel) - i)});
}

void AdamW::step(float* params, const float* grads, double lr, float grad_scale) {
  const PhaseScope phase_scope(Phase::optimizer);
  ++t_;
  const double bias1 = 1.0 - std::pow(options_.beta1, double(t_));
  const double bias2 = 1.0 - std::pow(options_.beta2, double(t_));
  const float b1 = float(options_.beta1), b2 = float(options_.beta2);
  const float step_size = float(lr / bias1);
  const float inv_sqrt_bias2 = float(1.0 / std::sqrt(bias2));
  const float eps = float(options_.eps);
  // The dispatched SIMD update (ops/simd.h: the same operations, element by element) over fixed
  // chunks of each slot, all slots' chunks in one parallel loop (a loop per slot would wait at a
  // barrier per tensor). Every element is updated on its own, so the split changes no value.
  std::vector<simd::AdamWConstants> constants(layout_.size());
  for (size_t s = 0; s < layout_.size(); ++s) {
    const float decay = layout_[s].weight_decay ? float(1.0 - lr * options_.weight_decay) : 1.0f;
    constants[s] = {b1, b2, decay, step_size, inv_sqrt_bias2, eps, grad_scale};
  }
  const int64_t chunks = int64_t(chunks_.size());
#pragma omp parallel for schedule(static) if (chunks > 4)
  for (int64_t c = 0; c < chunks; ++c) {
    const Chunk& chunk = chunks_[size_t(c)];
    const int64_t i = int64_t(chunk.offset);
    simd::adamw_update(params + i, grads + i, m_.data() + i, v_.data() + i, chunk.length, constants[chunk.slot]);
  }
}

double learning_rate(int64_t step, int64_t total, int64_t warmup, double peak_lr, double min_ratio) {
  if (warmup > 0 && step < warmup) return peak_lr * double(step + 1) / double(warmup);
  const double span = double(total - warmup);
  const double progress = span > 0 ? std::min(1.0, double(step - warmup) / span) : 1.0;
  const double cosine = 0.5 * (1.0 + std::cos(3.141592653589793 * progress));
  return peak_lr * (min_ratio + (1.0 - min_ratio) * cosine);
}

double clip_and_step(AdamW& optimizer, float* params, float* grads, size_t n, double loss, double clip, double lr) {
  const PhaseScope phase_scope(Phase::optimizer);
  const double norm = global_norm(grads, n);
  if (!std::isfinite(loss) || !std::isfinite(norm))
    throw Error("training diverged (loss " + std::to_string(loss) + ", gradient norm " + std::to_string(norm) +
                "): lower --lr");
  optimizer.step(params, grads, lr, clip > 0 && norm > clip ? float(clip / norm) : 1.0f);
  return norm;
}

double global_norm(const float* grads, size_t n) {
  constexpr size_t kChunk = 65536;
  const int64_t chunks = int64_t((n + kChunk - 1) / kChunk);
  std::vector<double> partial(size_t(chunks), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = size_t(c) * kChunk, end = std::min(n, begin + kChunk);
    // 16 independent sums (element i into lane i mod 16) so the adds do not wait on each other, as
    // one running sum's would (4 cycles per element); the lanes and their combination are in a
    // fixed order, so the norm does not depend on the vector width the compiler picks.
    constexpr size_t kLanes = 16;
    double lanes[kLanes] = {};
    size_t i = begin;
    for (; i + kLanes <= end; i += kLanes)
      for (size_t j = 0; j < kLanes; ++j) lanes[j] += double(grads[i + j]) * double(grads[i + j]);
    for (; i < end; ++i) lanes[i % kLanes] += double(grads[i]) * double(grads[i]);
    double s = 0;
    for (double lane : lanes) s += lane;
    partial[size_t(c)] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return std::sqrt(total);
}

}  // namespace fca
