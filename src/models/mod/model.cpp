#include "models/mod/model.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/safetensors.h"

namespace fca {

int ModConfig::selected_tokens(int tokens) const {
  return std::max(1, int(std::floor(capacity * double(tokens))));
}

void ModConfig::validate(const std::string& where) const {
  auto positive = [&](int v, const char* field) {
    if (v <= 0) throw Error(where + ": " + field + " must be positive, found " + std::to_string(v));
  };
  positive(n_layer, "n_layer");
  positive(d_model, "d_model");
  positive(n_head, "n_head");
  positive(seq_len, "seq_len");
  positive(routed_every, "routed_every");
  if (d_model % n_head != 0)
    throw Error(where + ": d_model " + std::to_string(d_model) + " is not divisible by n_head " + std::to_string(n_head));
  if (!(capacity > 0.0 && capacity <= 1.0))
    throw Error(where + ": capacity must be in (0, 1], found " + std::to_string(capacity));
}

std::string ModConfig::to_json() const {
  nlohmann::ordered_json j;
  j["n_layer"] = n_layer;
  j["d_model"] = d_model;
  j["n_head"] = n_head;
  j["seq_len"] = seq_len;
  j["capacity"] = capacity;
  j["routed_every"] = routed_every;
  return j.dump();
}

ModConfig ModConfig::from_json(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": config is not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw Error(where + ": config is not a JSON object");
  static const char* known[] = {"n_layer", "d_model", "n_head", "seq_len", "capacity", "routed_every"};
  for (const auto& [key, value] : j.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (!ok) throw Error(where + ": unknown config key '" + key + "' for " + kModFormat);
  }
  auto get_int = [&](const char* field) {
    if (!j.contains(field) || !j[field].is_number_integer())
      throw Error(where + ": config field '" + field + "' is missing or not an integer");
    const int64_t v = j[field].get<int64_t>();
    if (v < 0 || v > (int64_t(1) << 24)) throw Error(where + ": config field '" + field + "' is out of range: " + std::to_string(v));
    return int(v);
  };
  ModConfig c;
  c.n_layer = get_int("n_layer");
  c.d_model = get_int("d_model");
  c.n_head = get_int("n_head");
  c.seq_len = get_int("seq_len");
  c.routed_every = get_int("routed_every");
  if (!j.contains("capacity") || !j["capacity"].is_number()) throw Error(where + ": config field 'capacity' is missing or not a number");
  c.capacity = j["capacity"].get<double>();
  c.validate(where);
  return c;
}

std::vector<TensorSlot> mod_tensor_layout(const ModConfig& c) {
  LayoutBuilder b;
  const int64_t D = c.d_model;
  b.add("wte", {256, D});
  b.add("wpe", {c.seq_len, D});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    b.add_attention_half(p, D);
    b.add(p + "mlp.fc.weight", {4 * D, D});
    b.add(p + "mlp.fc.bias", {4 * D});
    b.add(p + "mlp.proj.weight", {D, 4 * D});
    b.add(p + "mlp.proj.bias", {D});
    if (c.routed(l)) {
      b.add(p + "router.weight", {D}, false);
      b.add(p + "router.bias", {1}, false);
    }
  }
  b.add("ln_f.weight", {D});
  b.add("ln_f.bias", {D});
  return b.slots;
}

template <typename T>
ModModel<T>::ModModel(const ModConfig& config) : config_(config), params_(mod_tensor_layout(config)) {
  bind();
}

template <typename T>
ModModel<T>& ModModel<T>::operator=(const ModModel& other) {
  if (this != &other) {
    config_ = other.config_;
    params_ = other.params_;
    bind();
  }
  return *this;
}

template <typename T>
void ModModel<T>::bind() {
  weights_.wte = params_.find("wte");
  weights_.wpe = params_.find("wpe");
  weights_.blocks.clear();
  weights_.router_weight.clear();
  weights_.router_bias.clear();
  for (int l = 0; l < config_.n_layer; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    weights_.blocks.push_back(params_.block(p));
    weights_.router_weight.push_back(params_.find(p + "router.weight"));
    weights_.router_bias.push_back(params_.find(p + "router.bias"));
  }
  weights_.ln_f_weight = params_.find("ln_f.weight");
  weights_.ln_f_bias = params_.find("ln_f.bias");
}

template <typename T>
template <typename U>
ModModel<T> ModModel<T>::converted_from(const ModModel<U>& other) {
  ModModel<T> m(other.config());
  m.params_.copy_from(other.parameters());
  m.bind();
  return m;
}

template <typename T>
ModModel<T> ModModel<T>::initialized(const ModConfig& config, uint64_t seed) {
  config.validate("initialisation");
  ModModel<T> m(config);
  m.params_.initialize(config.n_layer, seed);
  return m;
}

template <typename T>
ModModel<T> ModModel<T>::load(const std::string& path) {
  const ModConfig config = ModConfig::from_json(read_checkpoint_config(path, kModFormat), path);
  SafetensorsReader reader(path);
  ModModel<T> m(config);
  m.params_.load(reader, "mod model with " + std::to_string(config.n_layer) + " layers (routed every " +
                             std::to_string(config.routed_every) + ")");
  return m;
}

template <typename T>
void ModModel<T>::save(const std::string& path, const std::map<std::string, std::string>& extra) const {
  std::map<std::string, std::string> metadata = extra;
  metadata["format"] = kModFormat;
  metadata["config"] = config_.to_json();
  params_.save(path, metadata);
}

template class ModModel<float>;
template class ModModel<double>;
template ModModel<double> ModModel<double>::converted_from<float>(const ModModel<float>&);

}  // namespace fca
