#include "models/gated/model.h"

#include <cmath>

#include "core/error.h"
#include "models/parameters.h"
#include "core/rng.h"
#include "core/safetensors.h"

namespace fca {

template <typename T>
GatedWeights<T> bind_gated_weights(const GatedConfig& config, const std::vector<TensorSlot>& layout, T* base) {
  std::map<std::string, T*> by_name;
  for (const auto& s : layout) by_name[s.name] = base + s.offset;
  auto at = [&](const std::string& name) -> T* {
    auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : it->second;
  };
  GatedWeights<T> w;
  bind_byte_trunk(w, at);
  for (int l = 0; l < config.n_layer; ++l) {
    const std::string p = block_prefix(l);
    w.blocks.push_back({at(p + "ln1.weight"), at(p + "ln1.bias"), at(p + "attn.qkv.weight"), at(p + "attn.qkv.bias"),
                        at(p + "attn.proj.weight"), at(p + "attn.proj.bias"), at(p + "ln2.weight"), at(p + "ln2.bias"),
                        at(p + "mlp.fc.weight"), at(p + "mlp.fc.bias"), at(p + "mlp.proj.weight"),
                        at(p + "mlp.proj.bias")});
  }
  w.gate_logit = at("gate.logit");
  w.gate_weight = at("gate.weight");
  w.gate_bias = at("gate.bias");
  return w;
}

std::string GatedSpec::describe(const GatedConfig& c) {
  return std::string(gate_kind_name(c.gate)) + " model with " + std::to_string(c.n_layer) + " layers";
}

GatedConfig read_gated_config(const std::string& path) {
  return GatedConfig::from_json(read_checkpoint_config(path, kGatedFormat), path);
}

template GatedWeights<float> bind_gated_weights<float>(const GatedConfig&, const std::vector<TensorSlot>&, float*);
template GatedWeights<double> bind_gated_weights<double>(const GatedConfig&, const std::vector<TensorSlot>&, double*);

}  // namespace fca
