#include "models/base/block.h"

#include <algorithm>
#include <string>
#include <type_traits>

#include "core/error.h"

#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/simd.h"

namespace fca {

template <typename T>
void attention_branch_forward(BlockActivations<T>& a, T* attn_scratch, const BlockWeights<T>& p, const T* x,
                              int B, int Tn, int D, int H, const AttentionStats<T>* stats) {
  const int N = B * Tn;
  layernorm_forward(a.ln1_out, a.ln1_mean, a.ln1_rstd, x, p.ln1_weight, p.ln1_bias, N, D);
  linear_forward(a.qkv, a.ln1_out, p.qkv_weight, p.qkv_bias, N, D, 3 * D);
  attention_forward(a.attn_out, a.probs, attn_scratch, stats, a.qkv, B, Tn, D, H);
  linear_forward(a.u, a.attn_out, p.proj_weight, p.proj_bias, N, D, D);
}

template <typename T>
void attention_half_forward(BlockActivations<T>& a, T* attn_scratch, const BlockWeights<T>& p, const T* h,
                            int B, int Tn, int D, int H, const AttentionStats<T>* stats) {
  const int N = B * Tn;
  attention_branch_forward(a, attn_scratch, p, h, B, Tn, D, H, stats);
  residual_layernorm_forward(a.ln2_in, a.ln2_out, a.ln2_mean, a.ln2_rstd, h, a.u, p.ln2_weight, p.ln2_bias, N, D);
}

template <typename T>
void mlp_branch_forward(BlockActivations<T>& a, const BlockWeights<T>& p, int N, int D) {
  layernorm_forward(a.ln2_out, a.ln2_mean, a.ln2_rstd, a.ln2_in, p.ln2_weight, p.ln2_bias, N, D);
  mlp_forward(a.update, a.fc_pre, a.fc_act, a.ln2_out, p.fc_weight, p.fc_bias, p.mlp_proj_weight, p.mlp_proj_bias, N, D,
              4 * D, false);
}

template <typename T>
void dense_mlp_forward(BlockActivations<T>& a, const BlockWeights<T>& p, int N, int D) {
  // F_l = u_l + w_l: the MLP's second product accumulates onto u_l + b (beta = 1).
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {  // by row: no index division per element, and the loop vectorises
    const T* u = a.u + int64_t(n) * D;
    T* update = a.update + int64_t(n) * D;
    if constexpr (std::is_same_v<T, float>)
      simd::residual_row(update, u, 1.0f, p.mlp_proj_bias, D);  // u + 1 b: 1 b is b exactly
    else
      for (int d = 0; d < D; ++d) update[d] = u[d] + p.mlp_proj_bias[d];
  }
  mlp_forward(a.update, a.fc_pre, a.fc_act, a.ln2_out, p.fc_weight, p.fc_bias, p.mlp_proj_weight,
              static_cast<const T*>(nullptr), N, D, 4 * D, true);
}

template <typename T>
void dense_block_forward(BlockActivations<T>& a, T* attn_scratch, const BlockWeights<T>& p, const T* h, T* next, int B,
                         int Tn, int D, int H) {
  const int64_t N = int64_t(B) * Tn;
  attention_half_forward(a, attn_scratch, p, h, B, Tn, D, H, static_cast<const AttentionStats<T>*>(nullptr));
  dense_mlp_forward(a, p, int(N), D);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N * D; ++i) next[i] = h[i] + a.update[i];
}

template <typename T>
void dense_mlp_backward(BlockWeights<T>& dp, const BlockGradScratch<T>& s, const BlockActivations<T>& a,
                        const BlockWeights<T>& p, const T* dF, int N, int D) {
  // F = u + w, w = GELU(m Wfc^T + bfc) Wmlp^T + bmlp.
  linear_backward(s.d_wide, dp.mlp_proj_weight, dp.mlp_proj_bias, dF, a.fc_act, p.mlp_proj_weight, N, 4 * D, D);
  gelu_tanh_backward(s.d_wide, s.d_wide, a.fc_pre, int64_t(N) * 4 * D);
  linear_backward(s.d_small, dp.fc_weight, dp.fc_bias, s.d_wide, a.ln2_out, p.fc_weight, N, D, 4 * D);
}

template <typename T>
void attention_half_backward(T* d_h, BlockWeights<T>& dp, const BlockGradScratch<T>& s,
                             const BlockActivations<T>& a, const BlockWeights<T>& p, const T* h,
                             const T* du_direct, int B, int Tn, int D, int H) {
  const int N = B * Tn;
  // m = LayerNorm(h + u): its input gradient reaches both h and u.
  std::fill(s.d_ln2_in, s.d_ln2_in + int64_t(N) * D, T(0));
  layernorm_backward(s.d_ln2_in, dp.ln2_weight, dp.ln2_bias, s.d_small, a.ln2_in, a.ln2_mean, a.ln2_rstd, p.ln2_weight, N, D);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < int64_t(N) * D; ++i) {
    s.d_u[i] = du_direct[i] + s.d_ln2_in[i];
    d_h[i] += s.d_ln2_in[i];
  }
  attention_branch_backward(d_h, dp, s, a, p, h, B, Tn, D, H);
}

template <typename T>
void attention_branch_backward(T* d_x, BlockWeights<T>& dp, const BlockGradScratch<T>& s, const BlockActivations<T>& a,
                               const BlockWeights<T>& p, const T* x, int B, int Tn, int D, int H) {
  const int N = B * Tn;
  // u = attn_out Wproj^T + bproj; attention; qkv = ln1_out Wqkv^T + bqkv; ln1_out = LN(x).
  linear_backward(s.d_small, dp.proj_weight, dp.proj_bias, s.d_u, a.attn_out, p.proj_weight, N, D, D);
  attention_backward(s.d_qkv, s.attn_scratch, s.d_small, a.probs, a.qkv, B, Tn, D, H);
  linear_backward(s.d_small, dp.qkv_weight, dp.qkv_bias, s.d_qkv, a.ln1_out, p.qkv_weight, N, D, 3 * D);
  layernorm_backward(d_x, dp.ln1_weight, dp.ln1_bias, s.d_small, x, a.ln1_mean, a.ln1_rstd, p.ln1_weight, N, D);
}

template <typename T>
void mlp_branch_backward(T* d_x, BlockWeights<T>& dp, const BlockGradScratch<T>& s, const BlockActivations<T>& a,
                         const BlockWeights<T>& p, const T* dw, int N, int D) {
  dense_mlp_backward(dp, s, a, p, dw, N, D);  // d(ln2_out) into s.d_small
  layernorm_backward(d_x, dp.ln2_weight, dp.ln2_bias, s.d_small, a.ln2_in, a.ln2_mean, a.ln2_rstd, p.ln2_weight, N, D);
}

void check_batch_fits(int B, int Tn, int model_positions, int max_batch, int max_tokens) {
  if (Tn > model_positions)
    throw Error("sequence of " + std::to_string(Tn) + " tokens is longer than the model's " + std::to_string(model_positions) +
                " positions");
  if (B > max_batch || Tn > max_tokens || B <= 0 || Tn <= 0)
    throw Error("batch [" + std::to_string(B) + ", " + std::to_string(Tn) + "] does not fit the run state [" +
                std::to_string(max_batch) + ", " + std::to_string(max_tokens) + "]");
}

template <typename T>
void stream_embed(StreamState<T>& s, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int D) {
  for (int64_t i = 0; i < int64_t(B) * Tn; ++i) {
    if (tokens[i] < 0 || tokens[i] >= kByteVocab) throw Error("token id " + std::to_string(tokens[i]) + " is outside [0, 256)");
    s.tokens_in[i] = tokens[i];
  }
  embedding_forward(s.hidden[0], tokens, wte, wpe, B, Tn, D);
}

template <typename T>
void stream_head_forward(StreamState<T>& s, const T* ln_f_weight, const T* ln_f_bias, const T* wte, int L, int64_t N, int D) {
  layernorm_forward(s.ln_f_out, s.ln_f_mean, s.ln_f_rstd, s.hidden[size_t(L)], ln_f_weight, ln_f_bias, N, D);
  gemm<T>(false, true, int(N), kByteVocab, D, T(1), s.ln_f_out, D, wte, D, T(0), s.logits, kByteVocab);
}

template <typename T>
void stream_head_backward(StreamState<T>& s, T* dwte, T* dln_f_weight, T* dln_f_bias, const T* ln_f_weight, const T* wte,
                          T loss_scale, int L, int64_t N, int D) {
  T* dlogits = s.logits;  // dlogits overwrites the logits buffer
  cross_entropy_backward(dlogits, s.logits, s.targets, loss_scale, N, kByteVocab);
  gemm<T>(true, false, kByteVocab, D, int(N), T(1), dlogits, kByteVocab, s.ln_f_out, D, T(1), dwte, D);
  gemm<T>(false, false, int(N), D, kByteVocab, T(1), dlogits, kByteVocab, wte, D, T(0), s.d_small, D);
  std::fill(s.d_hidden, s.d_hidden + N * D, T(0));
  layernorm_backward(s.d_hidden, dln_f_weight, dln_f_bias, s.d_small, s.hidden[size_t(L)], s.ln_f_mean, s.ln_f_rstd, ln_f_weight,
                     N, D);
}

#define FCA_INSTANTIATE(T)                                                                                           \
  template void attention_half_forward<T>(BlockActivations<T>&, T*, const BlockWeights<T>&, const T*, int,  \
                                          int, int, int, const AttentionStats<T>*);                                  \
  template void attention_branch_forward<T>(BlockActivations<T>&, T*, const BlockWeights<T>&, const T*, int,  \
                                            int, int, int, const AttentionStats<T>*);                                \
  template void mlp_branch_forward<T>(BlockActivations<T>&, const BlockWeights<T>&, int, int);                 \
  template void attention_branch_backward<T>(T*, BlockWeights<T>&, const BlockGradScratch<T>&,                   \
                                             const BlockActivations<T>&, const BlockWeights<T>&, const T*, int,  \
                                             int, int, int);                                                     \
  template void mlp_branch_backward<T>(T*, BlockWeights<T>&, const BlockGradScratch<T>&,                         \
                                       const BlockActivations<T>&, const BlockWeights<T>&, const T*, int, int); \
  template void dense_mlp_forward<T>(BlockActivations<T>&, const BlockWeights<T>&, int, int);               \
  template void dense_block_forward<T>(BlockActivations<T>&, T*, const BlockWeights<T>&, const T*, T*, int, int, int, \
                                       int);                                                                     \
  template void dense_mlp_backward<T>(BlockWeights<T>&, const BlockGradScratch<T>&,                              \
                                      const BlockActivations<T>&, const BlockWeights<T>&, const T*, int, int); \
  template void attention_half_backward<T>(T*, BlockWeights<T>&, const BlockGradScratch<T>&,                     \
                                           const BlockActivations<T>&, const BlockWeights<T>&, const T*,   \
                                           const T*, int, int, int, int);
FCA_INSTANTIATE(float)
#define FCA_INSTANTIATE_STREAM(T)                                                                                     \
  template void stream_embed<T>(StreamState<T>&, const int32_t*, const T*, const T*, int, int, int);                   \
  template void stream_head_forward<T>(StreamState<T>&, const T*, const T*, const T*, int, int64_t, int);              \
  template void stream_head_backward<T>(StreamState<T>&, T*, T*, T*, const T*, const T*, T, int, int64_t, int);
FCA_INSTANTIATE_STREAM(float)
FCA_INSTANTIATE_STREAM(double)
#undef FCA_INSTANTIATE_STREAM
FCA_INSTANTIATE(double)
#undef FCA_INSTANTIATE

}  // namespace fca
