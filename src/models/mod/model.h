// The `mod` family, Mixture-of-Depths (docs/routed.md, format
// fca-mod-v1): the gated family's Dense transformer in which every routed_every-th block (blocks
// routed_every-1, 2*routed_every-1, ...) runs only on the K = max(1, floor(c T')) tokens of each
// window that its router scores highest. Config, parameter layout, read-only weights.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/flat_model.h"
#include "models/parameters.h"

namespace fca {

inline constexpr const char* kModFormat = "fca-mod-v1";

struct ModConfig {
  int n_layer = 4;
  int d_model = 128;
  int n_head = 4;
  int seq_len = 128;
  double capacity = 0.125;  // c in (0, 1]
  int routed_every = 2;     // blocks l with l % routed_every == routed_every - 1 are routed

  bool routed(int layer) const { return layer % routed_every == routed_every - 1; }
  int routed_layers() const { return n_layer / routed_every; }
  // Index of a routed block among the routed blocks (its row in the routing record).
  int routed_index(int layer) const { return layer / routed_every; }
  // K = max(1, floor(c T')) for windows of `tokens` tokens.
  int selected_tokens(int tokens) const;
  int head_dim() const { return d_model / n_head; }
  void validate(const std::string& where) const;  // capacity outside (0, 1] is an error
  std::string to_json() const;
  static ModConfig from_json(const std::string& text, const std::string& where);
  bool operator==(const ModConfig&) const = default;
};

std::vector<TensorSlot> mod_tensor_layout(const ModConfig& config);

template <typename T>
struct ModWeights {
  T *wte, *wpe;
  std::vector<BlockWeights<T>> blocks;
  std::vector<T*> router_weight;  // [D] per block (null where not routed)
  std::vector<T*> router_bias;    // [1]
  T *ln_f_weight, *ln_f_bias;
};

// The family's part of FlatModel (models/flat_model.h).
struct ModSpec {
  using Config = ModConfig;
  template <typename T>
  using Weights = ModWeights<T>;
  static constexpr const char* kFormat = kModFormat;
  static std::vector<TensorSlot> layout(const ModConfig& c) { return mod_tensor_layout(c); }
  template <typename T>
  static ModWeights<T> bind(ParameterBuffer<T>& params, const ModConfig& c);
  static std::string describe(const ModConfig& c);
};

template <typename T>
using ModModel = FlatModel<T, ModSpec>;

}  // namespace fca
