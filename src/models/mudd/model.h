// MUDD model weights: the parameter store of every family (models/parameters.h ParameterBuffer) laid
// out by mudd_tensor_layout() (the public checkpoint's state_dict names and shapes), with named views
// per block and DA module. Loaded from a Hugging Face folder: model.safetensors, or shards named by
// model.safetensors.index.json; BF16/F16 upcast once, F32 optionally used in place.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "models/base/tensor_slot.h"
#include "models/parameters.h"
#include "models/mudd/config.h"

namespace fca {

template <typename T>
struct MuddBlockWeights {
  // Block 0 has one input LayerNorm (attention_norm); blocks >= 1 have one per Q/K/V stream.
  T* attention_norm_weight[3];  // [D] (block 0: all three alias attention_norm)
  T* attention_norm_bias[3];
  T *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo;  // [D, D], [D]
  T *q_norm, *k_norm;                          // [dh]
  T *ffn_norm_weight, *ffn_norm_bias;          // [D]
  T *w1, *b1;                                  // [F_i, D], [F_i]
  T *w2, *b2;                                  // [D, F_i], [D]
  int ffn_width;
};

template <typename T>
struct MuddDaWeights {
  T* w1;     // [H_i, D], no bias
  T* w2;     // [C_i * S_i, H_i], no bias
  T* beta;   // dense_bs.i [C_i, S_i]
  int hidden, streams, sources;
};

template <typename T>
struct MuddWeights {
  T* embedding;  // tok_embeddings.weight [V, D]
  T* output;     // output.weight [V, D], untied
  T *norm_weight, *norm_bias;  // final LayerNorm [D]
  std::vector<MuddBlockWeights<T>> blocks;
  std::vector<MuddDaWeights<T>> da;
};

std::vector<TensorSlot> mudd_tensor_layout(const MuddConfig& config);

// The weight files of a MUDD folder: the shards named by model.safetensors.index.json (each a plain
// file name inside the folder, checked to exist) with the file of every tensor, or model.safetensors
// alone (then `file_of` is empty). `files` is sorted: the order the content hash reads them in.
struct MuddWeightFiles {
  std::string index_path;                      // empty without an index
  std::map<std::string, std::string> file_of;  // tensor name -> file path
  std::vector<std::string> files;
};
MuddWeightFiles mudd_weight_files(const std::string& dir);

// T = float for inference and training; double for the finite-difference gradient checks.
template <typename T>
class MuddModel {
 public:
  explicit MuddModel(const MuddConfig& config);  // zero weights
  MuddModel(const MuddModel&) = delete;
  MuddModel& operator=(const MuddModel&) = delete;
  // Moves hand over the parameter store (its slot pointers stay valid), so the views stay bound.
  MuddModel(MuddModel&& other) noexcept = default;

  // Loads a folder; checks every name and shape (errors name the file and tensor). Ignores the
  // tensors a checkpoint may carry beyond the architecture (attention_norm of blocks >= 1, caches).
  // With in_place (float only), F32 tensors are used where they lie in the memory-mapped files, no
  // copy (the model is then read-only: for inference; ranks and processes on one node share the
  // pages); other dtypes are still upcast into the model's own buffer.
  static MuddModel load(const std::string& dir, bool in_place = false);
  // True when the weights are (partly) the mapped files' pages: data() and buffer_size() then cover
  // only the copied tensors, and save() refuses.
  bool mapped() const { return params_.mapped(); }
  // Writes config.json and model.safetensors (F32, metadata "format": "pt" plus `extra`) into `dir`
  // (created if missing), each atomically.
  void save(const std::string& dir, const std::map<std::string, std::string>& extra = {}) const;
  // Training initialisation (docs/mudd.md, "Training"): every DA's W2 zero and dense_bs one-hot on the
  // newest source, so training starts as a plain transformer; other weights as the gated family's
  // (normal(0, 0.02), residual projections wo and FFN w2 normal(0, 0.02/sqrt(2L)), zero biases,
  // LayerNorm and QK-norm scales 1).
  static MuddModel initialized(const MuddConfig& config, uint64_t seed);

  const MuddConfig& config() const { return config_; }
  const MuddWeights<T>& weights() const { return weights_; }
  MuddWeights<T>& weights() { return weights_; }
  const std::vector<TensorSlot>& layout() const { return params_.layout(); }
  const T* slot(size_t i) const { return params_.slot(i); }  // layout()[i]'s values, wherever they lie
  T* data() { return params_.data(); }
  const T* data() const { return params_.data(); }
  size_t buffer_size() const { return params_.size(); }
  template <typename U>
  static MuddModel converted_from(const MuddModel<U>& other);
  size_t parameter_count() const { return layout_parameter_count(params_.layout()); }
  std::string content_hash() const { return hash_; }

 private:
  template <typename U>
  friend class MuddModel;  // converted_from reads the other precision's slots
  MuddModel(const MuddConfig& config, ParameterBuffer<T> params);
  void bind();
  MuddConfig config_;
  ParameterBuffer<T> params_;
  MuddWeights<T> weights_;
  std::string hash_;  // SHA-256 over the weight files' bytes, in load order
};

}  // namespace fca
