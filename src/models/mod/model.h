// The `mod` family, Mixture-of-Depths (spec: shared/spec/conditional-computation.md, format
// fca-mod-v1): the gated family's Dense transformer in which every routed_every-th block (blocks
// routed_every-1, 2*routed_every-1, ...) runs only on the K = max(1, floor(c T')) tokens of each
// window that its router scores highest. Config, parameter layout, read-only weights.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

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
  std::vector<GatedBlockWeights<T>> blocks;
  std::vector<T*> router_weight;  // [D] per block (null where not routed)
  std::vector<T*> router_bias;    // [1]
  T *ln_f_weight, *ln_f_bias;
};

template <typename T>
class ModModel {
 public:
  ModModel() = default;
  explicit ModModel(const ModConfig& config);
  ModModel(const ModModel& other) : config_(other.config_), params_(other.params_) { bind(); }
  ModModel& operator=(const ModModel& other);
  template <typename U>
  static ModModel converted_from(const ModModel<U>& other);

  static ModModel initialized(const ModConfig& config, uint64_t seed);
  static ModModel load(const std::string& path);
  void save(const std::string& path, const std::map<std::string, std::string>& extra = {}) const;

  const ModConfig& config() const { return config_; }
  const std::vector<TensorSlot>& layout() const { return params_.layout(); }
  T* data() { return params_.data(); }
  const T* data() const { return params_.data(); }
  size_t buffer_size() const { return params_.size(); }
  const ModWeights<T>& weights() const { return weights_; }
  ModWeights<T>& weights() { return weights_; }
  const ParameterBuffer<T>& parameters() const { return params_; }

 private:
  void bind();
  ModConfig config_;
  ParameterBuffer<T> params_;
  ModWeights<T> weights_{};
};

}  // namespace fca
