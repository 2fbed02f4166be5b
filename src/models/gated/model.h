// The gated model's parameters: one flat buffer laid out by gated_tensor_layout() in the parameter
// store of every single-file family (FlatModel), with a view of named pointers for the kernels.
// Read-only during inference; one model serves many run states.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/base/block.h"
#include "models/flat_model.h"
#include "models/gated/config.h"
#include "models/parameters.h"

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

// The family's Spec for FlatModel (models/flat_model.h).
struct GatedSpec {
  using Config = GatedConfig;
  template <typename T>
  using Weights = GatedWeights<T>;
  static constexpr const char* kFormat = kGatedFormat;
  static std::vector<TensorSlot> layout(const GatedConfig& c) { return gated_tensor_layout(c); }
  template <typename T>
  static GatedWeights<T> bind(ParameterBuffer<T>& params, const GatedConfig& c) {
    return bind_gated_weights(c, params.layout(), params.data());
  }
  // "featuregate model with 6 layers": how load errors name a model.
  static std::string describe(const GatedConfig& c);
};

// The gated model: initialised (docs/model.md's initialisation from one seed: normal(0, 0.02),
// residual projections scaled by 1/sqrt(2L), zero biases, LayerNorm weights 1, gate parameters 0),
// loaded from an fca-gated-v1 file (format, config and every tensor's name, shape and dtype
// checked; extra tensors are an error) and saved (F32, atomically) by FlatModel.
template <typename T>
using GatedModel = FlatModel<T, GatedSpec>;

// Reads just the config of a checkpoint (for `fca info` and dispatch).
GatedConfig read_gated_config(const std::string& path);

}  // namespace fca
