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
  std::vector<TensorSlot> slots;
  size_t offset = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    slots.push_back({std::move(name), std::move(shape), offset, n, shape.size() == 2});
    offset += (n + 15) / 16 * 16;
  };
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
  return slots;
}

template <typename T>
MuddModel<T>::MuddModel(const MuddConfig& config) : MuddModel(config, true) {}

template <typename T>
MuddModel<T>::MuddModel(const MuddConfig& config, bool allocate) : config_(config), layout_(mudd_tensor_layout(config)) {
  if (!allocate) return;  // load() in place binds the weights itself
  const auto& last = layout_.back();
  storage_.assign(last.offset + (last.numel + 15) / 16 * 16, T(0));
  bind(storage_pointers());
}

template <typename T>
MuddModel<T>::MuddModel(MuddModel&& other) noexcept
    : config_(std::move(other.config_)), layout_(std::move(other.layout_)), storage_(std::move(other.storage_)),
      mappings_(std::move(other.mappings_)), weights_(std::move(other.weights_)), hash_(std::move(other.hash_)) {
  // A moved std::vector hands over its buffer, so the bound pointers stay valid; rebinding here
  // would allocate (bind() builds a name map) in a noexcept constructor.
}

template <typename T>
template <typename U>
MuddModel<T> MuddModel<T>::converted_from(const MuddModel<U>& other) {
  MuddModel<T> m(other.config());
  for (size_t i = 0; i < m.storage_.size(); ++i) m.storage_[i] = static_cast<T>(other.data()[i]);
  m.hash_ = other.content_hash();
  return m;
}

template <typename T>
size_t MuddModel<T>::parameter_count() const {
  size_t n = 0;
  for (const auto& s : layout_) n += s.numel;
  return n;
}

template <typename T>
std::map<std::string, T*> MuddModel<T>::storage_pointers() {
  std::map<std::string, T*> at;
  for (const auto& s : layout_) at[s.name] = storage_.data() + s.offset;
  return at;
}

template <typename T>
void MuddModel<T>::bind(const std::map<std::string, T*>& by_name) {
  auto at = [&](const std::string& name) -> T* {  // null for a name this configuration does not have
    const auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : it->second;
  };
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
// Tensors a checkpoint may hold beyond the architecture, which the spec says to ignore.
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
  std::map<std::string, std::unique_ptr<SafetensorsReader>> readers;
  for (const auto& f : files) readers[f] = std::make_unique<SafetensorsReader>(f);
  const std::vector<TensorSlot> layout = mudd_tensor_layout(config);
  std::vector<const SafetensorsReader*> reader_of;
  for (const auto& s : layout) {
    const SafetensorsReader* reader = readers.begin()->second.get();
    if (!file_of.empty()) {
      auto it = file_of.find(s.name);
      if (it == file_of.end())
        throw Error(index_path + ": tensor '" + s.name + "' (shape " + shape_string(s.shape) + ") is not in the weight_map");
      reader = readers[it->second].get();
    }
    if (!reader->has(s.name))
      throw Error(reader->path() + ": tensor '" + s.name + "' is missing (expected shape " + shape_string(s.shape) + ")");
    const auto& found = reader->tensors().at(s.name).shape;
    if (found != s.shape)
      throw Error(reader->path() + ": tensor '" + s.name + "' has shape " + shape_string(found) + ", expected " +
                  shape_string(s.shape));
    reader_of.push_back(reader);
  }
  // In place: an F32 tensor whose bytes lie 4-byte aligned in its mapped file is used there.
  std::map<std::string, T*> in_file;
  if constexpr (std::is_same_v<T, float>) {
    if (in_place)
      for (size_t i = 0; i < layout.size(); ++i) {
        const TensorInfo& t = reader_of[i]->tensors().at(layout[i].name);
        if (t.dtype == DType::F32 && reinterpret_cast<uintptr_t>(t.data) % alignof(float) == 0)
          in_file[layout[i].name] = const_cast<float*>(reinterpret_cast<const float*>(t.data));  // never written
      }
  }
  MuddModel<T> m(config, in_file.empty());
  Sha256 hash;
  for (const auto& f : files) {
    const MappedFile mapped(f);
    hash.update(mapped.data(), mapped.size());
  }
  m.hash_ = hash.hex_digest();
  if (in_file.empty()) {
    for (size_t i = 0; i < m.layout_.size(); ++i) {
      const TensorSlot& s = m.layout_[i];
      reader_of[i]->template read_into<T>(s.name, s.shape, m.storage_.data() + s.offset);
    }
  } else {
    // The model's own buffer holds only the tensors that are not in place (other dtypes).
    std::map<std::string, T*> at = in_file;
    std::vector<size_t> offsets(m.layout_.size());
    size_t size = 0;
    for (size_t i = 0; i < m.layout_.size(); ++i)
      if (!in_file.count(m.layout_[i].name)) offsets[i] = size, size += (m.layout_[i].numel + 15) / 16 * 16;
    m.storage_.assign(size, T(0));
    for (size_t i = 0; i < m.layout_.size(); ++i) {
      const TensorSlot& s = m.layout_[i];
      if (in_file.count(s.name)) continue;
      at[s.name] = m.storage_.data() + offsets[i];
      reader_of[i]->template read_into<T>(s.name, s.shape, at[s.name]);
    }
    m.bind(at);
  }
  std::map<std::string, bool> known;
  for (const auto& s : m.layout_) known[s.name] = true;
  for (const auto& [path, reader] : readers)
    for (const auto& [name, info] : reader->tensors())
      if (!known.count(name) && !ignorable(name))
        throw Error(path + ": unexpected tensor '" + name + "' for a MUDD model with " +
                    std::to_string(m.config_.n_layer) + " layers");
  if (!in_file.empty())  // the mapped files stay open as long as the model uses their pages
    for (auto& [path, reader] : readers) m.mappings_.push_back(std::move(reader));
  return m;
}

template <typename T>
MuddModel<T> MuddModel<T>::initialized(const MuddConfig& config, uint64_t seed) {
  MuddModel<T> m(config);
  Rng rng(seed);
  const double residual_std = 0.02 / std::sqrt(2.0 * config.n_layer);
  for (const auto& s : m.layout_) {
    T* p = m.storage_.data() + s.offset;
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
  // Float weights are written from the buffer itself (no copy: a 1.4B model is 5.7 GB).
  std::vector<float> converted;
  const float* base = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    base = storage_.data();
  } else {
    converted.assign(storage_.begin(), storage_.end());
    base = converted.data();
  }
  std::vector<TensorToWrite> tensors;
  for (const auto& s : layout_) tensors.push_back({s.name, s.shape, base + s.offset});
  std::map<std::string, std::string> metadata = extra;
  metadata["format"] = "pt";
  write_safetensors(dir + "/model.safetensors", tensors, metadata);
  const std::string text = config_.to_json();
  write_file_atomically(dir + "/config.json", [&](std::ostream& out) { out << text << "\n"; });
}

template class MuddModel<float>;
template class MuddModel<double>;
template MuddModel<double> MuddModel<double>::converted_from<float>(const MuddModel<float>&);

}  // namespace fca
