#include "models/moe/model.h"

#include "core/json.h"

#include "core/error.h"
#include "core/parse.h"
#include "core/safetensors.h"
#include "models/base/stream.h"

namespace fca {

void MoeConfig::validate(const std::string& where) const {
  auto positive = [&](int v, const char* field) { require_positive(v, field, where); };
  positive(n_layer, "n_layer");
  positive(d_model, "d_model");
  positive(n_head, "n_head");
  positive(seq_len, "seq_len");
  check_transformer_shape(n_layer, d_model, n_head, seq_len, where);
  positive(n_expert, "n_expert");
  if (n_expert > 4096) throw Error(where + ": n_expert must be in 1 .. 4096, found " + std::to_string(n_expert));
  if (expert_hidden > (1 << 20)) throw Error(where + ": expert_hidden must be at most 2^20, found " + std::to_string(expert_hidden));
  positive(top_k, "top_k");
  if (d_model % n_head != 0)
    throw Error(where + ": d_model " + std::to_string(d_model) + " is not divisible by n_head " + std::to_string(n_head));
  if (top_k > n_expert)
    throw Error(where + ": top_k " + std::to_string(top_k) + " is larger than n_expert " + std::to_string(n_expert) +
                " (expected 1 <= k <= E)");
  if (expert_hidden < 0) throw Error(where + ": expert_hidden must be positive, found " + std::to_string(expert_hidden));
  if (hidden() <= 0) throw Error(where + ": the expert width 4D/k is 0; set expert_hidden");
  if (!(aux_loss >= 0.0)) throw Error(where + ": aux_loss must be >= 0, found " + number_text(aux_loss));
}

std::string MoeConfig::to_json() const {
  nlohmann::ordered_json j;
  write_shape_fields(j, *this);
  j["n_expert"] = n_expert;
  j["top_k"] = top_k;
  j["expert_hidden"] = hidden();
  j["aux_loss"] = aux_loss;
  return j.dump();
}

MoeConfig MoeConfig::from_json(const std::string& text, const std::string& where) {
  const StrictConfig j(text, where, {"n_layer", "d_model", "n_head", "seq_len", "n_expert", "top_k", "expert_hidden", "aux_loss"},
                       kMoeFormat);
  MoeConfig c;
  read_shape_fields(j, c);
  c.n_expert = j.integer("n_expert");
  c.top_k = j.integer("top_k");
  c.expert_hidden = j.integer("expert_hidden");
  c.aux_loss = j.number("aux_loss");
  c.validate(where);
  return c;
}

std::vector<TensorSlot> moe_tensor_layout(const MoeConfig& c) {
  LayoutBuilder b;
  const int64_t D = c.d_model, E = c.n_expert, F = c.hidden();
  b.add_byte_trunk(c.n_layer, D, c.seq_len, [&](LayoutBuilder& block, const std::string& p, int) {
    block.add_attention_half(p, D);
    block.add(p + "router.weight", {E, D});
    // Expert matrices are stacked [E, out, in]: each expert's slice is a Linear weight, decayed.
    block.add(p + "experts.fc.weight", {E, F, D}, true);
    block.add(p + "experts.fc.bias", {E, F}, false);
    block.add(p + "experts.proj.weight", {E, D, F}, true);
    block.add(p + "experts.proj.bias", {E, D}, false);
  });
  return b.slots;
}

template <typename T>
MoeWeights<T> MoeSpec::bind(ParameterBuffer<T>& params, const MoeConfig& c) {
  MoeWeights<T> w;
  bind_byte_trunk(w, [&](const std::string& name) { return params.at(name); });
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = block_prefix(l);
    w.blocks.push_back({params.block(p), params.find(p + "router.weight"), params.find(p + "experts.fc.weight"),
                        params.find(p + "experts.fc.bias"), params.find(p + "experts.proj.weight"),
                        params.find(p + "experts.proj.bias")});
  }
  return w;
}

std::string MoeSpec::describe(const MoeConfig& c) {
  return "moe model with " + std::to_string(c.n_layer) + " layers, " + std::to_string(c.n_expert) + " experts of width " +
         std::to_string(c.hidden());
}

template MoeWeights<float> MoeSpec::bind<float>(ParameterBuffer<float>&, const MoeConfig&);
template MoeWeights<double> MoeSpec::bind<double>(ParameterBuffer<double>&, const MoeConfig&);

}  // namespace fca
