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
  w.wte = at("wte");
  w.wpe = at("wpe");
  for (int l = 0; l < config.n_layer; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    w.blocks.push_back({at(p + "ln1.weight"), at(p + "ln1.bias"), at(p + "attn.qkv.weight"), at(p + "attn.qkv.bias"),
                        at(p + "attn.proj.weight"), at(p + "attn.proj.bias"), at(p + "ln2.weight"), at(p + "ln2.bias"),
                        at(p + "mlp.fc.weight"), at(p + "mlp.fc.bias"), at(p + "mlp.proj.weight"),
                        at(p + "mlp.proj.bias")});
  }
  w.ln_f_weight = at("ln_f.weight");
  w.ln_f_bias = at("ln_f.bias");
  w.gate_logit = at("gate.logit");
  w.gate_weight = at("gate.weight");
  w.gate_bias = at("gate.bias");
  return w;
}

template <typename T>
GatedModel<T>::GatedModel(const GatedConfig& config) : config_(config), layout_(gated_tensor_layout(config)) {
  const auto& last = layout_.back();
  storage_.assign(last.offset + (last.numel + 15) / 16 * 16, T(0));
  weights_ = bind_gated_weights(config_, layout_, storage_.data());
}

template <typename T>
GatedModel<T>::GatedModel(const GatedModel& other)
    : config_(other.config_), layout_(other.layout_), storage_(other.storage_) {
  weights_ = bind_gated_weights(config_, layout_, storage_.data());
}

template <typename T>
GatedModel<T>& GatedModel<T>::operator=(const GatedModel& other) {
  if (this != &other) {
    config_ = other.config_;
    layout_ = other.layout_;
    storage_ = other.storage_;
    weights_ = bind_gated_weights(config_, layout_, storage_.data());
  }
  return *this;
}

template <typename T>
template <typename U>
GatedModel<T> GatedModel<T>::converted_from(const GatedModel<U>& other) {
  GatedModel<T> m(other.config());
  for (size_t i = 0; i < m.storage_.size(); ++i) m.storage_[i] = static_cast<T>(other.data()[i]);
  return m;
}

template <typename T>
T* GatedModel<T>::tensor(const std::string& name) {
  for (const auto& s : layout_)
    if (s.name == name) return storage_.data() + s.offset;
  throw Error("model has no tensor '" + name + "'");
}

template <typename T>
const T* GatedModel<T>::tensor(const std::string& name) const {
  return const_cast<GatedModel*>(this)->tensor(name);
}

template <typename T>
GatedModel<T> GatedModel<T>::initialized(const GatedConfig& config, uint64_t seed) {
  config.validate("initialisation");
  GatedModel<T> m(config);
  Rng rng(seed);
  const double residual_std = 0.02 / std::sqrt(2.0 * config.n_layer);
  for (const auto& s : m.layout_) {
    T* p = m.storage_.data() + s.offset;
    const bool is_residual_proj = s.name.ends_with("attn.proj.weight") || s.name.ends_with("mlp.proj.weight");
    const bool is_normal = s.name == "wte" || s.name == "wpe" || s.name.ends_with("qkv.weight") ||
                           s.name.ends_with("fc.weight") || is_residual_proj;
    const bool is_ln_weight = s.name.ends_with("ln1.weight") || s.name.ends_with("ln2.weight") || s.name == "ln_f.weight";
    for (size_t i = 0; i < s.numel; ++i) {
      if (is_normal) p[i] = static_cast<T>(rng.normal() * (is_residual_proj ? residual_std : 0.02));
      else p[i] = is_ln_weight ? T(1) : T(0);
    }
  }
  return m;
}

GatedConfig read_gated_config(const std::string& path) {
  SafetensorsReader reader(path);
  auto fmt = reader.metadata().find("format");
  if (fmt == reader.metadata().end())
    throw Error(path + ": no 'format' in the safetensors metadata (expected \"" + std::string(kGatedFormat) + "\")");
  if (fmt->second != kGatedFormat)
    throw Error(path + ": format is \"" + fmt->second + "\", expected \"" + kGatedFormat + "\"");
  auto cfg = reader.metadata().find("config");
  if (cfg == reader.metadata().end()) throw Error(path + ": no 'config' in the safetensors metadata");
  return GatedConfig::from_json(cfg->second, path);
}

template <typename T>
GatedModel<T> GatedModel<T>::load(const std::string& path) {
  const GatedConfig config = read_gated_config(path);
  SafetensorsReader reader(path);
  check_parameters_fit(gated_parameter_count(config), path);
  GatedModel<T> m(config);
  for (const auto& s : m.layout_) {
    if (!reader.has(s.name))
      throw Error(path + ": tensor '" + s.name + "' is missing (expected shape " + shape_string(s.shape) +
                  " for gate " + gate_kind_name(config.gate) + ")");
    reader.read_into<T>(s.name, s.shape, m.storage_.data() + s.offset);
  }
  for (const auto& [name, info] : reader.tensors()) {
    bool known = false;
    for (const auto& s : m.layout_) known = known || s.name == name;
    if (!known)
      throw Error(path + ": unexpected tensor '" + name + "' for a " + gate_kind_name(config.gate) + " model with " +
                  std::to_string(config.n_layer) + " layers");
  }
  return m;
}

template <typename T>
void GatedModel<T>::save(const std::string& path, const std::map<std::string, std::string>& extra) const {
  std::vector<float> as_float(storage_.begin(), storage_.end());
  std::vector<TensorToWrite> tensors;
  for (const auto& s : layout_) tensors.push_back({s.name, s.shape, as_float.data() + s.offset});
  std::map<std::string, std::string> metadata = extra;
  metadata["format"] = kGatedFormat;
  metadata["config"] = config_.to_json();
  write_safetensors(path, tensors, metadata);
}

template struct GatedWeights<float>;
template struct GatedWeights<double>;
template GatedWeights<float> bind_gated_weights<float>(const GatedConfig&, const std::vector<TensorSlot>&, float*);
template GatedWeights<double> bind_gated_weights<double>(const GatedConfig&, const std::vector<TensorSlot>&, double*);
template class GatedModel<float>;
template class GatedModel<double>;
template GatedModel<double> GatedModel<double>::converted_from<float>(const GatedModel<float>&);
template GatedModel<float> GatedModel<float>::converted_from<double>(const GatedModel<double>&);

}  // namespace fca
