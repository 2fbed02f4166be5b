#include "toy_family/skip_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/exec_counters.h"
#include "ops/gemm.h"

namespace fca::toy {

SkipConfig SkipConfig::from_json(const std::string& text, const std::string& where) {
  const StrictConfig j(text, where, {"n_layer", "d_model", "n_head", "seq_len"}, kSkipFormat);
  SkipConfig c;
  read_shape_fields(j, c);
  c.validate(where);
  return c;
}

std::string SkipSpec::describe(const ToyConfig& c) {
  return "skip L " + std::to_string(c.n_layer) + ", D " + std::to_string(c.d_model) + ", T " + std::to_string(c.seq_len);
}

template <typename T>
SkipRunState<T>::SkipRunState(const ToyConfig& c, int max_batch_, int max_tokens_, bool training)
    : ToyRunState<T>(c, max_batch_, max_tokens_, training) {
  const int64_t N = int64_t(this->max_batch) * this->max_tokens;
  ran.resize(size_t(this->L * N));
  rows.resize(size_t(N));
  gathered_in.resize(size_t(N * this->D));
  gathered_out.resize(size_t(N * this->D));
}

template <typename T>
size_t SkipRunState<T>::bytes() const {
  return ToyRunState<T>::bytes() + ran.size() + rows.size() * sizeof(int32_t) + (gathered_in.size() + gathered_out.size()) * sizeof(T);
}

template <typename T>
void SkipSource<T>::record(const SkipConfig&, CoefficientTensor& sink, int layer, const BatchPosition& batch, const T*, T* g,
                           uint8_t* ran) {
  for (int b = 0; b < batch.batch; ++b)
    for (int t = 0; t < batch.tokens; ++t) {
      const int64_t n = int64_t(b) * batch.tokens + t;
      sink.at(batch.first_window + b, layer, t) = float(g[n]);
      sink.discrete_at(batch.first_window + b, layer, t, 0) = ran[n];
    }
}

template <typename T>
void SkipSource<T>::replay(const SkipConfig&, const CoefficientTensor& record, int layer, const BatchPosition& batch, const T*,
                           T* g, uint8_t* ran) {
  for (int b = 0; b < batch.batch; ++b)
    for (int t = 0; t < batch.tokens; ++t) {
      const int64_t n = int64_t(b) * batch.tokens + t;
      const int32_t c = record.discrete_at(batch.first_window + b, layer, t, 0);
      if (c != 0 && c != 1)
        throw Error("block_skip record: window " + std::to_string(batch.first_window + b) + ", layer " + std::to_string(layer) + ", token " +
                    std::to_string(t) + " has ran flag " + std::to_string(c) + " (expected 0 or 1)");
      g[n] = T(record.at(batch.first_window + b, layer, t));
      ran[n] = uint8_t(c);
    }
}

template <typename T>
void SkipLiveGates<T>::route(int layer, const BatchPosition& batch, const T* h, T* g, uint8_t* ran) {
  count_controller_evaluation(batch);
  const int D = model_.config().d_model;
  const int64_t N = int64_t(batch.batch) * batch.tokens;
  const T* r = model_.weights().gate_weight[size_t(layer)];
  const T b = model_.weights().gate_bias[size_t(layer)][0];
  count_controller_flops(N * (2 * D + 4));  // r . h: D multiplies, D adds with b; sigmoid: 4; the comparison: 0
  for (int64_t n = 0; n < N; ++n) {
    T s = b;
    for (int d = 0; d < D; ++d) s += r[d] * h[n * D + d];
    g[n] = T(1) / (T(1) + std::exp(-s));
    ran[n] = double(g[n]) >= threshold_ ? 1 : 0;
  }
}

CoefficientShape skip_record_shape(const ToyConfig& c, int tokens) {
  CoefficientShape s{c.n_layer, tokens, 1, 1};
  s.kind = block_skip_kind();
  s.slots = 1;
  return s;
}

namespace {

// Block l on the rows whose flag is set: gathered, one GEMM, tanh, and h_{l+1} = h_l + c g a (a = 0
// on the rows that did not run). Returns the number of rows that ran.
template <typename T>
int64_t run_block(const SkipModel<T>& m, SkipRunState<T>& rs, int l, int64_t N) {
  const int D = m.config().d_model;
  const auto& w = m.weights();
  const T* h = rs.h(l);
  T* a = rs.activation.data() + int64_t(l) * N * D;
  const T* g = rs.gates.data() + int64_t(l) * N;
  const uint8_t* c = rs.ran.data() + int64_t(l) * N;
  T* next = rs.h(l + 1);
  int64_t n_ran = 0;
  for (int64_t n = 0; n < N; ++n)
    if (c[n]) rs.rows[size_t(n_ran++)] = int32_t(n);
  for (int64_t i = 0; i < n_ran; ++i) std::memcpy(rs.gathered_in.data() + i * D, h + int64_t(rs.rows[size_t(i)]) * D, sizeof(T) * D);
  if (n_ran > 0)
    linear_forward(rs.gathered_out.data(), rs.gathered_in.data(), w.fc_weight[size_t(l)], w.fc_bias[size_t(l)], int(n_ran), D, D);
  std::fill(a, a + N * D, T(0));
  for (int64_t i = 0; i < n_ran; ++i) {
    T* row = a + int64_t(rs.rows[size_t(i)]) * D;
    for (int d = 0; d < D; ++d) row[d] = std::tanh(rs.gathered_out[size_t(i * D + d)]);
  }
  count_mixing_flops(2 * n_ran * D);  // g a and the add, on the rows that ran
  for (int64_t n = 0; n < N; ++n)
    for (int d = 0; d < D; ++d) next[n * D + d] = c[n] ? h[n * D + d] + g[n] * a[n * D + d] : h[n * D + d];
  return n_ran;
}

}  // namespace

template <typename T>
void skip_forward(const SkipModel<T>& m, SkipRunState<T>& rs, const int32_t* tokens, int B, int Tn, SkipSource<T>& source,
                  int first_window) {
  check_batch_fits(B, Tn, m.config().seq_len, rs.max_batch, rs.max_tokens);
  rs.batch = B;
  rs.tokens = Tn;
  const BatchPosition position{first_window, B, Tn, &rs.controller_evaluations};
  const int L = m.config().n_layer, D = m.config().d_model;
  const int64_t N = int64_t(B) * Tn;
  const auto& w = m.weights();
  toy_embed(w, rs, tokens, N, "skip");
  for (int l = 0; l < L; ++l) {
    if (ExecCounters* counters = exec_counters()) counters->blocks_executed.fetch_add(1, std::memory_order_relaxed);
    source.route(l, position, rs.h(l), rs.gates.data() + int64_t(l) * N, rs.ran.data() + int64_t(l) * N);
    count_family(kSkippedRows, N - run_block(m, rs, l, N));
  }
  linear_forward(rs.logits, rs.h(L), w.head, static_cast<const T*>(nullptr), int(N), D, kVocab);
}

template <typename T>
void skip_backward(const SkipModel<T>& m, SkipRunState<T>& rs, SkipModel<T>& grads, T scale) {
  const int L = m.config().n_layer, D = m.config().d_model;
  const int64_t N = int64_t(rs.batch) * rs.tokens;
  const auto& w = m.weights();
  auto& dw = grads.weights();
  std::vector<T> dh = toy_head_backward(w, dw, rs, scale), du(size_t(N * D));
  for (int l = L - 1; l >= 0; --l) {
    const T* h = rs.h(l);
    const T* a = rs.activation.data() + int64_t(l) * N * D;
    const T* g = rs.gates.data() + int64_t(l) * N;
    const uint8_t* c = rs.ran.data() + int64_t(l) * N;
    const T* r = w.gate_weight[size_t(l)];
    std::vector<T> ds(static_cast<size_t>(N), T(0));
    for (int64_t n = 0; n < N; ++n) {
      T dg = 0;
      for (int d = 0; d < D; ++d) {
        const T up = dh[size_t(n * D + d)];
        dg += up * a[n * D + d];
        du[size_t(n * D + d)] = c[n] ? up * g[n] * (T(1) - a[n * D + d] * a[n * D + d]) : T(0);  // through tanh
      }
      if (c[n]) ds[size_t(n)] = dg * g[n] * (T(1) - g[n]);  // through the sigmoid
    }
    for (int64_t n = 0; n < N; ++n) {
      dw.gate_bias[size_t(l)][0] += ds[size_t(n)];
      for (int d = 0; d < D; ++d) dw.gate_weight[size_t(l)][d] += ds[size_t(n)] * h[n * D + d];
    }
    // dh_l = dh_{l+1} (residual) + du W_l + ds r_l (du is 0 on the rows that did not run)
    linear_backward(dh.data(), dw.fc_weight[size_t(l)], dw.fc_bias[size_t(l)], du.data(), h, w.fc_weight[size_t(l)], int(N), D, D,
                    true);
    for (int64_t n = 0; n < N; ++n)
      for (int d = 0; d < D; ++d) dh[size_t(n * D + d)] += ds[size_t(n)] * r[d];
  }
  toy_embedding_backward(dw, rs, dh);
}

#define FCA_SKIP_INSTANTIATE(T)                                                                                      \
  template struct SkipRunState<T>;                                                                                   \
  template class SkipSource<T>;                                                                                      \
  template class SkipLiveGates<T>;                                                                                   \
  template void skip_forward<T>(const SkipModel<T>&, SkipRunState<T>&, const int32_t*, int, int, SkipSource<T>&, int); \
  template void skip_backward<T>(const SkipModel<T>&, SkipRunState<T>&, SkipModel<T>&, T);
FCA_SKIP_INSTANTIATE(float)
FCA_SKIP_INSTANTIATE(double)

SkipPassFigures skip_pass_figures(const ToyConfig& c, const uint8_t* ran, int B, int T, bool live) {
  const int64_t N = int64_t(B) * T;
  const double D = c.d_model;
  SkipPassFigures f;
  f.gemm = 2.0 * double(N) * D * kVocab;  // the head
  for (int l = 0; l < c.n_layer; ++l) {
    int64_t n_ran = 0;
    for (int64_t n = 0; n < N; ++n) n_ran += ran[int64_t(l) * N + n];
    f.gemm += 2.0 * double(n_ran) * D * D;
    f.mixing += 2.0 * double(n_ran) * D;
    f.skipped_rows += N - n_ran;
  }
  f.controller = live ? c.n_layer * double(N) * (2.0 * D + 4.0) : 0.0;
  return f;
}

}  // namespace fca::toy
