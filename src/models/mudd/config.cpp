#include "models/mudd/config.h"

#include <cmath>
#include <fstream>
#include "core/json.h"

#include "core/error.h"

namespace fca {

int MuddConfig::ffn_width(int i) const {
  const double x = double(intermediate_size) * (double(i) / double(n_layer - 1) + 0.5) / 128.0;
  return int(std::nearbyint(x)) * 128;  // nearbyint rounds half to even, like Python's round
}

int MuddConfig::da_hidden(int i) const {
  int base = streams(i) * sources(i);
  if (i == n_layer - 1 && expand_last) base *= 4;
  return round64 ? (base / 64 + 1) * 64 : base;
}

MuddConfig MuddConfig::load(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open (a MUDD model folder needs config.json)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
  auto need = [&](const char* key) -> const nlohmann::json& {
    if (!j.contains(key)) throw Error(path + ": key '" + std::string(key) + "' is missing");
    return j[key];
  };
  auto integer = [&](const char* key) {
    const auto& v = need(key);
    if (!v.is_number_integer() || v.get<int64_t>() <= 0)
      throw Error(path + ": '" + std::string(key) + "' must be a positive integer, found " + v.dump());
    return v.get<int>();
  };
  auto number = [&](const char* key) {
    const auto& v = need(key);
    if (!v.is_number()) throw Error(path + ": '" + std::string(key) + "' must be a number, found " + v.dump());
    return v.get<double>();
  };
  auto flag = [&](const char* key, bool required_value) {
    const auto& v = need(key);
    if (!v.is_boolean()) throw Error(path + ": '" + std::string(key) + "' must be true or false, found " + v.dump());
    if (v.get<bool>() != required_value)
      throw Error(path + ": '" + std::string(key) + "' = " + v.dump() + " is not supported (fca implements " +
                  (required_value ? "true" : "false") + ")");
  };
  MuddConfig c;
  c.n_layer = integer("n_layer");
  c.dim = integer("dim");
  c.n_head = integer("n_head");
  c.vocab_size = integer("vocab_size");
  c.block_size = integer("block_size");
  c.intermediate_size = integer("intermediate_size");
  c.rope_base = number("rope_base");
  c.rotary_pct = number("rotary_pct");
  c.norm_eps = number("norm_eps");
  if (integer("n_local_heads") != c.n_head)
    throw Error(path + ": n_local_heads " + need("n_local_heads").dump() + " differs from n_head " +
                std::to_string(c.n_head) + " (grouped-query attention is not supported)");
  if (c.dim % c.n_head != 0) throw Error(path + ": dim " + std::to_string(c.dim) + " is not divisible by n_head");
  c.head_dim = c.dim / c.n_head;
  if (j.contains("head_dim") && j["head_dim"] != c.head_dim)
    throw Error(path + ": head_dim " + j["head_dim"].dump() + " differs from dim / n_head = " + std::to_string(c.head_dim));
  if (c.n_layer < 2) throw Error(path + ": n_layer must be at least 2 (the FFN width formula divides by n_layer - 1)");
  if (c.rotary_dims() % 2 != 0 || c.rotary_dims() > c.head_dim)
    throw Error(path + ": rotary_pct * head_dim = " + std::to_string(c.rotary_dims()) + " must be even and <= head_dim");
  if (!need("dense_type").is_string() || need("dense_type") != "qkvr")
    throw Error(path + ": dense_type " + need("dense_type").dump() + " is not supported (expected \"qkvr\")");
  flag("use_qk_norm", true);
  flag("use_parallel_residual", true);
  flag("use_linear_bias", true);
  flag("dense", true);
  flag("dynamic_dense", true);
  flag("sepln", true);
  flag("tie_word_embeddings", false);
  if (!need("expand_last").is_boolean() || !need("round64").is_boolean())
    throw Error(path + ": expand_last and round64 must be true or false");
  c.expand_last = j["expand_last"];
  c.round64 = j["round64"];
  return c;
}

std::string MuddConfig::to_json() const {
  nlohmann::ordered_json j;
  j["architectures"] = {"MUDDPythia"};
  j["model_type"] = "muddpythia";
  j["block_size"] = block_size;
  j["vocab_size"] = vocab_size;
  j["n_layer"] = n_layer;
  j["n_head"] = n_head;
  j["n_local_heads"] = n_head;
  j["dim"] = dim;
  j["head_dim"] = head_dim;
  j["intermediate_size"] = intermediate_size;
  j["rope_base"] = rope_base;
  j["rotary_pct"] = rotary_pct;
  j["norm_eps"] = norm_eps;
  j["use_qk_norm"] = true;
  j["use_parallel_residual"] = true;
  j["use_linear_bias"] = true;
  j["dense"] = true;
  j["dynamic_dense"] = true;
  j["dense_type"] = "qkvr";
  j["sepln"] = true;
  j["expand_last"] = expand_last;
  j["round64"] = round64;
  j["stack_hidden"] = false;
  j["use_layer_cache"] = true;
  j["tie_word_embeddings"] = false;
  j["bos_token_id"] = 0;
  j["eos_token_id"] = 0;
  j["torch_dtype"] = "float32";
  return j.dump(2);
}

}  // namespace fca
