#include "train/gated_trainable.h"

#include <cmath>

#include "core/error.h"
#include "models/gated/forward.h"
#include "train/evaluate.h"

namespace fca {

GatedTrainStep::GatedTrainStep(GatedModel<float>& model, int batch, int tokens, AdamWOptions adamw, double clip)
    : model_(model),
      grads_(model.config()),
      rs_(model.config(), batch, tokens, true),
      optimizer_(model.layout(), model.buffer_size(), adamw),
      clip_(clip) {}

StepStats GatedTrainStep::run(const int32_t* inputs, const int32_t* targets, int micro_batches, double lr) {
  const int B = rs_.max_batch, T = rs_.max_tokens;
  const float loss_scale = 1.0f / float(int64_t(B) * T * micro_batches);
  std::fill(grads_.data(), grads_.data() + grads_.buffer_size(), 0.0f);
  StepStats stats{0, 0};
  for (int k = 0; k < micro_batches; ++k) {
    LiveCoefficients<float> live(model_);
    const int64_t offset = int64_t(k) * B * T;
    gated_forward(model_, rs_, inputs + offset, B, T, live);
    stats.loss += gated_loss(rs_, targets + offset, nullptr) / micro_batches;
    gated_backward(model_, rs_, grads_, loss_scale);
  }
  stats.grad_norm = clip_and_step(optimizer_, model_.data(), grads_.data(), grads_.buffer_size(), stats.loss, clip_, lr);
  return stats;
}

GatedTrainable::GatedTrainable(const GatedConfig& config, uint64_t seed, int batch, AdamWOptions adamw, double clip)
    : model_(GatedModel<float>::initialized(config, seed)), step_(model_, batch, config.seq_len, adamw, clip) {}

nlohmann::ordered_json GatedTrainable::config_json() const { return nlohmann::ordered_json::parse(model_.config().to_json()); }

ValidStats GatedTrainable::validate(const TextSplit& valid, int64_t windows, int batch) {
  const EvalResult r = evaluate_gated(model_, valid, model_.config().seq_len, windows, batch, false);
  return {r.nll, r.gate_mass, int64_t(r.windows.size())};
}

void GatedTrainable::save(const std::string& out, const std::map<std::string, std::string>& metadata) const {
  model_.save(out, metadata);
}

void GatedTrainable::load(const std::string& out) {
  GatedModel<float> loaded = GatedModel<float>::load(out);
  if (!(loaded.config() == model_.config()))
    throw Error(out + ": --resume with a different model config (checkpoint " + loaded.config().to_json() + ", flags " +
                model_.config().to_json() + ")");
  std::copy(loaded.data(), loaded.data() + loaded.buffer_size(), model_.data());
}

std::string GatedTrainable::state_file(const std::string& out) const {
  const std::string suffix = ".safetensors";
  const std::string stem = out.size() > suffix.size() && out.ends_with(suffix) ? out.substr(0, out.size() - suffix.size()) : out;
  return stem + ".train-state.safetensors";
}

}  // namespace fca
