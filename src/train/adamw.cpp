#include "train/adamw.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "ops/simd.h"
#include "core/phase_timer.h"

namespace fca {

AdamW::AdamW(const std::vector<TensorSlot>& layout, size_t buffer_size, AdamWOptions options)
    : layout_(layout), options_(options), m_(buffer_size, 0.0f), v_(buffer_size, 0.0f) {}

void AdamW::step(float* params, const float* grads, double lr) {
  const PhaseScope phase_scope(Phase::optimizer);
  ++t_;
  const double bias1 = 1.0 - std::pow(options_.beta1, double(t_));
  const double bias2 = 1.0 - std::pow(options_.beta2, double(t_));
  const float b1 = float(options_.beta1), b2 = float(options_.beta2);
  const float step_size = float(lr / bias1);
  const float inv_sqrt_bias2 = float(1.0 / std::sqrt(bias2));
  const float eps = float(options_.eps);
  for (const auto& slot : layout_) {
    const float decay = slot.weight_decay ? float(1.0 - lr * options_.weight_decay) : 1.0f;
    float* p = params + slot.offset;
    const float* g = grads + slot.offset;
    float* m = m_.data() + slot.offset;
    float* v = v_.data() + slot.offset;
    const int64_t n = int64_t(slot.numel);
    // The dispatched SIMD update (ops/simd.h: the same operations, element by element) over fixed
    // chunks; large tensors spread the chunks over the threads.
    const simd::AdamWConstants k{b1, b2, decay, step_size, inv_sqrt_bias2, eps};
    constexpr int64_t chunk = 16384;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t c = 0; c < (n + chunk - 1) / chunk; ++c) {
      const int64_t i = c * chunk;
      simd::adamw_update(p + i, g + i, m + i, v + i, std::min(chunk, n - i), k);
    }
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
  if (clip > 0 && norm > clip) scale_buffer(grads, n, float(clip / norm));
  optimizer.step(params, grads, lr);
  return norm;
}

double global_norm(const float* grads, size_t n) {
  constexpr size_t kChunk = 65536;
  const int64_t chunks = int64_t((n + kChunk - 1) / kChunk);
  std::vector<double> partial(size_t(chunks), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = size_t(c) * kChunk, end = std::min(n, begin + kChunk);
    double s = 0;
    for (size_t i = begin; i < end; ++i) s += double(grads[i]) * double(grads[i]);
    partial[size_t(c)] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return std::sqrt(total);
}

void scale_buffer(float* x, size_t n, float factor) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < int64_t(n); ++i) x[i] *= factor;
}

}  // namespace fca
