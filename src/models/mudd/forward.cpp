#include "models/mudd/forward.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/exec_counters.h"
#include "ops/attention.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/norms.h"
#include "ops/simd.h"

namespace fca {

template <typename T>
template <typename A>
void MuddRunState<T>::layout(A& a, int windows) {
  const int64_t N = int64_t(windows) * max_tokens, D = config.dim, L = config.n_layer;
  int max_ffn = 0, max_da = 0;
  for (int i = 0; i < L; ++i) max_ffn = std::max(max_ffn, config.ffn_width(i)), max_da = std::max(max_da, config.da_hidden(i));
  const int kept = keep_all_layers ? int(L) : 1;
  layers.assign(size_t(L), {});
  for (int i = 0; i < kept; ++i) {
    auto& l = layers[size_t(i)];
    for (int s = 0; s < 3; ++s) {
      l.normed[s] = a.template take<T>(N * D);
      l.ln_mean[s] = a.template take<T>(N);
      l.ln_rstd[s] = a.template take<T>(N);
    }
    l.q_raw = keep_all_layers ? a.template take<T>(N * D) : nullptr;  // the backward's; inference projects into qkv
    l.k_raw = keep_all_layers ? a.template take<T>(N * D) : nullptr;
    l.q_rstd = a.template take<T>(N * config.n_head);
    l.k_rstd = a.template take<T>(N * config.n_head);
    l.qkv = a.template take<T>(N * 3 * D);
    l.probs = keep_all_layers ? a.template take<T>(int64_t(windows) * config.n_head * max_tokens * max_tokens) : nullptr;
    l.attn_out = a.template take<T>(N * D);
    l.attn_proj = a.template take<T>(N * D);
    l.ffn_mean = a.template take<T>(N);
    l.ffn_rstd = a.template take<T>(N);
    l.ffn_in = a.template take<T>(N * D);
    l.ffn_pre = a.template take<T>(N * max_ffn);
    l.ffn_act = a.template take<T>(N * max_ffn);
    l.ffn_out = a.template take<T>(N * D);
    l.da.rstd = a.template take<T>(N);
    l.da.normed = a.template take<T>(N * D);
    l.da.pre = a.template take<T>(N * max_da);
    l.da.act = a.template take<T>(N * max_da);
    for (auto& s : l.streams) s = a.template take<T>(N * D);
  }
  for (int i = kept; i < L; ++i) layers[size_t(i)] = layers[0];
  hidden.assign(size_t(L + 1), nullptr);
  for (auto& h : hidden) h = a.template take<T>(N * D);
  alpha.assign(size_t(L), nullptr);
  for (int i = 0; i < L; ++i) alpha[size_t(i)] = a.template take<T>(N * config.streams(i) * config.sources(i));
  final_mean = a.template take<T>(N);
  final_rstd = a.template take<T>(N);
  final_normed = a.template take<T>(N * D);
  logits = a.template take<T>(N * config.vocab_size);
  losses = a.template take<T>(N);
  tokens_in = a.template take<int32_t>(N);
  targets = a.template take<int32_t>(N);
  rope_cos = a.template take<T>(int64_t(config.block_size) * (config.rotary_dims() / 2));
  rope_sin = a.template take<T>(int64_t(config.block_size) * (config.rotary_dims() / 2));
  const int64_t nb = keep_all_layers ? N : 0;
  d_hidden.assign(size_t(L + 1), nullptr);
  for (auto& h : d_hidden) h = a.template take<T>(nb * D);
  for (auto& s : d_streams) s = a.template take<T>(nb * D);
  d_a = a.template take<T>(nb * D);
  d_b = a.template take<T>(nb * D);
  d_c = a.template take<T>(nb * D);
  d_qkv = a.template take<T>(nb * 3 * D);
  d_wide = a.template take<T>(nb * std::max(max_ffn, max_da));
  d_alpha = a.template take<T>(nb * 4 * (L + 1));
  scratch_threads = omp_get_max_threads();
  attn_scratch =
      a.template take<T>(scratch_threads * attention_scratch_per_thread(max_tokens, config.head_dim, keep_all_layers));
}

template <typename T>
MuddRunState<T>::MuddRunState(const MuddConfig& c, int max_batch_, int max_tokens_, bool keep_all_layers_)
    : config(c), max_batch(max_batch_), max_tokens(max_tokens_), keep_all_layers(keep_all_layers_) {
  arena = Arena::for_windows(max_batch, [this](auto& a, int windows) { layout(a, windows); });
  rope_tables(rope_cos, rope_sin, c.block_size, c.rotary_dims(), c.rope_base);
}

namespace {

// Block i: X_{i+1} from its input streams (X_0 for block 0; the Q, K, V, R streams of DA i-1).
template <typename T>
void block_forward(const MuddModel<T>& model, MuddRunState<T>& rs, int i, int B, int Tn) {
  const MuddConfig& c = model.config();
  const int D = c.dim, H = c.n_head, dh = c.head_dim, N = B * Tn;
  const MuddBlockWeights<T>& p = model.weights().blocks[size_t(i)];
  auto& a = rs.layers[size_t(i)];
  // Block inputs: X_0 for block 0; the Q, K, V, R streams of DA i-1 otherwise.
  const T* in[4];
  for (int s = 0; s < 4; ++s) in[s] = i == 0 ? rs.hidden[0] : rs.layers[size_t(i - 1)].streams[s];
  const T* R = in[3];
  // The block's LayerNorms read only its inputs: the attention's (one stream for block 0, else
  // three) and the FFN's of R (parallel residual), one pass over the rows for all.
  const LayerNormOperands<T> ffn_norm{a.ffn_in, a.ffn_mean, a.ffn_rstd, R, p.ffn_norm_weight, p.ffn_norm_bias};
  auto attention_norm = [&](int s) {
    return LayerNormOperands<T>{a.normed[s], a.ln_mean[s], a.ln_rstd[s], in[s], p.attention_norm_weight[s], p.attention_norm_bias[s]};
  };
  if (i == 0)
    layernorm_forward_group<T>({attention_norm(0), ffn_norm}, N, D);
  else
    layernorm_forward_group<T>({attention_norm(0), attention_norm(1), attention_norm(2), ffn_norm}, N, D);
  const T* q_in = a.normed[0];
  const T* k_in = i == 0 ? a.normed[0] : a.normed[1];
  const T* v_in = i == 0 ? a.normed[0] : a.normed[2];
  T* q = a.qkv;
  T* k = a.qkv + D;
  // The backward reads the projections before the QK-norm (q_raw, k_raw), copied into the packed
  // buffer; inference projects straight into it.
  const bool keep_raw = rs.keep_all_layers;
  const int ld_qk = keep_raw ? D : 3 * D;
  linear_forward_group<T>({{a.qkv + 2 * D, v_in, p.wv, p.bv, D, D, 3 * D},
                           {keep_raw ? a.q_raw : q, q_in, p.wq, p.bq, D, D, ld_qk},
                           {keep_raw ? a.k_raw : k, k_in, p.wk, p.bk, D, D, ld_qk}},
                          N);
  // The FFN (parallel residual: it reads only its own LayerNorm), its two layers at once: in bf16
  // its hidden activation then stays in bf16 (ops/gemm.h).
  const int F = p.ffn_width;
  mlp_forward<T>(a.ffn_out, a.ffn_pre, a.ffn_act, a.ffn_in, p.w1, p.b1, p.w2, p.b2, N, D, F, false, GeluForm::erf);
  if (keep_raw)
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      std::memcpy(q + int64_t(n) * 3 * D, a.q_raw + int64_t(n) * D, sizeof(T) * D);
      std::memcpy(k + int64_t(n) * 3 * D, a.k_raw + int64_t(n) * D, sizeof(T) * D);
    }
  // QK RMSNorm per head (scale shared by heads) in the packed buffer, then partial rotary.
  rmsnorm_rope_forward<T>(q, a.q_rstd, p.q_norm, rs.rope_cos, rs.rope_sin, B, Tn, H, dh, c.rotary_dims(), 3 * D, c.norm_eps);
  rmsnorm_rope_forward<T>(k, a.k_rstd, p.k_norm, rs.rope_cos, rs.rope_sin, B, Tn, H, dh, c.rotary_dims(), 3 * D, c.norm_eps);
  attention_forward<T>(a.attn_out, a.probs, rs.attn_scratch, nullptr, a.qkv, B, Tn, D, H);
  // The attention's output projection (parallel residual: R feeds it and the FFN).
  linear_forward<T>(a.attn_proj, a.attn_out, p.wo, p.bo, N, D, D);
  T* X = rs.hidden[size_t(i + 1)];
  // X = (R + attn_proj) + ffn_out, the reference's order; in float as two vector passes per row
  // (R + 1 attn_proj, then + 1 ffn_out: 1 v is v exactly), the row still in L1 for the second.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const int64_t o = int64_t(n) * D;
    if constexpr (std::is_same_v<T, float>) {
      simd::residual_row(X + o, R + o, 1.0f, a.attn_proj + o, D);
      simd::axpy(X + o, a.ffn_out + o, 1.0f, D);
    } else {
      for (int64_t e = o; e < o + D; ++e) X[e] = (R[e] + a.attn_proj[e]) + a.ffn_out[e];
    }
  }
}

}  // namespace

template <typename T>
void mudd_forward(const MuddModel<T>& model, MuddRunState<T>& rs, const int32_t* tokens, int B, int Tn,
                  MuddCoefficientSource<T>& source, int first_window) {
  const MuddConfig& c = model.config();
  const BatchPosition position = begin_pass(rs, B, Tn, c.block_size, first_window);
  const int D = c.dim, L = c.n_layer, N = B * Tn;
  // X_0 and block 0's output X_1 depend on the tokens alone (prefix_reuse.h): a replay of the
  // windows of the last pass starts at DA module 0.
  const bool reuse_block0 = rs.prefix.reusable(tokens, B, Tn, rs.tokens_in);
  if (!reuse_block0) rs.prefix.invalidate();
  for (int n = 0; n < N; ++n) {
    if (tokens[n] < 0 || tokens[n] >= c.vocab_size)
      throw Error("token id " + std::to_string(tokens[n]) + " is outside [0, " + std::to_string(c.vocab_size) + ")");
    rs.tokens_in[n] = tokens[n];
  }
  const MuddWeights<T>& w = model.weights();
  ExecCounters* counters = exec_counters();

  // X_0 = E[tokens] (no positional embedding, no scaling).
  if (reuse_block0) {
    ++rs.prefix.reused_passes;
  } else {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) std::memcpy(rs.hidden[0] + int64_t(n) * D, w.embedding + int64_t(tokens[n]) * D, sizeof(T) * D);
  }

  for (int i = 0; i < L; ++i) {
    if (i > 0 || !reuse_block0) {
      block_forward(model, rs, i, B, Tn);
      if (counters != nullptr) counters->blocks_executed.fetch_add(1, std::memory_order_relaxed);
      if (i == 0) rs.prefix.computed(B, Tn);
    }
    auto& a = rs.layers[size_t(i)];
    T* X = rs.hidden[size_t(i + 1)];

    // DA module i: coefficients from the source, then the signed mixing over X_0 .. X_{i+1}.
    const int C = c.streams(i), S = c.sources(i);
    T* alpha = rs.alpha[size_t(i)];
    source.coefficients(i, position, X, a.da, alpha);
    count_mixing_flops(int64_t(N) * C * D * (2 * S - 1));  // per stream: D products, then (S - 1) multiply-adds
#pragma omp parallel
    {
      std::vector<const T*> x(static_cast<size_t>(S));  // this row's sources X_0 .. X_{S-1}
      std::vector<T*> y(static_cast<size_t>(C));         // and its streams
#pragma omp for schedule(static)
      for (int n = 0; n < N; ++n) {
        const T* al = alpha + int64_t(n) * C * S;
        for (int j = 0; j < S; ++j) x[size_t(j)] = rs.hidden[size_t(j)] + int64_t(n) * D;
        for (int s = 0; s < C; ++s) y[size_t(s)] = a.streams[s] + int64_t(n) * D;
        if constexpr (std::is_same_v<T, float>) {  // one SIMD pass over the sources for all streams
          simd::mix_streams(y.data(), C, x.data(), S, al, D);
        } else {  // the same operations: sequential over sources, as the reference accumulates
          for (int s = 0; s < C; ++s) {
            for (int d = 0; d < D; ++d) y[size_t(s)][d] = al[s * S] * x[0][d];
            for (int j = 1; j < S; ++j)
              for (int d = 0; d < D; ++d) y[size_t(s)][d] += al[s * S + j] * x[size_t(j)][d];
          }
        }
      }
    }
  }
  // Head: LN_final(Y_{L-1}^0) E_out^T over all vocab rows.
  layernorm_forward(rs.final_normed, rs.final_mean, rs.final_rstd, rs.final_stream(), w.norm_weight, w.norm_bias, N, D);
  gemm<T>(false, true, N, c.vocab_size, D, T(1), rs.final_normed, D, w.output, D, T(0), rs.logits, c.vocab_size);
}

template <typename T>
double mudd_loss(MuddRunState<T>& rs, const int32_t* targets, double* window_nll) {
  const int64_t N = int64_t(rs.batch) * rs.tokens;
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] < 0 || targets[n] >= rs.config.vocab_size)
      throw Error("target id " + std::to_string(targets[n]) + " is outside the vocabulary");
    rs.targets[n] = targets[n];
  }
  cross_entropy_forward(rs.losses, rs.logits, rs.targets, N, rs.config.vocab_size);
  double total = 0;
  for (int b = 0; b < rs.batch; ++b) {
    double s = 0;
    for (int t = 0; t < rs.tokens; ++t) s += rs.losses[int64_t(b) * rs.tokens + t];
    if (window_nll != nullptr) window_nll[b] = s / rs.tokens;
    total += s;
  }
  return total / double(N);
}

template struct MuddRunState<float>;
template struct MuddRunState<double>;
template void mudd_forward<float>(const MuddModel<float>&, MuddRunState<float>&, const int32_t*, int, int,
                                  MuddCoefficientSource<float>&, int);
template void mudd_forward<double>(const MuddModel<double>&, MuddRunState<double>&, const int32_t*, int, int,
                                   MuddCoefficientSource<double>&, int);
template double mudd_loss<float>(MuddRunState<float>&, const int32_t*, double*);
template double mudd_loss<double>(MuddRunState<double>&, const int32_t*, double*);

}  // namespace fca
