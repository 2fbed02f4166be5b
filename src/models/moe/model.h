// The `moe` family (spec: shared/spec/conditional-computation.md, format fca-moe-v1): the gated
// family's transformer with every block's MLP replaced by E experts of width F, of which each token
// runs its top k. Config, parameter layout and the read-only weights.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/parameters.h"

namespace fca {

inline constexpr const char* kMoeFormat = "fca-moe-v1";

struct MoeConfig {
  int n_layer = 4;    // L
  int d_model = 128;  // D
  int n_head = 4;     // H
  int seq_len = 128;  // T
  int n_expert = 8;   // E
  int top_k = 2;      // k, 1 <= k <= E
  int expert_hidden = 0;  // F; 0 means the default 4D/k (one token's active MLP compute equals Dense's)
  double aux_loss = 0.01;  // alpha of the Switch load-balancing term

  int hidden() const { return expert_hidden > 0 ? expert_hidden : 4 * d_model / top_k; }
  int head_dim() const { return d_model / n_head; }
  // Throws Error naming the field (k > E, non-positive sizes, D % H, negative alpha).
  void validate(const std::string& where) const;
  std::string to_json() const;  // expert_hidden written resolved
  // Unknown keys and malformed numbers are errors.
  static MoeConfig from_json(const std::string& text, const std::string& where);
  bool operator==(const MoeConfig&) const = default;
};

std::vector<TensorSlot> moe_tensor_layout(const MoeConfig& config);

template <typename T>
struct MoeBlockWeights {
  GatedBlockWeights<T> attn;  // ln1, attn.qkv, attn.proj, ln2 (the mlp fields are null)
  T* router;                  // [E, D]
  T *fc_weight, *fc_bias;     // [E, F, D], [E, F]
  T *proj_weight, *proj_bias; // [E, D, F], [E, D]
};

template <typename T>
struct MoeWeights {
  T *wte, *wpe;  // [256, D] (tied head), [T, D]
  std::vector<MoeBlockWeights<T>> blocks;
  T *ln_f_weight, *ln_f_bias;
};

template <typename T>
class MoeModel {
 public:
  MoeModel() = default;
  explicit MoeModel(const MoeConfig& config);  // all parameters zero
  MoeModel(const MoeModel& other) : config_(other.config_), params_(other.params_) { bind(); }
  MoeModel& operator=(const MoeModel& other);
  template <typename U>
  static MoeModel converted_from(const MoeModel<U>& other);

  static MoeModel initialized(const MoeConfig& config, uint64_t seed);
  // Loads an fca-moe-v1 file: format, config and every tensor checked; extra tensors are errors.
  static MoeModel load(const std::string& path);
  void save(const std::string& path, const std::map<std::string, std::string>& extra = {}) const;

  const MoeConfig& config() const { return config_; }
  const std::vector<TensorSlot>& layout() const { return params_.layout(); }
  T* data() { return params_.data(); }
  const T* data() const { return params_.data(); }
  size_t buffer_size() const { return params_.size(); }
  const MoeWeights<T>& weights() const { return weights_; }
  MoeWeights<T>& weights() { return weights_; }
  const ParameterBuffer<T>& parameters() const { return params_; }

 private:
  void bind();
  MoeConfig config_;
  ParameterBuffer<T> params_;
  MoeWeights<T> weights_{};
};

}  // namespace fca
