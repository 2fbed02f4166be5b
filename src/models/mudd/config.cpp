#include "models/mudd/config.h"

#include <cmath>
#include <fstream>
#include "core/json.h"

#include "core/error.h"
#include "core/json_fields.h"

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
  // A Hugging Face config carries metadata fca does not use (auto_map, transformers_version, ...)
  // and gains keys with every release, so unknown keys are ignored; every key the architecture
  // depends on is required (never a class default) and checked for type and range before it is
  // narrowed. The ranges are far above any published model and keep every size product in 64 bits.
  const JsonFields f(j, path, {}, UnknownKeys::ignored);
  auto need = [&](const char* key) {
    if (!f.has(key)) throw Error(path + ": key '" + std::string(key) + "' is missing");
  };
  auto integer = [&](const char* key, int64_t high) {
    need(key);
    return int(f.integer(key, 0, 1, high));
  };
  auto positive = [&](const char* key, double high) {
    need(key);
    const double x = f.number(key, 0, 0, high);
    if (!(x > 0)) throw Error(path + ": '" + std::string(key) + "' must be positive, found " + f.text_of(key));
    return x;
  };
  auto flag = [&](const char* key, bool required_value) {
    need(key);
    if (f.flag(key, required_value) != required_value)
      throw Error(path + ": '" + std::string(key) + "' = " + f.text_of(key) + " is not supported (fca implements " +
                  (required_value ? "true" : "false") + ")");
  };
  MuddConfig c;
  c.n_layer = integer("n_layer", 4096);
  c.dim = integer("dim", 65536);
  c.n_head = integer("n_head", c.dim);
  c.vocab_size = integer("vocab_size", 1 << 24);
  c.block_size = integer("block_size", 1 << 20);
  c.intermediate_size = integer("intermediate_size", 1 << 20);
  c.rope_base = positive("rope_base", 1e12);
  need("rotary_pct");
  c.rotary_pct = f.number("rotary_pct", 0, 0, 1);
  c.norm_eps = positive("norm_eps", 1);
  if (integer("n_local_heads", c.dim) != c.n_head)
    throw Error(path + ": n_local_heads " + f.text_of("n_local_heads") + " differs from n_head " +
                std::to_string(c.n_head) + " (grouped-query attention is not supported)");
  if (c.dim % c.n_head != 0) throw Error(path + ": dim " + std::to_string(c.dim) + " is not divisible by n_head");
  c.head_dim = c.dim / c.n_head;
  if (f.has("head_dim") && f.integer("head_dim", 0, 1, 65536) != c.head_dim)
    throw Error(path + ": head_dim " + f.text_of("head_dim") + " differs from dim / n_head = " + std::to_string(c.head_dim));
  if (c.n_layer < 2) throw Error(path + ": n_layer must be at least 2 (the FFN width formula divides by n_layer - 1)");
  if (c.rotary_dims() % 2 != 0 || c.rotary_dims() > c.head_dim)
    throw Error(path + ": rotary_pct * head_dim = " + std::to_string(c.rotary_dims()) + " must be even and <= head_dim");
  need("dense_type");
  if (f.text("dense_type", "") != "qkvr")
    throw Error(path + ": dense_type " + f.text_of("dense_type") + " is not supported (expected \"qkvr\")");
  flag("use_qk_norm", true);
  flag("use_parallel_residual", true);
  flag("use_linear_bias", true);
  flag("dense", true);
  flag("dynamic_dense", true);
  flag("sepln", true);
  flag("tie_word_embeddings", false);
  need("expand_last");
  need("round64");
  c.expand_last = f.flag("expand_last", false);
  c.round64 = f.flag("round64", false);
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
