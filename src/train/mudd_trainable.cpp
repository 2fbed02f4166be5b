#include "train/mudd_trainable.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"

namespace fca {

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
