#include "train/gated_trainable.h"

#include <cmath>

#include "core/error.h"
#include "models/gated/forward.h"
#include "train/evaluate.h"

namespace fca {

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
