#include "models/exit/train_pass.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "models/base/block.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"

namespace fca {

template <typename T>
template <typename A>
void ExitTrainState<T>::layout(A& a, int windows) {
  const int64_t N = int64_t(windows) * max_tokens, D = config.d_model, L = config.n_layer;
  const int kept = backward ? int(L) : 1;
  blocks.assign(size_t(L), {});
  for (int l = 0; l < kept; ++l)
    take_block_activations(a, blocks[size_t(l)], N, backward ? int64_t(windows) * config.n_head * max_tokens * max_tokens : 0, D, true);
  for (int l = kept; l < L; ++l) blocks[size_t(l)] = blocks[0];
  this->take_stream(a, int(L), N, D, config.head_dim(), max_tokens, backward);
  const int E = config.supervised_exits();
  exit_ln.assign(size_t(E), nullptr);
  exit_mean.assign(size_t(E), nullptr);
  exit_rstd.assign(size_t(E), nullptr);
  exit_logits.assign(size_t(E), nullptr);
  for (int e = 0; e + 1 < E; ++e) {
    exit_ln[size_t(e)] = a.template take<T>(N * D);
    exit_mean[size_t(e)] = a.template take<T>(N);
    exit_rstd[size_t(e)] = a.template take<T>(N);
    exit_logits[size_t(e)] = a.template take<T>(N * kByteVocab);
  }
  exit_ln[size_t(E - 1)] = this->ln_f_out;
  exit_mean[size_t(E - 1)] = this->ln_f_mean;
  exit_rstd[size_t(E - 1)] = this->ln_f_rstd;
  exit_logits[size_t(E - 1)] = this->logits;
  probe_scores = a.template take<T>(int64_t(E - 1) * N);
  probe_labels = a.template take<int32_t>(int64_t(E - 1) * N);
  d_wide = a.template take<T>(backward ? N * 4 * D : 0);
}

template <typename T>
ExitTrainState<T>::ExitTrainState(const ExitConfig& config_, int max_batch_, int max_tokens_, bool backward_)
    : config(config_), max_batch(max_batch_), max_tokens(max_tokens_), backward(backward_) {
  arena = Arena::for_windows(max_batch, [this](auto& a, int windows) { layout(a, windows); });
  exit_nll.assign(size_t(config.supervised_exits()), 0.0);
}

template <typename T>
void exit_trunk_forward(const ExitModel<T>& model, ExitTrainState<T>& rs, const int32_t* tokens, int B, int Tn) {
  const ExitConfig& c = model.config();
  begin_pass(rs, B, Tn, c.seq_len, 0);
  const int D = c.d_model, H = c.n_head, L = c.n_layer, m = c.min_exit;
  const int64_t N = int64_t(B) * Tn;
  const auto& w = model.weights();
  stream_embed(rs, tokens, w.wte, w.wpe, B, Tn, D);
  for (int l = 0; l < L; ++l) {
    const auto& p = w.blocks[size_t(l)];
    auto& a = rs.blocks[size_t(l)];
    const T* h = rs.hidden[size_t(l)];
    T* next = rs.hidden[size_t(l + 1)];
    attention_half_forward(a, rs.attn_scratch, p, h, B, Tn, D, H, static_cast<const AttentionStats<T>*>(nullptr));
    dense_mlp_forward(a, p, int(N), D);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N * D; ++i) next[i] = h[i] + a.update[i];
  }
  for (int k = m; k <= L; ++k) {  // z_k = LN(h_k; ln_f), o_k = z_k wte^T
    const size_t e = size_t(k - m);
    layernorm_forward(rs.exit_ln[e], rs.exit_mean[e], rs.exit_rstd[e], rs.hidden[size_t(k)], w.ln_f_weight, w.ln_f_bias, N, D);
    gemm<T>(false, true, int(N), kByteVocab, D, T(1), rs.exit_ln[e], D, w.wte, D, T(0), rs.exit_logits[e], kByteVocab);
  }
}

template <typename T>
double exit_trunk_loss(ExitTrainState<T>& rs, const int32_t* targets, double* window_nll) {
  const ExitConfig& c = rs.config;
  double loss = 0;
  for (int k = c.min_exit; k <= c.n_layer; ++k) {
    const size_t e = size_t(k - c.min_exit);
    const double ce = language_model_loss(rs.losses, rs.targets, rs.exit_logits[e], targets, rs.batch, rs.tokens,
                                          kByteVocab, k == c.n_layer ? window_nll : nullptr);
    rs.exit_nll[e] = ce;
    loss += c.exit_loss_weight(k) * ce;
  }
  return loss;
}

template <typename T>
void exit_trunk_backward(const ExitModel<T>& model, ExitTrainState<T>& rs, ExitModel<T>& grads, T loss_scale) {
  if (!rs.backward) throw Error("exit backward needs a run state that keeps every layer's activations");
  if (omp_get_max_threads() > rs.scratch_threads)
    throw Error("backward: run state was sized for " + std::to_string(rs.scratch_threads) + " threads, now " +
                std::to_string(omp_get_max_threads()));
  const ExitConfig& c = model.config();
  const int D = c.d_model, H = c.n_head, L = c.n_layer, m = c.min_exit, B = rs.batch, Tn = rs.tokens;
  const int64_t N = int64_t(B) * Tn;
  const auto& w = model.weights();
  auto& dw = grads.weights();
  const BlockGradScratch<T> scratch{rs.d_u, rs.d_ln2_in, rs.d_small, rs.d_wide, rs.d_qkv, rs.attn_scratch};
  std::fill(rs.d_hidden, rs.d_hidden + N * D, T(0));
  for (int k = L; k >= 1; --k) {
    if (k >= m) {  // exit k's head: dlogits = w_k scale (softmax - onehot); into wte, ln_f and d h_k
      const size_t e = size_t(k - m);
      T* dlogits = rs.exit_logits[e];
      cross_entropy_backward(dlogits, dlogits, rs.targets, T(c.exit_loss_weight(k)) * loss_scale, N, kByteVocab);
      gemm<T>(true, false, kByteVocab, D, int(N), T(1), dlogits, kByteVocab, rs.exit_ln[e], D, T(1), dw.wte, D);
      gemm<T>(false, false, int(N), D, kByteVocab, T(1), dlogits, kByteVocab, w.wte, D, T(0), rs.d_small, D);
      layernorm_backward(rs.d_hidden, dw.ln_f_weight, dw.ln_f_bias, rs.d_small, rs.hidden[size_t(k)], rs.exit_mean[e],
                         rs.exit_rstd[e], w.ln_f_weight, N, D);
    }
    // h_k = h_{k-1} + F: dF = dh, and dh keeps its identity path.
    const int l = k - 1;
    const auto& p = w.blocks[size_t(l)];
    std::copy(rs.d_hidden, rs.d_hidden + N * D, rs.d_update);
    dense_mlp_backward(dw.blocks[size_t(l)], scratch, rs.blocks[size_t(l)], p, rs.d_update, int(N), D);
    attention_half_backward(rs.d_hidden, dw.blocks[size_t(l)], scratch, rs.blocks[size_t(l)], p, rs.hidden[size_t(l)],
                            rs.d_update, B, Tn, D, H);
  }
  embedding_backward(dw.wte, dw.wpe, rs.d_hidden, rs.tokens_in, B, Tn, D);
}

namespace {
// argmax over a row of 256 logits, ties to the lower byte.
template <typename T>
int32_t argmax_byte(const T* row) {
  int32_t best = 0;
  for (int v = 1; v < kByteVocab; ++v)
    if (row[v] > row[best]) best = v;
  return best;
}
}  // namespace

template <typename T>
double exit_probe_loss(const ExitModel<T>& model, ExitTrainState<T>& rs, T* grad_weight, T* grad_bias, T loss_scale) {
  const ExitConfig& c = model.config();
  const int D = c.d_model, L = c.n_layer, m = c.min_exit;
  const int64_t N = int64_t(rs.batch) * rs.tokens;
  const auto& w = model.weights();
  const int points = L - m;  // exit points k = m..L-1
  const T* full = rs.exit_logits[size_t(L - m)];
  double loss = 0;
  for (int k = m; k < L; ++k) {
    const size_t e = size_t(k - m);
    const T* z = rs.exit_ln[e];
    const T* o = rs.exit_logits[e];
    const T* wk = w.exit_weight + int64_t(k - 1) * D;
    const T bk = w.exit_bias[k - 1];
    T* s = rs.probe_scores + int64_t(e) * N;
    int32_t* u = rs.probe_labels + int64_t(e) * N;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      u[n] = argmax_byte(o + n * kByteVocab) == argmax_byte(full + n * kByteVocab) ? 1 : 0;
      T acc = 0;
      for (int d = 0; d < D; ++d) acc += wk[d] * z[n * D + d];
      s[n] = acc + bk;
    }
    // BCE(sigmoid(s), u) = softplus(s) - u s, from s (stable); d/ds = sigmoid(s) - u.
    double sum = 0;
    for (int64_t n = 0; n < N; ++n) {
      const double sn = double(s[n]);
      sum += std::max(sn, 0.0) + std::log1p(std::exp(-std::abs(sn))) - double(u[n]) * sn;
    }
    loss += sum / double(N) / double(points);
    // ds = loss_scale (sigmoid(s) - u) / points: the gradient of loss_scale * N * J_exit.
    T* gw = grad_weight + int64_t(k - 1) * D;
    T db = 0;
    for (int64_t n = 0; n < N; ++n) {
      const T ds = loss_scale * (T(1) / (T(1) + std::exp(-s[n])) - T(u[n])) / T(points);
      db += ds;
      const T* zn = z + n * D;
      for (int d = 0; d < D; ++d) gw[d] += ds * zn[d];
    }
    grad_bias[k - 1] += db;
  }
  return loss;
}

#define FCA_INSTANTIATE(T)                                                                                          \
  template struct ExitTrainState<T>;                                                                                \
  template void exit_trunk_forward<T>(const ExitModel<T>&, ExitTrainState<T>&, const int32_t*, int, int);           \
  template double exit_trunk_loss<T>(ExitTrainState<T>&, const int32_t*, double*);                                  \
  template void exit_trunk_backward<T>(const ExitModel<T>&, ExitTrainState<T>&, ExitModel<T>&, T);                   \
  template double exit_probe_loss<T>(const ExitModel<T>&, ExitTrainState<T>&, T*, T*, T);
FCA_INSTANTIATE(float)
FCA_INSTANTIATE(double)
#undef FCA_INSTANTIATE

}  // namespace fca
