#include "models/base/dense.h"

#include "core/error.h"
#include "core/exec_counters.h"
#include "ops/attention.h"

namespace fca {
namespace {

std::vector<TensorSlot> dense_layout(const DenseShape& s) {
  LayoutBuilder b;
  b.add("wte", {kByteVocab, s.d_model});
  b.add("wpe", {s.seq_len, s.d_model});
  for (int l = 0; l < s.layers; ++l) b.add_dense_block("blocks." + std::to_string(l) + ".", s.d_model);
  b.add("ln_f.weight", {s.d_model});
  b.add("ln_f.bias", {s.d_model});
  return b.slots;
}

const DenseShape& checked(const DenseShape& s) {
  check_transformer_shape(s.layers, s.d_model, s.n_head, s.seq_len, "dense model");
  if (s.d_model % s.n_head != 0)
    throw Error("dense model: d_model " + std::to_string(s.d_model) + " is not a multiple of n_head " + std::to_string(s.n_head));
  return s;
}

}  // namespace

DenseModel::DenseModel(const DenseShape& shape, uint64_t seed) : shape_(checked(shape)), params_(dense_layout(shape)) {
  params_.initialize(shape.layers, seed);
  wte_ = params_.at("wte");
  wpe_ = params_.at("wpe");
  for (int l = 0; l < shape.layers; ++l) blocks_.push_back(params_.block("blocks." + std::to_string(l) + "."));
  ln_f_weight_ = params_.at("ln_f.weight");
  ln_f_bias_ = params_.at("ln_f.bias");
}

DenseRunState::DenseRunState(const DenseModel& model, int max_batch_) : max_batch(max_batch_), max_tokens(model.shape().seq_len) {
  const DenseShape& shape = model.shape();
  const int64_t D = shape.d_model;
  arena_ = Arena::for_windows(max_batch, [&](auto& a, int windows) {
    const int64_t N = int64_t(windows) * max_tokens;
    take_block_activations(a, block, N, 0, D, true);
    this->take_stream(a, shape.layers, N, D, int(D / shape.n_head), max_tokens, false);
  });
}

void dense_forward(const DenseModel& model, DenseRunState& rs, const int32_t* tokens, int B, int Tn) {
  const DenseShape& s = model.shape();
  begin_pass(rs, B, Tn, s.seq_len, 0);  // no controller: its position is never read
  const int D = s.d_model;
  ExecCounters* counters = exec_counters();
  stream_embed(rs, tokens, model.wte(), model.wpe(), B, Tn, D);
  for (int l = 0; l < s.layers; ++l) {
    if (counters != nullptr) counters->blocks_executed.fetch_add(1, std::memory_order_relaxed);
    dense_block_forward(rs.block, rs.attn_scratch, model.block(l), rs.hidden[size_t(l)], rs.hidden[size_t(l + 1)], B, Tn, D,
                        s.n_head);
  }
  stream_head_forward(rs, model.ln_f_weight(), model.ln_f_bias(), model.wte(), s.layers, int64_t(B) * Tn, D);
}

double dense_forward_flops(int d_model, int B, int T, int layers) {
  const double N = double(B) * T, D = d_model;
  const double linear = 2.0 * N * 12.0 * D * D;  // qkv 3D^2, proj D^2, fc 4D^2, mlp proj 4D^2
  // QK^T and PV over all heads, for the (query, key) pairs the blocked causal kernel executes.
  const double attention = 2.0 * 2.0 * double(B) * double(attention_executed_pairs(T)) * D;
  const double head = 2.0 * N * D * kByteVocab;  // tied output head
  return layers * (linear + attention) + head;
}

}  // namespace fca
