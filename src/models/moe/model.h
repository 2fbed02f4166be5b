// The `moe` family (docs/routed.md, format fca-moe-v1): the gated
// family's transformer with every block's MLP replaced by E experts of width F, of which each token
// runs its top k. Config, parameter layout and the read-only weights.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/flat_model.h"
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
  // The same model: expert_hidden compared resolved (0 and 4D/k are one width), as to_json writes
  // it, so that a fresh config equals the config read back from its checkpoint.
  bool operator==(const MoeConfig& o) const {
    return n_layer == o.n_layer && d_model == o.d_model && n_head == o.n_head && seq_len == o.seq_len && n_expert == o.n_expert &&
           top_k == o.top_k && hidden() == o.hidden() && aux_loss == o.aux_loss;
  }
};

std::vector<TensorSlot> moe_tensor_layout(const MoeConfig& config);

template <typename T>
struct MoeBlockWeights {
  BlockWeights<T> attn;  // ln1, attn.qkv, attn.proj, ln2 (the mlp fields are null)
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

// The family's part of FlatModel (models/flat_model.h).
struct MoeSpec {
  using Config = MoeConfig;
  template <typename T>
  using Weights = MoeWeights<T>;
  static constexpr const char* kFormat = kMoeFormat;
  static std::vector<TensorSlot> layout(const MoeConfig& c) { return moe_tensor_layout(c); }
  template <typename T>
  static MoeWeights<T> bind(ParameterBuffer<T>& params, const MoeConfig& c);
  static std::string describe(const MoeConfig& c);
};

template <typename T>
using MoeModel = FlatModel<T, MoeSpec>;

}  // namespace fca
