#include "models/gated/config.h"

#include <cmath>
#include "core/json.h"

#include "core/error.h"
#include "core/parse.h"
#include "models/parameters.h"

namespace fca {

const char* gate_kind_name(GateKind kind) {
  switch (kind) {
    case GateKind::dense: return "dense";
    case GateKind::fixed: return "fixed";
    case GateKind::uniform: return "uniform";
    case GateKind::layerstatic: return "layerstatic";
    case GateKind::featuregate: return "featuregate";
  }
  return "?";
}

GateKind parse_gate_kind(const std::string& name) {
  for (GateKind k : {GateKind::dense, GateKind::fixed, GateKind::uniform, GateKind::layerstatic, GateKind::featuregate})
    if (name == gate_kind_name(k)) return k;
  throw Error("unknown gate kind '" + name + "' (expected one of dense, fixed, uniform, layerstatic, featuregate)");
}

void GatedConfig::validate(const std::string& where) const {
  auto positive = [&](int v, const char* field) {
    if (v <= 0) throw Error(where + ": " + field + " must be positive, found " + std::to_string(v));
  };
  positive(n_layer, "n_layer");
  positive(d_model, "d_model");
  positive(n_head, "n_head");
  positive(seq_len, "seq_len");
  check_transformer_shape(n_layer, d_model, n_head, seq_len, where);
  if (d_model % n_head != 0)
    throw Error(where + ": d_model " + std::to_string(d_model) + " is not divisible by n_head " + std::to_string(n_head));
  if (gate == GateKind::fixed && !(gate_value >= 0.0 && gate_value <= 1.0))
    throw Error(where + ": gate_value must be in [0, 1] for the fixed gate, found " + number_text(gate_value));
}

std::string GatedConfig::to_json() const {
  nlohmann::ordered_json j;
  j["n_layer"] = n_layer;
  j["d_model"] = d_model;
  j["n_head"] = n_head;
  j["seq_len"] = seq_len;
  j["gate"] = gate_kind_name(gate);
  j["gate_value"] = gate_value;
  return j.dump();
}

GatedConfig GatedConfig::from_json(const std::string& text, const std::string& where) {
  const StrictConfig j(text, where, {"n_layer", "d_model", "n_head", "seq_len", "gate", "gate_value"}, "fca-gated-v1");
  GatedConfig c;
  c.n_layer = j.integer("n_layer");
  c.d_model = j.integer("d_model");
  c.n_head = j.integer("n_head");
  c.seq_len = j.integer("seq_len");
  try {
    c.gate = parse_gate_kind(j.text("gate"));
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  if (j.has("gate_value")) c.gate_value = j.number("gate_value");
  c.validate(where);
  return c;
}

std::vector<TensorSlot> gated_tensor_layout(const GatedConfig& c) {
  // docs/model.md decays "2-D weight matrices only": exactly the tensors of rank 2 (LayoutBuilder's
  // rule: wte, wpe, Linear weights and featuregate's gate.weight [L, 4]); each tensor starts on a
  // 16-element boundary so that rows of every matrix stay aligned.
  LayoutBuilder b;
  const int64_t D = c.d_model, L = c.n_layer;
  b.add_byte_trunk(c.n_layer, D, c.seq_len, [&](LayoutBuilder& block, const std::string& p, int) { block.add_dense_block(p, D); });
  if (c.gate == GateKind::uniform) b.add("gate.logit", {1});
  if (c.gate == GateKind::layerstatic) b.add("gate.logit", {L});
  if (c.gate == GateKind::featuregate) {
    b.add("gate.weight", {L, 4});
    b.add("gate.bias", {L});
  }
  return b.slots;
}

size_t gated_parameter_count(const GatedConfig& config) {
  size_t n = 0;
  for (const auto& s : gated_tensor_layout(config)) n += s.numel;
  return n;
}

}  // namespace fca
