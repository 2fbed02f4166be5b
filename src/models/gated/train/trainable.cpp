#include "models/gated/train/trainable.h"

#include <cmath>

#include "core/error.h"
#include "models/gated/forward.h"

namespace fca {

GatedTrainable::GatedTrainable(const GatedConfig& config, uint64_t seed, int batch, AdamWOptions adamw, double clip)
    : model_(GatedModel<float>::initialized(config, seed)), step_(model_, batch, config.seq_len, adamw, clip) {}

nlohmann::ordered_json GatedTrainable::config_json() const { return nlohmann::ordered_json::parse(model_.config().to_json()); }

// Mean NLL and gate mass over `windows` evenly spaced windows of the split, live gates: the NLL
// summed over windows, the gates over layers then rows of each batch.
ValidStats GatedTrainable::validate(const TextSplit& valid, int64_t windows, int batch) {
  const int T = model_.config().seq_len, L = model_.config().n_layer;
  const auto idx = evenly_spaced_windows(valid.window_count(T), windows, valid.name());
  const int64_t W = int64_t(idx.size());
  std::vector<double> window_nll(size_t(W), 0.0);
  GatedRunState<float> rs(model_.config(), batch, T, false);
  LiveCoefficients<float> live(model_);
  std::vector<int32_t> inputs(size_t(batch) * T), targets(size_t(batch) * T);
  double gate_sum = 0;
  for (int64_t w0 = 0; w0 < W; w0 += batch) {
    const int B = int(std::min<int64_t>(batch, W - w0));
    for (int b = 0; b < B; ++b)
      valid.window(idx[size_t(w0 + b)], T, inputs.data() + int64_t(b) * T, targets.data() + int64_t(b) * T);
    gated_forward(model_, rs, inputs.data(), B, T, live, int(w0));
    gated_loss(rs, targets.data(), window_nll.data() + w0);
    for (int l = 0; l < L; ++l)  // fixed order: layer, then rows
      for (int64_t n = 0; n < int64_t(B) * T; ++n) gate_sum += rs.gates[int64_t(l) * B * T + n];
  }
  double total = 0;
  for (double v : window_nll) total += v;
  return {total / double(W), gate_sum / (double(W) * L * T), W};
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

GatedConfig gated_config_of(const ModelShape& shape, const nlohmann::json& settings, const std::string& where) {
  GatedConfig c = config_with_shape<GatedConfig>(shape);
  c.gate = parse_gate_kind(settings.at("gate").get<std::string>());
  c.gate_value = settings.at("gate_value").get<double>();
  c.validate(where);
  return c;
}

TrainFamily gated_train_family() {
  TrainFamily f;
  f.name = "gated";
  f.description = "gated: the --gate family (gated-transformer spec)";
  std::vector<std::string> kinds;
  for (GateKind k : {GateKind::dense, GateKind::fixed, GateKind::uniform, GateKind::layerstatic, GateKind::featuregate})
    kinds.push_back(gate_kind_name(k));
  f.settings = {{"gate", "Gate kind: dense, fixed, uniform, layerstatic or featuregate", "featuregate", kinds},
                {"gate_value", "Gate value of the fixed gate, in [0, 1]", 0.6, {}}};
  f.files = single_file_checkpoint;
  set_constructors<GatedConfig>(f, gated_config_of, [](const GatedConfig& c, const TrainableArgs& args) {
    return std::unique_ptr<Trainable>(std::make_unique<GatedTrainable>(c, args.seed, args.batch, args.adamw, args.clip));
  });
  return f;
}

}  // namespace fca
