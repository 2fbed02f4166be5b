// Backward pass of MUDD models. Walks DA modules and blocks in reverse: at step i the gradients of
// DA module i's output streams are known (from block i+1, or from the head when i = L-1); the
// mixing backward gives dalpha and adds into every source's gradient; the generator backward adds
// into X_{i+1}'s, which is then complete; block i's backward gives the gradients of its input
// streams (the outputs of DA module i-1), or of X_0 for block 0.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "models/mudd/forward.h"
#include "ops/attention.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/norms.h"

namespace fca {
namespace {

// Copies one [N, D] block out of a [N, 3D] buffer (the q, k or v part).
template <typename T>
void copy_part(T* out, const T* packed, int part, int N, int D) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) std::memcpy(out + int64_t(n) * D, packed + int64_t(n) * 3 * D + int64_t(part) * D, sizeof(T) * D);
}

}  // namespace

template <typename T>
void mudd_backward(const MuddModel<T>& model, MuddRunState<T>& rs, MuddModel<T>& grads, T loss_scale) {
  if (!rs.keep_all_layers) throw Error("MUDD backward needs a run state that keeps every layer's activations");
  if (omp_get_max_threads() > rs.scratch_threads)
    throw Error("MUDD backward: run state was sized for " + std::to_string(rs.scratch_threads) + " threads");
  const MuddConfig& c = model.config();
  const int D = c.dim, H = c.n_head, dh = c.head_dim, L = c.n_layer, V = c.vocab_size, B = rs.batch, Tn = rs.tokens;
  const int N = B * Tn;
  const MuddWeights<T>& w = model.weights();
  MuddWeights<T>& dw = grads.weights();
  for (auto* d : rs.d_hidden) std::fill(d, d + int64_t(N) * D, T(0));

  // Head: logits = LN_final(Y) E_out^T.
  T* dlogits = rs.logits;
  cross_entropy_backward(dlogits, rs.logits, rs.targets, loss_scale, N, V);
  gemm<T>(true, false, V, D, N, T(1), dlogits, V, rs.final_normed, D, T(1), dw.output, D);
  gemm<T>(false, false, N, D, V, T(1), dlogits, V, w.output, D, T(0), rs.d_a, D);
  std::fill(rs.d_streams[0], rs.d_streams[0] + int64_t(N) * D, T(0));
  layernorm_backward(rs.d_streams[0], dw.norm_weight, dw.norm_bias, rs.d_a, rs.final_stream(), rs.final_mean,
                     rs.final_rstd, w.norm_weight, N, D);

  for (int i = L - 1; i >= 0; --i) {
    const MuddLayerActivations<T>& a = rs.layers[size_t(i)];
    const MuddBlockWeights<T>& p = w.blocks[size_t(i)];
    MuddBlockWeights<T>& dp = dw.blocks[size_t(i)];
    const int C = c.streams(i), S = c.sources(i), width = C * S, Hd = c.da_hidden(i);
    const T* alpha = rs.alpha[size_t(i)];

    // Mixing: Y^c = sum_j alpha[c, j] X_j. dalpha[c, j] = <dY^c, X_j>; dX_j += sum_c alpha[c, j] dY^c.
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      const T* al = alpha + int64_t(n) * width;
      T* dal = rs.d_alpha + int64_t(n) * width;
      for (int j = 0; j < S; ++j) {
        const T* x = rs.hidden[size_t(j)] + int64_t(n) * D;
        T* dx = rs.d_hidden[size_t(j)] + int64_t(n) * D;
        for (int s = 0; s < C; ++s) {
          const T* dy = rs.d_streams[s] + int64_t(n) * D;
          T dot = 0;
          for (int d = 0; d < D; ++d) dot += dy[d] * x[d];
          dal[s * S + j] = dot;
          const T coef = al[s * S + j];
          for (int d = 0; d < D; ++d) dx[d] += coef * dy[d];
        }
      }
    }
    // Generator: alpha = W2 GELU(W1 rms(X_{i+1})) + beta.
    const MuddDaWeights<T>& da = w.da[size_t(i)];
    MuddDaWeights<T>& dda = dw.da[size_t(i)];
    add_column_sums(dda.beta, rs.d_alpha, N, width);
    gemm<T>(true, false, width, Hd, N, T(1), rs.d_alpha, width, a.da.act, Hd, T(1), dda.w2, Hd);
    gemm<T>(false, false, N, Hd, width, T(1), rs.d_alpha, width, da.w2, Hd, T(0), rs.d_wide, Hd);
    gelu_erf_backward(rs.d_wide, rs.d_wide, a.da.pre, int64_t(N) * Hd);
    gemm<T>(true, false, Hd, D, N, T(1), rs.d_wide, Hd, a.da.normed, D, T(1), dda.w1, D);
    gemm<T>(false, false, N, D, Hd, T(1), rs.d_wide, Hd, da.w1, D, T(0), rs.d_a, D);
    rmsnorm_backward<T>(rs.d_hidden[size_t(i + 1)], nullptr, rs.d_a, rs.hidden[size_t(i + 1)], a.da.rstd, nullptr, N, 1,
                        D, D);

    // Block i: X_{i+1} = (R + A) + F with R its residual input stream.
    const T* dX = rs.d_hidden[size_t(i + 1)];
    const T* in[4];
    for (int s = 0; s < 4; ++s) in[s] = i == 0 ? rs.hidden[0] : rs.layers[size_t(i - 1)].streams[s];
    // Gradients of the block's inputs: the streams of DA i-1 (overwritten here, their dY having been
    // consumed by the mixing backward above), or X_0 for block 0 (accumulated).
    T* d_in[4];
    for (int s = 0; s < 4; ++s) {
      d_in[s] = i == 0 ? rs.d_hidden[0] : rs.d_streams[s];
      if (i > 0) std::fill(d_in[s], d_in[s] + int64_t(N) * D, T(0));
    }
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < int64_t(N) * D; ++e) d_in[3][e] += dX[e];
    // FFN on LN_ffn(R).
    const int F = p.ffn_width;
    linear_backward(rs.d_wide, dp.w2, dp.b2, dX, a.ffn_act, p.w2, N, F, D);
    gelu_erf_backward(rs.d_wide, rs.d_wide, a.ffn_pre, int64_t(N) * F);
    linear_backward(rs.d_a, dp.w1, dp.b1, rs.d_wide, a.ffn_in, p.w1, N, D, F);
    layernorm_backward(d_in[3], dp.ffn_norm_weight, dp.ffn_norm_bias, rs.d_a, in[3], a.ffn_mean, a.ffn_rstd,
                       p.ffn_norm_weight, N, D);
    // Attention: A = attn(q, k, v) Wo^T + bo.
    linear_backward(rs.d_b, dp.wo, dp.bo, dX, a.attn_out, p.wo, N, D, D);
    attention_backward(rs.d_qkv, rs.attn_scratch, rs.d_b, a.probs, a.qkv, B, Tn, D, H);
    rope_backward(rs.d_qkv, rs.rope_cos, rs.rope_sin, B, Tn, H, dh, c.rotary_dims(), 3 * D);
    rope_backward(rs.d_qkv + D, rs.rope_cos, rs.rope_sin, B, Tn, H, dh, c.rotary_dims(), 3 * D);
    // q, k, v each: (QK-norm), projection, the stream's LayerNorm. Block 0's three share one LN.
    const T* raw[2] = {a.q_raw, a.k_raw};
    const T* rstd[2] = {a.q_rstd, a.k_rstd};
    const T* norm_scale[2] = {p.q_norm, p.k_norm};
    T* d_norm_scale[2] = {dp.q_norm, dp.k_norm};
    const T* W[3] = {p.wq, p.wk, p.wv};
    T* dW[3] = {dp.wq, dp.wk, dp.wv};
    T* db[3] = {dp.bq, dp.bk, dp.bv};
    for (int s = 0; s < 3; ++s) {
      copy_part(rs.d_c, rs.d_qkv, s, N, D);
      const T* d_proj = rs.d_c;
      if (s < 2) {
        std::fill(rs.d_a, rs.d_a + int64_t(N) * D, T(0));
        rmsnorm_backward<T>(rs.d_a, d_norm_scale[s], rs.d_c, raw[s], rstd[s], norm_scale[s], N, H, dh, D);
        d_proj = rs.d_a;
      }
      const int ln = i == 0 ? 0 : s;
      linear_backward(rs.d_b, dW[s], db[s], d_proj, a.normed[ln], W[s], N, D, D);
      layernorm_backward(d_in[i == 0 ? 3 : s], dp.attention_norm_weight[ln], dp.attention_norm_bias[ln], rs.d_b, in[ln],
                         a.ln_mean[ln], a.ln_rstd[ln], p.attention_norm_weight[ln], N, D);
    }
  }
  // X_0 = E[tokens]: scatter into the embedding's gradient, column-parallel, rows in order.
  const int blocks = (D + 15) / 16;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * 16, c1 = std::min(c0 + 16, D);
    for (int n = 0; n < N; ++n) {
      const T* d = rs.d_hidden[0] + int64_t(n) * D;
      T* e = dw.embedding + int64_t(rs.tokens_in[n]) * D;
      for (int col = c0; col < c1; ++col) e[col] += d[col];
    }
  }
}

template void mudd_backward<float>(const MuddModel<float>&, MuddRunState<float>&, MuddModel<float>&, float);
template void mudd_backward<double>(const MuddModel<double>&, MuddRunState<double>&, MuddModel<double>&, double);

}  // namespace fca
