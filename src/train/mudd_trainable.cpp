#include "train/mudd_trainable.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"

namespace fca {

MuddTrainStep::MuddTrainStep(MuddModel<float>& model, int batch, int tokens, AdamWOptions adamw, double clip)
    : model_(model),
      grads_(model.config()),
      rs_(model.config(), batch, tokens, true),
      optimizer_(model.layout(), model.buffer_size(), adamw),
      clip_(clip) {}

StepStats MuddTrainStep::run(const int32_t* inputs, const int32_t* targets, int micro_batches, double lr) {
  const int B = rs_.max_batch, T = rs_.max_tokens;
  const float loss_scale = 1.0f / float(int64_t(B) * T * micro_batches);
  std::fill(grads_.data(), grads_.data() + grads_.buffer_size(), 0.0f);
  StepStats stats{0, 0};
  for (int k = 0; k < micro_batches; ++k) {
    MuddLiveCoefficients<float> live(model_);
    const int64_t offset = int64_t(k) * B * T;
    mudd_forward(model_, rs_, inputs + offset, B, T, live);
    stats.loss += mudd_loss(rs_, targets + offset, nullptr) / micro_batches;
    mudd_backward(model_, rs_, grads_, loss_scale);
  }
  stats.grad_norm = clip_and_step(optimizer_, model_.data(), grads_.data(), grads_.buffer_size(), stats.loss, clip_, lr);
  return stats;
}

MuddTrainable::MuddTrainable(const MuddConfig& config, uint64_t seed, int batch, AdamWOptions adamw, double clip)
    : model_(MuddModel<float>::initialized(config, seed)), step_(model_, batch, config.block_size, adamw, clip) {}

nlohmann::ordered_json MuddTrainable::config_json() const { return nlohmann::ordered_json::parse(model_.config().to_json()); }

ValidStats MuddTrainable::validate(const TextSplit& valid, int64_t windows, int batch) {
  const int T = model_.config().block_size;
  const auto idx = evenly_spaced_windows(valid.window_count(T), windows, valid.name());
  MuddRunState<float> rs(model_.config(), batch, T, false);
  std::vector<int32_t> inputs(size_t(batch) * T), targets(size_t(batch) * T);
  std::vector<double> nll(idx.size());
  for (size_t w0 = 0; w0 < idx.size(); w0 += size_t(batch)) {
    const int B = int(std::min<size_t>(size_t(batch), idx.size() - w0));
    for (int b = 0; b < B; ++b) valid.window(idx[w0 + size_t(b)], T, inputs.data() + int64_t(b) * T, targets.data() + int64_t(b) * T);
    MuddLiveCoefficients<float> live(model_);
    mudd_forward(model_, rs, inputs.data(), B, T, live);
    mudd_loss(rs, targets.data(), nll.data() + w0);
  }
  double s = 0;
  for (double v : nll) s += v;
  return {s / double(nll.size()), -1, int64_t(nll.size())};
}

void MuddTrainable::save(const std::string& out, const std::map<std::string, std::string>& metadata) const {
  model_.save(out, metadata);
}

void MuddTrainable::load(const std::string& out) {
  MuddModel<float> loaded = MuddModel<float>::load(out);
  if (loaded.config().to_json() != model_.config().to_json())
    throw Error(out + ": --resume with a different model config");
  std::copy(loaded.data(), loaded.data() + loaded.buffer_size(), model_.data());
}

}  // namespace fca
