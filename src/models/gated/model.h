// The gated model's parameters: one flat buffer laid out by gated_tensor_layout(), with a view of
// named pointers for the kernels. Read-only during inference; one model serves many run states.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/base/block.h"
#include "models/gated/config.h"

namespace fca {

template <typename T>
struct GatedWeights {
  T* wte;  // [256, D], also the tied output head
  T* wpe;  // [T, D]
  std::vector<BlockWeights<T>> blocks;
  T *ln_f_weight, *ln_f_bias;  // [D]
  T* gate_logit = nullptr;     // [1] uniform, [L] layerstatic
  T* gate_weight = nullptr;    // [L, 4] featuregate
  T* gate_bias = nullptr;      // [L] featuregate
};

// Binds the named pointers of `layout` to a flat buffer.
template <typename T>
GatedWeights<T> bind_gated_weights(const GatedConfig& config, const std::vector<TensorSlot>& layout, T* base);

template <typename T>
class GatedModel {
 public:
  GatedModel() = default;
  explicit GatedModel(const GatedConfig& config);  // all parameters zero
  GatedModel(const GatedModel& other);
  GatedModel& operator=(const GatedModel& other);
  // Moves hand over the buffer (a moved std::vector keeps its address), so the views stay bound.
  GatedModel(GatedModel&&) noexcept = default;
  GatedModel& operator=(GatedModel&&) noexcept = default;
  template <typename U>
  GatedModel<T> static converted_from(const GatedModel<U>& other);

  // The spec's initialisation from one seed (normal(0, 0.02), residual projections scaled by
  // 1/sqrt(2L), zero biases, LayerNorm weights 1, gate parameters 0).
  static GatedModel initialized(const GatedConfig& config, uint64_t seed);
  // Loads an fca-gated-v1 safetensors file; checks format, config and every tensor's name, shape and
  // dtype (errors name the file and tensor, expected and found). Extra tensors are an error too.
  static GatedModel load(const std::string& path);
  // Writes F32 parameters and metadata (format, config, plus `extra` entries) atomically.
  void save(const std::string& path, const std::map<std::string, std::string>& extra = {}) const;

  const GatedConfig& config() const { return config_; }
  const std::vector<TensorSlot>& layout() const { return layout_; }
  T* data() { return storage_.data(); }
  const T* data() const { return storage_.data(); }
  size_t buffer_size() const { return storage_.size(); }
  const GatedWeights<T>& weights() const { return weights_; }
  GatedWeights<T>& weights() { return weights_; }
  // Pointer to the tensor named `name`; throws Error when the model has no such tensor.
  T* tensor(const std::string& name);
  const T* tensor(const std::string& name) const;

 private:
  GatedConfig config_;
  std::vector<TensorSlot> layout_;
  std::vector<T> storage_;
  GatedWeights<T> weights_{};
};

// Reads just the config of a checkpoint (for `fca info` and dispatch).
GatedConfig read_gated_config(const std::string& path);

}  // namespace fca
