#include "models/parameters.h"

#include <filesystem>
#include <limits>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include "core/json.h"

#include "core/error.h"
#include "core/rng.h"
#include "core/safetensors.h"

namespace fca {

void LayoutBuilder::add(std::string name, std::vector<int64_t> shape, bool weight_decay) {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  slots.push_back({std::move(name), std::move(shape), offset_, n, weight_decay});
  offset_ += (n + 15) / 16 * 16;
}

std::string block_prefix(int layer) { return "blocks." + std::to_string(layer) + "."; }

void LayoutBuilder::add_attention_half(const std::string& p, int64_t D) {
  add(p + "ln1.weight", {D});
  add(p + "ln1.bias", {D});
  add(p + "attn.qkv.weight", {3 * D, D});
  add(p + "attn.qkv.bias", {3 * D});
  add(p + "attn.proj.weight", {D, D});
  add(p + "attn.proj.bias", {D});
  add(p + "ln2.weight", {D});
  add(p + "ln2.bias", {D});
}

void LayoutBuilder::add_dense_block(const std::string& p, int64_t D) {
  add_attention_half(p, D);
  add(p + "mlp.fc.weight", {4 * D, D});
  add(p + "mlp.fc.bias", {4 * D});
  add(p + "mlp.proj.weight", {D, 4 * D});
  add(p + "mlp.proj.bias", {D});
}

template <typename T>
ParameterBuffer<T>::ParameterBuffer(std::vector<TensorSlot> layout) : layout_(std::move(layout)) {
  const auto& last = layout_.back();
  storage_.assign(last.offset + (last.numel + 15) / 16 * 16, T(0));
  point_slots_at_storage();
}

template <typename T>
void ParameterBuffer<T>::point_slots_at_storage() {
  slots_.resize(layout_.size());
  for (size_t i = 0; i < layout_.size(); ++i) slots_[i] = storage_.data() + layout_[i].offset;
}

template <typename T>
ParameterBuffer<T>::ParameterBuffer(const ParameterBuffer& other) : layout_(other.layout_) {
  if (layout_.empty()) return;
  if (!other.mapped()) {
    storage_ = other.storage_;
    point_slots_at_storage();
    return;
  }
  const auto& last = layout_.back();
  storage_.assign(last.offset + (last.numel + 15) / 16 * 16, T(0));
  point_slots_at_storage();
  for (size_t i = 0; i < layout_.size(); ++i) std::copy(other.slots_[i], other.slots_[i] + layout_[i].numel, slots_[i]);
}

template <typename T>
ParameterBuffer<T>& ParameterBuffer<T>::operator=(const ParameterBuffer& other) {
  if (this != &other) *this = ParameterBuffer(other);
  return *this;
}

template <typename T>
T* ParameterBuffer<T>::find(const std::string& name) {
  for (size_t i = 0; i < layout_.size(); ++i)
    if (layout_[i].name == name) return slots_[i];
  return nullptr;
}

template <typename T>
T* ParameterBuffer<T>::at(const std::string& name) {
  T* p = find(name);
  if (p == nullptr) throw Error("model has no tensor '" + name + "'");
  return p;
}

template <typename T>
BlockWeights<T> ParameterBuffer<T>::block(const std::string& p) {
  return {find(p + "ln1.weight"),      find(p + "ln1.bias"),      find(p + "attn.qkv.weight"), find(p + "attn.qkv.bias"),
          find(p + "attn.proj.weight"), find(p + "attn.proj.bias"), find(p + "ln2.weight"),      find(p + "ln2.bias"),
          find(p + "mlp.fc.weight"),    find(p + "mlp.fc.bias"),    find(p + "mlp.proj.weight"), find(p + "mlp.proj.bias")};
}

template <typename T>
void ParameterBuffer<T>::initialize(int n_layer, uint64_t seed) {
  Rng rng(seed);
  const double residual_std = 0.02 / std::sqrt(2.0 * n_layer);
  for (size_t slot_index = 0; slot_index < layout_.size(); ++slot_index) {
    const TensorSlot& s = layout_[slot_index];
    T* p = slots_[slot_index];
    const bool is_residual_proj = s.name.ends_with("attn.proj.weight") || s.name.ends_with("mlp.proj.weight") ||
                                  s.name.ends_with("experts.proj.weight");
    const bool is_normal = s.name == "wte" || s.name == "wpe" || s.name.ends_with("qkv.weight") ||
                           s.name.ends_with("fc.weight") || s.name.ends_with("router.weight") || is_residual_proj;
    const bool is_ln_weight = s.name.ends_with("ln1.weight") || s.name.ends_with("ln2.weight") || s.name == "ln_f.weight";
    for (size_t i = 0; i < s.numel; ++i) {
      if (is_normal) p[i] = static_cast<T>(rng.normal() * (is_residual_proj ? residual_std : 0.02));
      else p[i] = is_ln_weight ? T(1) : T(0);
    }
  }
}

template <typename T>
void ParameterBuffer<T>::load(const SafetensorsReader& reader, const std::string& what) {
  for (size_t i = 0; i < layout_.size(); ++i) {
    const TensorSlot& s = layout_[i];
    if (!reader.has(s.name))
      throw Error(reader.path() + ": tensor '" + s.name + "' is missing (expected shape " + shape_string(s.shape) + " for a " +
                  what + ")");
    reader.read_into<T>(s.name, s.shape, slots_[i]);
  }
  for (const auto& [name, info] : reader.tensors()) {
    bool known = false;
    for (const auto& s : layout_) known = known || s.name == name;
    if (!known) throw Error(reader.path() + ": unexpected tensor '" + name + "' for a " + what);
  }
}

template <typename T>
ParameterBuffer<T> ParameterBuffer<T>::from_files(std::vector<TensorSlot> layout,
                                                  std::vector<std::unique_ptr<SafetensorsReader>> files,
                                                  const std::vector<size_t>& file_of, bool in_place) {
  ParameterBuffer b;
  b.layout_ = std::move(layout);
  b.slots_.resize(b.layout_.size());
  b.fill_from(std::move(files), file_of, in_place);
  return b;
}

template <typename T>
void ParameterBuffer<T>::fill_from(std::vector<std::unique_ptr<SafetensorsReader>> files,
                                   const std::vector<size_t>& file_of, bool in_place) {
  // In place: slot i at its F32 bytes in the mapped file, where they are aligned (never written).
  std::vector<T*> in_file(layout_.size(), nullptr);
  if constexpr (std::is_same_v<T, float>) {
    if (in_place)
      for (size_t i = 0; i < layout_.size(); ++i) {
        const TensorInfo& t = files[file_of[i]]->tensors().at(layout_[i].name);
        if (t.dtype == DType::F32 && reinterpret_cast<uintptr_t>(t.data) % alignof(float) == 0)
          in_file[i] = const_cast<float*>(reinterpret_cast<const float*>(t.data));
      }
  }
  // The own storage holds the slots that are not mapped, each on a 16-element boundary: all of
  // them, at their layout offsets, when none is.
  size_t size = 0;
  std::vector<size_t> offsets(layout_.size());
  for (size_t i = 0; i < layout_.size(); ++i)
    if (in_file[i] == nullptr) offsets[i] = size, size += (layout_[i].numel + 15) / 16 * 16;
  storage_.assign(size, T(0));
  bool any_mapped = false;
  for (size_t i = 0; i < layout_.size(); ++i) {
    any_mapped = any_mapped || in_file[i] != nullptr;
    slots_[i] = in_file[i] != nullptr ? in_file[i] : storage_.data() + offsets[i];
    if (in_file[i] == nullptr) files[file_of[i]]->template read_into<T>(layout_[i].name, layout_[i].shape, slots_[i]);
  }
  mappings_.clear();
  if (any_mapped) mappings_ = std::move(files);
}

template <typename T>
void ParameterBuffer<T>::save(const std::string& path, const std::map<std::string, std::string>& metadata) const {
  // Float slots are written from where they lie (a 1.4B model is 5.7 GB); double ones converted.
  std::vector<float> converted;
  if constexpr (!std::is_same_v<T, float>) {
    size_t total = 0;
    for (const auto& s : layout_) total += s.numel;
    converted.resize(total);
  }
  std::vector<TensorToWrite> tensors;
  size_t at = 0;
  for (size_t i = 0; i < layout_.size(); ++i) {
    const TensorSlot& s = layout_[i];
    if constexpr (std::is_same_v<T, float>) {
      tensors.push_back({s.name, s.shape, slots_[i]});
    } else {
      std::copy(slots_[i], slots_[i] + s.numel, converted.begin() + int64_t(at));
      tensors.push_back({s.name, s.shape, converted.data() + at});
      at += s.numel;
    }
  }
  write_safetensors(path, tensors, metadata);
}

JsonFields StrictConfig::parse(const std::string& text, const std::string& where, const std::vector<std::string>& known,
                               const std::string& format) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": config is not valid JSON (" + e.what() + ")");
  }
  return JsonFields(j, where + ": " + format + " config", known);
}

StrictConfig::StrictConfig(const std::string& text, const std::string& where, const std::vector<std::string>& known,
                           const std::string& format)
    : where_(where), fields_(parse(text, where, known, format)) {}

void StrictConfig::require(const std::string& field) const {
  if (!fields_.has(field)) throw Error(where_ + ": config field '" + field + "' is missing");
}

int StrictConfig::integer(const std::string& field) const {
  require(field);
  return int(fields_.integer(field, 0, 0, int64_t(1) << 24));  // bounded before it is narrowed
}

std::string StrictConfig::text(const std::string& field) const {
  require(field);
  return fields_.text(field, "");
}

bool StrictConfig::flag(const std::string& field) const {
  require(field);
  return fields_.flag(field, false);
}

double StrictConfig::number(const std::string& field) const {
  require(field);
  return fields_.number(field, 0, -std::numeric_limits<double>::max(), std::numeric_limits<double>::max());
}

void check_transformer_shape(int n_layer, int d_model, int n_head, int seq_len, const std::string& where) {
  auto within = [&](int v, int high, const char* field) {
    if (v < 1 || v > high)
      throw Error(where + ": " + field + " must be in 1 .. " + std::to_string(high) + ", found " + std::to_string(v));
  };
  within(n_layer, 4096, "n_layer");
  within(d_model, 65536, "d_model");
  within(n_head, d_model, "n_head");
  within(seq_len, 1 << 20, "seq_len");
}

void check_parameters_fit(size_t parameters, const std::string& file) {
  std::error_code ec;
  const uintmax_t bytes = std::filesystem::file_size(file, ec);
  if (ec) throw Error(file + ": cannot read its size (" + ec.message() + ")");
  if (parameters > bytes / 2)
    throw Error(file + ": its config describes " + std::to_string(parameters) + " parameters, but the file's " +
                std::to_string(bytes) + " bytes hold at most " + std::to_string(bytes / 2) + " (config and tensors disagree)");
}

void require_positive(int v, const char* field, const std::string& where) {
  if (v <= 0) throw Error(where + ": " + field + " must be positive, found " + std::to_string(v));
}

size_t layout_parameter_count(const std::vector<TensorSlot>& layout) {
  size_t n = 0;
  for (const auto& s : layout) n += s.numel;
  return n;
}

std::string read_checkpoint_format(const std::string& path) {
  SafetensorsReader reader(path);
  auto fmt = reader.metadata().find("format");
  return fmt == reader.metadata().end() ? std::string() : fmt->second;
}

std::string read_checkpoint_config(const std::string& path, const std::string& expected_format) {
  SafetensorsReader reader(path);
  auto fmt = reader.metadata().find("format");
  if (fmt == reader.metadata().end())
    throw Error(path + ": no 'format' in the safetensors metadata (expected \"" + expected_format + "\")");
  if (fmt->second != expected_format)
    throw Error(path + ": format is \"" + fmt->second + "\", expected \"" + expected_format + "\"");
  auto cfg = reader.metadata().find("config");
  if (cfg == reader.metadata().end()) throw Error(path + ": no 'config' in the safetensors metadata");
  return cfg->second;
}

template class ParameterBuffer<float>;
template class ParameterBuffer<double>;

}  // namespace fca
