// MUDD model weights: one flat F32 buffer laid out by mudd_tensor_layout() (the public checkpoint's
// state_dict names and shapes), with named views per block and DA module. Loaded from a Hugging Face
// folder: model.safetensors, or shards named by model.safetensors.index.json; BF16/F16 upcast once.
#pragma once
#include <string>
#include <vector>

#include "models/gated/config.h"  // TensorSlot
#include "models/mudd/config.h"

namespace fca {

struct MuddBlockWeights {
  // Block 0 has one input LayerNorm (attention_norm); blocks >= 1 have one per Q/K/V stream.
  const float* attention_norm_weight[3];  // [D] (block 0: all three alias attention_norm)
  const float* attention_norm_bias[3];
  const float *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo;  // [D, D], [D]
  const float *q_norm, *k_norm;                          // [dh]
  const float *ffn_norm_weight, *ffn_norm_bias;          // [D]
  const float *w1, *b1;                                  // [F_i, D], [F_i]
  const float *w2, *b2;                                  // [D, F_i], [D]
  int ffn_width;
};

struct MuddDaWeights {
  const float* w1;     // [H_i, D], no bias
  const float* w2;     // [C_i * S_i, H_i], no bias
  const float* beta;   // dense_bs.i [C_i, S_i]
  int hidden, streams, sources;
};

struct MuddWeights {
  const float* embedding;  // tok_embeddings.weight [V, D]
  const float* output;     // output.weight [V, D], untied
  const float *norm_weight, *norm_bias;  // final LayerNorm [D]
  std::vector<MuddBlockWeights> blocks;
  std::vector<MuddDaWeights> da;
};

std::vector<TensorSlot> mudd_tensor_layout(const MuddConfig& config);

class MuddModel {
 public:
  MuddModel(const MuddConfig& config);  // zero weights
  MuddModel(const MuddModel&) = delete;
  MuddModel& operator=(const MuddModel&) = delete;
  MuddModel(MuddModel&&) = default;

  // Loads a folder; checks every name and shape (errors name the file and tensor). Ignores the
  // tensors a checkpoint may carry beyond the architecture (attention_norm of blocks >= 1, caches).
  static MuddModel load(const std::string& dir);
  // Writes config.json and model.safetensors (F32) into `dir`, each atomically.
  void save(const std::string& dir) const;

  const MuddConfig& config() const { return config_; }
  const MuddWeights& weights() const { return weights_; }
  const std::vector<TensorSlot>& layout() const { return layout_; }
  float* data() { return storage_.data(); }
  const float* data() const { return storage_.data(); }
  size_t parameter_count() const;
  std::string content_hash() const { return hash_; }

 private:
  void bind();
  MuddConfig config_;
  std::vector<TensorSlot> layout_;
  std::vector<float> storage_;
  MuddWeights weights_;
  std::string hash_;  // SHA-256 over the weight files' bytes, in load order
};

}  // namespace fca
