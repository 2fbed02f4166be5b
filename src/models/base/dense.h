// The Dense transformer of the shared pre-norm block, with no controller: the baseline every
// family's execution is measured against (exec's dense_same_shape, docs/exec.md). Block l is
// h_{l+1} = h_l + F_l, F_l = u_l + MLP(LN2(h_l + u_l)) (dense_block_forward): the gated family's
// Dense variant (g = 1, docs/model.md) without the gate. It has no controller, so a pass counts no
// controller evaluation, controller FLOP or mixing FLOP; only its GEMMs (dense_forward_flops).
#pragma once
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "models/base/block.h"
#include "models/base/stream.h"
#include "models/parameters.h"

namespace fca {

struct DenseShape {
  int layers = 0, d_model = 0, n_head = 0, seq_len = 0;
};

// The weights (read-only once made): wte [256, D], wpe [seq_len, D], the blocks, ln_f; laid out and
// initialised as the gated family's Dense variant (ParameterBuffer::initialize).
class DenseModel {
 public:
  // Throws Error for a shape outside check_transformer_shape's bounds.
  DenseModel(const DenseShape& shape, uint64_t seed);
  DenseModel(const DenseModel&) = delete;
  DenseModel& operator=(const DenseModel&) = delete;
  const DenseShape& shape() const { return shape_; }
  const float* wte() const { return wte_; }
  const float* wpe() const { return wpe_; }
  const BlockWeights<float>& block(int layer) const { return blocks_[size_t(layer)]; }
  const float* ln_f_weight() const { return ln_f_weight_; }
  const float* ln_f_bias() const { return ln_f_bias_; }

 private:
  DenseShape shape_;
  ParameterBuffer<float> params_;
  float *wte_, *wpe_, *ln_f_weight_, *ln_f_bias_;
  std::vector<BlockWeights<float>> blocks_;
};

// One forward pass's buffers for up to max_batch windows of the model's seq_len tokens, from one
// arena; every block reuses one set of activations (inference only).
struct DenseRunState : StreamState<float> {
  DenseRunState(const DenseModel& model, int max_batch);  // the model's shape, checked when it was made
  int max_batch, max_tokens;
  int batch = 0, tokens = 0;  // of the last pass
  BlockActivations<float> block;

 private:
  Arena arena_;
};

// Logits of B windows of Tn tokens [B*Tn, 256] into rs.logits.
void dense_forward(const DenseModel& model, DenseRunState& rs, const int32_t* tokens, int B, int Tn);

// GEMM FLOPs of `layers` blocks and the tied head over B windows of T tokens: the four linear maps
// (12 D^2 per row), QK^T and PV over the pairs the blocked causal kernel executes, and the head
// (2 D 256 per row). What every pre-norm family's dense blocks count (the gated family's formula).
double dense_forward_flops(int d_model, int B, int T, int layers);

}  // namespace fca
