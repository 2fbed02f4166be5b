#include "models/mudd/model.h"

#include <algorithm>
#include <type_traits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include "core/json.h"

#include "core/error.h"
#include "core/file_io.h"
#include "core/safetensors.h"
#include "core/rng.h"
#include "core/sha256.h"
#include "models/parameters.h"

namespace fca {

std::vector<TensorSlot> mudd_tensor_layout(const MuddConfig& c) {
  LayoutBuilder layout;  // AdamW decay on the rank-2 tensors
  auto add = [&](std::string name, std::vector<int64_t> shape) { layout.add(std::move(name), std::move(shape)); };
  const int64_t D = c.dim, V = c.vocab_size;
  add("tok_embeddings.weight", {V, D});
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    if (i == 0) {
      add(p + "attention_norm.weight", {D});
      add(p + "attention_norm.bias", {D});
    } else {
      for (int s = 0; s < 3; ++s) {
        add(p + "attention_norms." + std::to_string(s) + ".weight", {D});
        add(p + "attention_norms." + std::to_string(s) + ".bias", {D});
      }
    }
    for (const char* m : {"wq", "wk", "wv", "wo"}) {
      add(p + "attention." + m + ".weight", {D, D});
      add(p + "attention." + m + ".bias", {D});
    }
    add(p + "attention.q_norm.weight", {c.head_dim});
    add(p + "attention.k_norm.weight", {c.head_dim});
    const int64_t F = c.ffn_width(i);
    add(p + "feed_forward.w1.weight", {F, D});
    add(p + "feed_forward.w1.bias", {F});
    add(p + "feed_forward.w2.weight", {D, F});
    add(p + "feed_forward.w2.bias", {D});
    add(p + "ffn_norm.weight", {D});
    add(p + "ffn_norm.bias", {D});
  }
  add("norm.weight", {D});
  add("norm.bias", {D});
  add("output.weight", {V, D});
  for (int i = 0; i < c.n_layer; ++i) {
    add("dense_bs." + std::to_string(i), {c.streams(i), c.sources(i)});
    add("dynamic_dense." + std::to_string(i) + ".w1.weight", {c.da_hidden(i), D});
    add("dynamic_dense." + std::to_string(i) + ".w2.weight", {int64_t(c.streams(i)) * c.sources(i), c.da_hidden(i)});
  }
  return layout.slots;
}

template <typename T>
MuddModel<T>::MuddModel(const MuddConfig& config) : MuddModel(config, ParameterBuffer<T>(mudd_tensor_layout(config))) {}

template <typename T>
MuddModel<T>::MuddModel(const MuddConfig& config, ParameterBuffer<T> params) : config_(config), params_(std::move(params)) {
  bind();
}

template <typename T>
template <typename U>
MuddModel<T> MuddModel<T>::converted_from(const MuddModel<U>& other) {
  MuddModel<T> m(other.config());
  for (size_t i = 0; i < m.layout().size(); ++i) {
    const U* from = other.params_.slot(i);
    std::transform(from, from + m.layout()[i].numel, m.params_.slot(i), [](U v) { return static_cast<T>(v); });
  }
  m.hash_ = other.content_hash();
  return m;
}

template <typename T>
void MuddModel<T>::bind() {
  auto at = [&](const std::string& name) -> T* { return params_.find(name); };  // null for a name this configuration does not have
  MuddWeights<T>& w = weights_;
  w.embedding = at("tok_embeddings.weight");
  w.output = at("output.weight");
  w.norm_weight = at("norm.weight");
  w.norm_bias = at("norm.bias");
  w.blocks.assign(size_t(config_.n_layer), {});
  w.da.assign(size_t(config_.n_layer), {});
  for (int i = 0; i < config_.n_layer; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    MuddBlockWeights<T>& b = w.blocks[size_t(i)];
    for (int s = 0; s < 3; ++s) {
      const std::string norm = i == 0 ? p + "attention_norm." : p + "attention_norms." + std::to_string(s) + ".";
      b.attention_norm_weight[s] = at(norm + "weight");
      b.attention_norm_bias[s] = at(norm + "bias");
    }
    b.wq = at(p + "attention.wq.weight");
    b.bq = at(p + "attention.wq.bias");
    b.wk = at(p + "attention.wk.weight");
    b.bk = at(p + "attention.wk.bias");
    b.wv = at(p + "attention.wv.weight");
    b.bv = at(p + "attention.wv.bias");
    b.wo = at(p + "attention.wo.weight");
    b.bo = at(p + "attention.wo.bias");
    b.q_norm = at(p + "attention.q_norm.weight");
    b.k_norm = at(p + "attention.k_norm.weight");
    b.ffn_norm_weight = at(p + "ffn_norm.weight");
    b.ffn_norm_bias = at(p + "ffn_norm.bias");
    b.w1 = at(p + "feed_forward.w1.weight");
    b.b1 = at(p + "feed_forward.w1.bias");
    b.w2 = at(p + "feed_forward.w2.weight");
    b.b2 = at(p + "feed_forward.w2.bias");
    b.ffn_width = config_.ffn_width(i);
    MuddDaWeights<T>& d = w.da[size_t(i)];
    d.w1 = at("dynamic_dense." + std::to_string(i) + ".w1.weight");
    d.w2 = at("dynamic_dense." + std::to_string(i) + ".w2.weight");
    d.beta = at("dense_bs." + std::to_string(i));
    d.hidden = config_.da_hidden(i);
    d.streams = config_.streams(i);
    d.sources = config_.sources(i);
  }
}

namespace {
// Tensors a checkpoint may hold beyond the architecture, which the loader ignores (docs/mudd.md).
bool ignorable(const std::string& name) {
  if (name.rfind("layers.", 0) == 0 && name.find(".attention_norm.") != std::string::npos &&
      name.rfind("layers.0.", 0) != 0)
    return true;
  return name.find("cache") != std::string::npos;
}
}  // namespace

MuddWeightFiles mudd_weight_files(const std::string& dir) {
  MuddWeightFiles w;
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (!file_exists(index_path)) {
    const std::string single = dir + "/model.safetensors";
    if (!file_exists(single)) throw Error(dir + ": no model.safetensors and no model.safetensors.index.json");
    w.files.push_back(single);
    return w;
  }
  w.index_path = index_path;
  std::ifstream in(index_path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(index_path + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object() || j["weight_map"].empty())
    throw Error(index_path + ": no 'weight_map' object naming the shard of each tensor");
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    // A shard is a file of this folder: a plain name, never a path that leaves it.
    if (!it.value().is_string())
      throw Error(index_path + ": weight_map entry '" + it.key() + "' is " + it.value().dump() + ", expected a file name");
    const std::string name = it.value().get<std::string>();
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || name.find('\\') != std::string::npos)
      throw Error(index_path + ": weight_map entry '" + it.key() + "' names \"" + name +
                  "\", expected a file name inside the folder (no '/', not '.' or '..')");
    const std::string file = dir + "/" + name;
    if (!file_exists(file))
      throw Error(index_path + ": tensor '" + it.key() + "' is mapped to " + name + ", which does not exist");
    w.file_of[it.key()] = file;
    if (std::find(w.files.begin(), w.files.end(), file) == w.files.end()) w.files.push_back(file);
  }
  std::sort(w.files.begin(), w.files.end());
  return w;
}

template <typename T>
MuddModel<T> MuddModel<T>::load(const std::string& dir, bool in_place) {
  if (!is_directory(dir)) throw Error(dir + ": model folder does not exist or is not a folder");
  const MuddConfig config = MuddConfig::load(dir);
  const MuddWeightFiles weight_files = mudd_weight_files(dir);
  const std::map<std::string, std::string>& file_of = weight_files.file_of;
  const std::string& index_path = weight_files.index_path;
  const std::vector<std::string>& files = weight_files.files;
  // Every shard's header is checked against its file, and every tensor of the layout is found with
  // its shape, before the buffer the config describes is allocated: a config cannot make fca
  // allocate more than the files' tensors fill.
  std::vector<std::unique_ptr<SafetensorsReader>> readers;  // readers[k] reads files[k]
  for (const auto& f : files) readers.push_back(std::make_unique<SafetensorsReader>(f));
  const std::vector<TensorSlot> layout = mudd_tensor_layout(config);
  std::vector<size_t> reader_of;
  for (const auto& s : layout) {
    size_t k = 0;
    if (!file_of.empty()) {
      auto it = file_of.find(s.name);
      if (it == file_of.end())
        throw Error(index_path + ": tensor '" + s.name + "' (shape " + shape_string(s.shape) + ") is not in the weight_map");
      k = size_t(std::find(files.begin(), files.end(), it->second) - files.begin());
    }
    const SafetensorsReader& reader = *readers[k];
    if (!reader.has(s.name))
      throw Error(reader.path() + ": tensor '" + s.name + "' is missing (expected shape " + shape_string(s.shape) + ")");
    const auto& found = reader.tensors().at(s.name).shape;
    if (found != s.shape)
      throw Error(reader.path() + ": tensor '" + s.name + "' has shape " + shape_string(found) + ", expected " +
                  shape_string(s.shape));
    reader_of.push_back(k);
  }
  std::map<std::string, bool> known;
  for (const auto& s : layout) known[s.name] = true;
  for (const auto& reader : readers)
    for (const auto& [name, info] : reader->tensors())
      if (!known.count(name) && !ignorable(name))
        throw Error(reader->path() + ": unexpected tensor '" + name + "' for a MUDD model with " +
                    std::to_string(config.n_layer) + " layers");
  Sha256 hash;
  for (const auto& f : files) {
    const MappedFile mapped(f);
    hash.update(mapped.data(), mapped.size());
  }
  MuddModel<T> m(config, ParameterBuffer<T>::from_files(layout, std::move(readers), reader_of, in_place));
  m.hash_ = hash.hex_digest();
  return m;
}

template <typename T>
MuddModel<T> MuddModel<T>::initialized(const MuddConfig& config, uint64_t seed) {
  MuddModel<T> m(config);
  Rng rng(seed);
  const double residual_std = 0.02 / std::sqrt(2.0 * config.n_layer);
  for (size_t slot = 0; slot < m.layout().size(); ++slot) {
    const TensorSlot& s = m.layout()[slot];
    T* p = m.params_.slot(slot);
    const std::string& n = s.name;
    if (n.rfind("dense_bs.", 0) == 0) {  // one-hot on the newest source j = i + 1
      const int64_t streams = s.shape[0], sources = s.shape[1];
      for (int64_t c = 0; c < streams; ++c) p[c * sources + sources - 1] = T(1);
      continue;
    }
    const bool is_norm_scale = n.ends_with("norm.weight") || n.find("attention_norm") != std::string::npos ||
                               n.find("attention_norms") != std::string::npos || n.find("ffn_norm") != std::string::npos;
    if (n.ends_with(".bias") || (n.ends_with("w2.weight") && n.rfind("dynamic_dense.", 0) == 0)) continue;  // zeros
    if (is_norm_scale && n.ends_with("weight")) {
      for (size_t i = 0; i < s.numel; ++i) p[i] = T(1);
      continue;
    }
    if (is_norm_scale) continue;
    const bool residual = n.ends_with("attention.wo.weight") || n.ends_with("feed_forward.w2.weight");
    for (size_t i = 0; i < s.numel; ++i) p[i] = T(rng.normal() * (residual ? residual_std : 0.02));
  }
  return m;
}

template <typename T>
void MuddModel<T>::save(const std::string& dir, const std::map<std::string, std::string>& extra) const {
  if (mapped()) throw Error(dir + ": cannot save a model loaded in place (read-only pages of its files); load it with copies");
  ensure_folder(dir, "");
  std::map<std::string, std::string> metadata = extra;
  metadata["format"] = "pt";
  params_.save(dir + "/model.safetensors", metadata);
  const std::string text = config_.to_json();
  write_file_atomically(dir + "/config.json", [&](std::ostream& out) { out << text << "\n"; });
}

template class MuddModel<float>;
template class MuddModel<double>;
template MuddModel<double> MuddModel<double>::converted_from<float>(const MuddModel<float>&);

}  // namespace fca
