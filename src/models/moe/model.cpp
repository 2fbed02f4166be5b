#include "models/moe/model.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/safetensors.h"

namespace fca {

void MoeConfig::validate(const std::string& where) const {
  auto positive = [&](int v, const char* field) {
    if (v <= 0) throw Error(where + ": " + field + " must be positive, found " + std::to_string(v));
  };
  positive(n_layer, "n_layer");
  positive(d_model, "d_model");
  positive(n_head, "n_head");
  positive(seq_len, "seq_len");
  positive(n_expert, "n_expert");
  positive(top_k, "top_k");
  if (d_model % n_head != 0)
    throw Error(where + ": d_model " + std::to_string(d_model) + " is not divisible by n_head " + std::to_string(n_head));
  if (top_k > n_expert)
    throw Error(where + ": top_k " + std::to_string(top_k) + " is larger than n_expert " + std::to_string(n_expert) +
                " (expected 1 <= k <= E)");
  if (expert_hidden < 0) throw Error(where + ": expert_hidden must be positive, found " + std::to_string(expert_hidden));
  if (hidden() <= 0) throw Error(where + ": the expert width 4D/k is 0; set expert_hidden");
  if (!(aux_loss >= 0.0)) throw Error(where + ": aux_loss must be >= 0, found " + std::to_string(aux_loss));
}

std::string MoeConfig::to_json() const {
  nlohmann::ordered_json j;
  j["n_layer"] = n_layer;
  j["d_model"] = d_model;
  j["n_head"] = n_head;
  j["seq_len"] = seq_len;
  j["n_expert"] = n_expert;
  j["top_k"] = top_k;
  j["expert_hidden"] = hidden();
  j["aux_loss"] = aux_loss;
  return j.dump();
}

MoeConfig MoeConfig::from_json(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": config is not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw Error(where + ": config is not a JSON object");
  static const char* known[] = {"n_layer", "d_model", "n_head", "seq_len", "n_expert", "top_k", "expert_hidden", "aux_loss"};
  for (const auto& [key, value] : j.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (!ok) throw Error(where + ": unknown config key '" + key + "' for " + kMoeFormat);
  }
  auto get_int = [&](const char* field) {
    if (!j.contains(field) || !j[field].is_number_integer())
      throw Error(where + ": config field '" + field + "' is missing or not an integer");
    const int64_t v = j[field].get<int64_t>();
    if (v < 0 || v > (int64_t(1) << 24)) throw Error(where + ": config field '" + field + "' is out of range: " + std::to_string(v));
    return int(v);
  };
  MoeConfig c;
  c.n_layer = get_int("n_layer");
  c.d_model = get_int("d_model");
  c.n_head = get_int("n_head");
  c.seq_len = get_int("seq_len");
  c.n_expert = get_int("n_expert");
  c.top_k = get_int("top_k");
  c.expert_hidden = get_int("expert_hidden");
  if (!j.contains("aux_loss") || !j["aux_loss"].is_number()) throw Error(where + ": config field 'aux_loss' is missing or not a number");
  c.aux_loss = j["aux_loss"].get<double>();
  c.validate(where);
  return c;
}

std::vector<TensorSlot> moe_tensor_layout(const MoeConfig& c) {
  LayoutBuilder b;
  const int64_t D = c.d_model, E = c.n_expert, F = c.hidden();
  b.add("wte", {256, D});
  b.add("wpe", {c.seq_len, D});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    b.add_attention_half(p, D);
    b.add(p + "router.weight", {E, D});
    // Expert matrices are stacked [E, out, in]: each expert's slice is a Linear weight, decayed.
    b.add(p + "experts.fc.weight", {E, F, D}, true);
    b.add(p + "experts.fc.bias", {E, F}, false);
    b.add(p + "experts.proj.weight", {E, D, F}, true);
    b.add(p + "experts.proj.bias", {E, D}, false);
  }
  b.add("ln_f.weight", {D});
  b.add("ln_f.bias", {D});
  return b.slots;
}

template <typename T>
MoeModel<T>::MoeModel(const MoeConfig& config) : config_(config), params_(moe_tensor_layout(config)) {
  bind();
}

template <typename T>
MoeModel<T>& MoeModel<T>::operator=(const MoeModel& other) {
  if (this != &other) {
    config_ = other.config_;
    params_ = other.params_;
    bind();
  }
  return *this;
}

template <typename T>
void MoeModel<T>::bind() {
  weights_.wte = params_.find("wte");
  weights_.wpe = params_.find("wpe");
  weights_.blocks.clear();
  for (int l = 0; l < config_.n_layer; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    weights_.blocks.push_back({params_.block(p), params_.find(p + "router.weight"), params_.find(p + "experts.fc.weight"),
                               params_.find(p + "experts.fc.bias"), params_.find(p + "experts.proj.weight"),
                               params_.find(p + "experts.proj.bias")});
  }
  weights_.ln_f_weight = params_.find("ln_f.weight");
  weights_.ln_f_bias = params_.find("ln_f.bias");
}

template <typename T>
template <typename U>
MoeModel<T> MoeModel<T>::converted_from(const MoeModel<U>& other) {
  MoeModel<T> m(other.config());
  m.params_.copy_from(other.parameters());
  m.bind();
  return m;
}

template <typename T>
MoeModel<T> MoeModel<T>::initialized(const MoeConfig& config, uint64_t seed) {
  config.validate("initialisation");
  MoeModel<T> m(config);
  m.params_.initialize(config.n_layer, seed);
  return m;
}

template <typename T>
MoeModel<T> MoeModel<T>::load(const std::string& path) {
  const MoeConfig config = MoeConfig::from_json(read_checkpoint_config(path, kMoeFormat), path);
  SafetensorsReader reader(path);
  MoeModel<T> m(config);
  m.params_.load(reader, "moe model with " + std::to_string(config.n_layer) + " layers, " +
                             std::to_string(config.n_expert) + " experts of width " + std::to_string(config.hidden()));
  return m;
}

template <typename T>
void MoeModel<T>::save(const std::string& path, const std::map<std::string, std::string>& extra) const {
  std::map<std::string, std::string> metadata = extra;
  metadata["format"] = kMoeFormat;
  metadata["config"] = config_.to_json();
  params_.save(path, metadata);
}

template class MoeModel<float>;
template class MoeModel<double>;
template MoeModel<double> MoeModel<double>::converted_from<float>(const MoeModel<float>&);

}  // namespace fca
