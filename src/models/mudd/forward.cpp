#include "models/mudd/forward.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/exec_counters.h"
#include "ops/attention.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/norms.h"

namespace fca {

template <typename A>
void MuddRunState::layout(A& a) {
  const int64_t N = int64_t(max_batch) * max_tokens, D = config.dim, L = config.n_layer;
  int max_ffn = 0, max_da = 0;
  for (int i = 0; i < L; ++i) max_ffn = std::max(max_ffn, config.ffn_width(i)), max_da = std::max(max_da, config.da_hidden(i));
  hidden.assign(size_t(L + 1), nullptr);
  for (auto& h : hidden) h = a.template take<float>(N * D);
  for (auto& s : streams) s = a.template take<float>(N * D);
  for (auto& s : normed) s = a.template take<float>(N * D);
  q = a.template take<float>(N * D);
  k = a.template take<float>(N * D);
  v = a.template take<float>(N * D);
  qkv = a.template take<float>(N * 3 * D);
  probs = a.template take<float>(int64_t(max_batch) * config.n_head * max_tokens * max_tokens);
  attn_out = a.template take<float>(N * D);
  attn_proj = a.template take<float>(N * D);
  ffn_in = a.template take<float>(N * D);
  ffn_hidden = a.template take<float>(N * max_ffn);
  ffn_out = a.template take<float>(N * D);
  mean = a.template take<float>(N);
  rstd = a.template take<float>(N);
  alpha.assign(size_t(L), nullptr);
  for (int i = 0; i < L; ++i) alpha[size_t(i)] = a.template take<float>(N * config.streams(i) * config.sources(i));
  da_scratch = a.template take<float>(N * (D + max_da));
  final_normed = a.template take<float>(N * D);
  logits = a.template take<float>(N * config.vocab_size);
  losses = a.template take<float>(N);
  rope_cos = a.template take<float>(int64_t(config.block_size) * (config.rotary_dims() / 2));
  rope_sin = a.template take<float>(int64_t(config.block_size) * (config.rotary_dims() / 2));
}

MuddRunState::MuddRunState(const MuddConfig& c, int max_batch_, int max_tokens_)
    : config(c), max_batch(max_batch_), max_tokens(max_tokens_) {
  ArenaMeasure measure;
  layout(measure);
  arena = Arena(measure.bytes());
  layout(arena);
  rope_tables(rope_cos, rope_sin, c.block_size, c.rotary_dims(), c.rope_base);
}

namespace {

// y[n, :] = x[n, :] W^T + b, written with row stride ldy.
void linear_rows(float* y, int ldy, const float* x, const float* W, const float* b, int N, int in, int out) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) std::memcpy(y + int64_t(n) * ldy, b, sizeof(float) * size_t(out));
  gemm<float>(false, true, N, out, in, 1.0f, x, in, W, in, 1.0f, y, ldy);
}

}  // namespace

void mudd_forward(const MuddModel& model, MuddRunState& rs, const int32_t* tokens, int B, int T,
                  MuddCoefficientSource& source, int first_window) {
  const MuddConfig& c = model.config();
  if (T > c.block_size)
    throw Error("sequence of " + std::to_string(T) + " tokens is longer than the model's " + std::to_string(c.block_size) +
                " positions");
  if (B <= 0 || T <= 0 || B > rs.max_batch || T > rs.max_tokens)
    throw Error("batch [" + std::to_string(B) + ", " + std::to_string(T) + "] does not fit the run state [" +
                std::to_string(rs.max_batch) + ", " + std::to_string(rs.max_tokens) + "]");
  const int D = c.dim, H = c.n_head, dh = c.head_dim, L = c.n_layer, N = B * T;
  for (int n = 0; n < N; ++n)
    if (tokens[n] < 0 || tokens[n] >= c.vocab_size)
      throw Error("token id " + std::to_string(tokens[n]) + " is outside [0, " + std::to_string(c.vocab_size) + ")");
  rs.batch = B;
  rs.tokens = T;
  const MuddWeights& w = model.weights();
  const BatchPosition position{first_window, B, T};
  ExecCounters* counters = exec_counters();

  // X_0 = E[tokens] (no positional embedding, no scaling).
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) std::memcpy(rs.hidden[0] + int64_t(n) * D, w.embedding + int64_t(tokens[n]) * D, sizeof(float) * D);

  for (int i = 0; i < L; ++i) {
    const MuddBlockWeights& p = w.blocks[size_t(i)];
    if (counters != nullptr) counters->blocks_executed.fetch_add(1, std::memory_order_relaxed);
    // Block inputs: X_0 for block 0; the Q, K, V, R streams of DA i-1 otherwise.
    const float* in[4];
    for (int s = 0; s < 4; ++s) in[s] = i == 0 ? rs.hidden[0] : rs.streams[s];
    const float* R = in[3];
    for (int s = 0; s < (i == 0 ? 1 : 3); ++s)
      layernorm_forward(rs.normed[s], rs.mean, rs.rstd, in[s], p.attention_norm_weight[s], p.attention_norm_bias[s], N, D);
    const float* q_in = rs.normed[0];
    const float* k_in = i == 0 ? rs.normed[0] : rs.normed[1];
    const float* v_in = i == 0 ? rs.normed[0] : rs.normed[2];
    linear_rows(rs.q, D, q_in, p.wq, p.bq, N, D, D);
    linear_rows(rs.k, D, k_in, p.wk, p.bk, N, D, D);
    linear_rows(rs.v, D, v_in, p.wv, p.bv, N, D, D);
    // QK RMSNorm per head (scale shared by heads), then partial rotary on the first rot dims.
    rmsnorm_forward(rs.q, rs.q, p.q_norm, int64_t(N) * H, dh, dh, c.norm_eps);
    rmsnorm_forward(rs.k, rs.k, p.k_norm, int64_t(N) * H, dh, dh, c.norm_eps);
    rope_forward(rs.q, rs.rope_cos, rs.rope_sin, B, T, H, dh, c.rotary_dims());
    rope_forward(rs.k, rs.rope_cos, rs.rope_sin, B, T, H, dh, c.rotary_dims());
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      float* row = rs.qkv + int64_t(n) * 3 * D;
      std::memcpy(row, rs.q + int64_t(n) * D, sizeof(float) * D);
      std::memcpy(row + D, rs.k + int64_t(n) * D, sizeof(float) * D);
      std::memcpy(row + 2 * D, rs.v + int64_t(n) * D, sizeof(float) * D);
    }
    attention_forward<float>(rs.attn_out, rs.probs, nullptr, rs.qkv, B, T, D, H);
    linear_rows(rs.attn_proj, D, rs.attn_out, p.wo, p.bo, N, D, D);
    // FFN on the R stream (parallel residual), width F_i.
    const int F = p.ffn_width;
    layernorm_forward(rs.ffn_in, rs.mean, rs.rstd, R, p.ffn_norm_weight, p.ffn_norm_bias, N, D);
    linear_rows(rs.ffn_hidden, F, rs.ffn_in, p.w1, p.b1, N, D, F);
    gelu_erf_forward(rs.ffn_hidden, rs.ffn_hidden, int64_t(N) * F);
    linear_rows(rs.ffn_out, D, rs.ffn_hidden, p.w2, p.b2, N, F, D);
    float* X = rs.hidden[size_t(i + 1)];
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < int64_t(N) * D; ++e) X[e] = (R[e] + rs.attn_proj[e]) + rs.ffn_out[e];  // order as the reference

    // DA module i: coefficients from the source, then the signed mixing over X_0 .. X_{i+1}.
    const int C = c.streams(i), S = c.sources(i);
    float* alpha = rs.alpha[size_t(i)];
    source.coefficients(i, position, X, rs.da_scratch, alpha);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* a = alpha + int64_t(n) * C * S;
      for (int s = 0; s < C; ++s) {
        float* y = rs.streams[s] + int64_t(n) * D;
        const float* x0 = rs.hidden[0] + int64_t(n) * D;
        for (int d = 0; d < D; ++d) y[d] = a[s * S] * x0[d];
        for (int j = 1; j < S; ++j) {  // sequential over sources, as the reference accumulates
          const float aj = a[s * S + j];
          const float* xj = rs.hidden[size_t(j)] + int64_t(n) * D;
          for (int d = 0; d < D; ++d) y[d] += aj * xj[d];
        }
      }
    }
  }
  // Head: LN_final(Y_{L-1}^0) E_out^T over all vocab rows.
  layernorm_forward(rs.final_normed, rs.mean, rs.rstd, rs.streams[0], w.norm_weight, w.norm_bias, N, D);
  gemm<float>(false, true, N, c.vocab_size, D, 1.0f, rs.final_normed, D, w.output, D, 0.0f, rs.logits, c.vocab_size);
}

double mudd_loss(MuddRunState& rs, const int32_t* targets, double* window_nll) {
  const int64_t N = int64_t(rs.batch) * rs.tokens;
  for (int64_t n = 0; n < N; ++n)
    if (targets[n] < 0 || targets[n] >= rs.config.vocab_size)
      throw Error("target id " + std::to_string(targets[n]) + " is outside the vocabulary");
  cross_entropy_forward(rs.losses, rs.logits, targets, N, rs.config.vocab_size);
  double total = 0;
  for (int b = 0; b < rs.batch; ++b) {
    double s = 0;
    for (int t = 0; t < rs.tokens; ++t) s += rs.losses[int64_t(b) * rs.tokens + t];
    if (window_nll != nullptr) window_nll[b] = s / rs.tokens;
    total += s;
  }
  return total / double(N);
}

}  // namespace fca
