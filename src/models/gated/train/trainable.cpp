#include "models/gated/train/trainable.h"

#include <cmath>

#include "core/error.h"
#include "models/gated/forward.h"

namespace fca {

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
  f.torch_arch = "gated";
  f.description = "gated: the --gate family (docs/model.md)";
  std::vector<std::string> kinds;
  for (GateKind k : {GateKind::dense, GateKind::fixed, GateKind::uniform, GateKind::layerstatic, GateKind::featuregate})
    kinds.push_back(gate_kind_name(k));
  f.settings = {{"gate", "Gate kind: dense, fixed, uniform, layerstatic or featuregate", "featuregate", kinds},
                {"gate_value", "Gate value of the fixed gate, in [0, 1]", 0.6, {}, in_range(0, 1)}};
  f.files = single_file_checkpoint;
  // Uniform-Matched: a fixed gate at the gate mass of a variant with learned gates.
  f.gate_mass_matching = GateMassMatching{
      "gate_value",
      [](const nlohmann::json& s, const std::string& where) {
        if (s.at("gate") != "fixed") throw Error(where + " sets a fixed gate's value; the variant must be arch \"gated\" with gate \"fixed\"");
      },
      "featuregate, layerstatic or uniform",
      [](const nlohmann::json& s) {
        const std::string gate = s.at("gate").get<std::string>();
        return gate == "featuregate" || gate == "layerstatic" || gate == "uniform" ? std::string() : "gate \"" + gate + "\"";
      }};
  f.gradient_probe = gated_gradient_probe;
  set_constructors<GatedConfig>(f, gated_config_of, [](const GatedConfig& c, const TrainableArgs& args) {
    return std::unique_ptr<Trainable>(std::make_unique<GatedTrainable>(c, args.seed, args.batch, args.adamw, args.clip));
  });
  return f;
}

}  // namespace fca
