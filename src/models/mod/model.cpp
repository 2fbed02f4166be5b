#include "models/mod/model.h"

#include <cmath>
#include "core/json.h"

#include "core/error.h"
#include "core/parse.h"
#include "core/safetensors.h"
#include "models/base/stream.h"

namespace fca {

int ModConfig::selected_tokens(int tokens) const {
  return std::max(1, int(std::floor(capacity * double(tokens))));
}

void ModConfig::validate(const std::string& where) const {
  auto positive = [&](int v, const char* field) { require_positive(v, field, where); };
  positive(n_layer, "n_layer");
  positive(d_model, "d_model");
  positive(n_head, "n_head");
  positive(seq_len, "seq_len");
  check_transformer_shape(n_layer, d_model, n_head, seq_len, where);
  positive(routed_every, "routed_every");
  if (d_model % n_head != 0)
    throw Error(where + ": d_model " + std::to_string(d_model) + " is not divisible by n_head " + std::to_string(n_head));
  if (!(capacity > 0.0 && capacity <= 1.0))
    throw Error(where + ": capacity must be in (0, 1], found " + number_text(capacity));
}

std::string ModConfig::to_json() const {
  nlohmann::ordered_json j;
  write_shape_fields(j, *this);
  j["capacity"] = capacity;
  j["routed_every"] = routed_every;
  return j.dump();
}

ModConfig ModConfig::from_json(const std::string& text, const std::string& where) {
  const StrictConfig j(text, where, {"n_layer", "d_model", "n_head", "seq_len", "capacity", "routed_every"}, kModFormat);
  ModConfig c;
  read_shape_fields(j, c);
  c.routed_every = j.integer("routed_every");
  c.capacity = j.number("capacity");
  c.validate(where);
  return c;
}

std::vector<TensorSlot> mod_tensor_layout(const ModConfig& c) {
  LayoutBuilder b;
  const int64_t D = c.d_model;
  b.add_byte_trunk(c.n_layer, D, c.seq_len, [&](LayoutBuilder& block, const std::string& p, int l) {
    block.add_dense_block(p, D);
    if (c.routed(l)) {
      block.add(p + "router.weight", {D}, false);
      block.add(p + "router.bias", {1}, false);
    }
  });
  return b.slots;
}

template <typename T>
ModWeights<T> ModSpec::bind(ParameterBuffer<T>& params, const ModConfig& c) {
  ModWeights<T> w;
  bind_byte_trunk(w, [&](const std::string& name) { return params.at(name); });
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = block_prefix(l);
    w.blocks.push_back(params.block(p));
    w.router_weight.push_back(params.find(p + "router.weight"));
    w.router_bias.push_back(params.find(p + "router.bias"));
  }
  return w;
}

std::string ModSpec::describe(const ModConfig& c) {
  return "mod model with " + std::to_string(c.n_layer) + " layers (routed every " + std::to_string(c.routed_every) + ")";
}

template ModWeights<float> ModSpec::bind<float>(ParameterBuffer<float>&, const ModConfig&);
template ModWeights<double> ModSpec::bind<double>(ParameterBuffer<double>&, const ModConfig&);

}  // namespace fca
