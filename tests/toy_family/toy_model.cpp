#include "toy_family/toy_model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/exec_counters.h"
#include "ops/gemm.h"

namespace fca::toy {

void ToyConfig::validate(const std::string& where) const {
  require_positive(n_layer, "n_layer", where);
  require_positive(d_model, "d_model", where);
  require_positive(seq_len, "seq_len", where);
  require_positive(n_head, "n_head", where);
  check_transformer_shape(n_layer, d_model, n_head, seq_len, where);
  // The shape every family takes, checked as every family checks it, though the toy has no
  // attention to split into heads.
  if (d_model % n_head != 0)
    throw Error(where + ": d_model " + std::to_string(d_model) + " is not divisible by n_head " + std::to_string(n_head));
}

std::string ToyConfig::to_json() const {
  nlohmann::ordered_json j;
  write_shape_fields(j, *this);
  return j.dump();
}

ToyConfig ToyConfig::from_json(const std::string& text, const std::string& where) {
  const StrictConfig j(text, where, {"n_layer", "d_model", "n_head", "seq_len"}, kToyFormat);
  ToyConfig c;
  read_shape_fields(j, c);
  c.validate(where);
  return c;
}

// The names put the tensors under ParameterBuffer::initialize's rules: *fc.weight and
// *router.weight normal(0, 0.02), biases 0.
std::vector<TensorSlot> ToySpec::layout(const ToyConfig& c) {
  LayoutBuilder b;
  const int64_t D = c.d_model;
  b.add("wte", {kVocab, D});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    b.add(p + "fc.weight", {D, D});
    b.add(p + "fc.bias", {D});
    b.add(p + "router.weight", {D}, false);
    b.add(p + "router.bias", {1}, false);
  }
  b.add("head.fc.weight", {kVocab, D});
  return b.slots;
}

template <typename T>
ToyWeights<T> ToySpec::bind(ParameterBuffer<T>& params, const ToyConfig& c) {
  ToyWeights<T> w;
  w.wte = params.at("wte");
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    w.fc_weight.push_back(params.at(p + "fc.weight"));
    w.fc_bias.push_back(params.at(p + "fc.bias"));
    w.gate_weight.push_back(params.at(p + "router.weight"));
    w.gate_bias.push_back(params.at(p + "router.bias"));
  }
  w.head = params.at("head.fc.weight");
  return w;
}

std::string ToySpec::describe(const ToyConfig& c) {
  return "toy L " + std::to_string(c.n_layer) + ", D " + std::to_string(c.d_model) + ", T " + std::to_string(c.seq_len);
}

template <typename T>
ToyRunState<T>::ToyRunState(const ToyConfig& c, int max_batch_, int max_tokens_, bool)
    : max_batch(max_batch_), max_tokens(std::min(max_tokens_, c.seq_len)), L(c.n_layer), D(c.d_model) {
  const int64_t N = int64_t(max_batch) * max_tokens;
  inputs.resize(size_t(N));
  targets.resize(size_t(N));
  hidden.resize(size_t((L + 1) * N * D));
  activation.resize(size_t(L * N * D));
  gates.resize(size_t(L * N));
  logit_buffer.resize(size_t(N * kVocab));
  logits = logit_buffer.data();
}

template <typename T>
size_t ToyRunState<T>::bytes() const {
  return (inputs.size() + targets.size()) * sizeof(int32_t) +
         (hidden.size() + activation.size() + gates.size() + logit_buffer.size()) * sizeof(T);
}

template <typename T>
void ToyLiveGates<T>::coefficients(int layer, const BatchPosition& batch, const T* h, T* g) {
  count_controller_evaluation(batch);
  const int D = model_.config().d_model;
  const int64_t N = int64_t(batch.batch) * batch.tokens;
  const T* r = model_.weights().gate_weight[size_t(layer)];
  const T b = model_.weights().gate_bias[size_t(layer)][0];
  count_controller_flops(N * (2 * D + 4));  // r . h: D multiplies, D adds with b; sigmoid: 4
  for (int64_t n = 0; n < N; ++n) {
    T s = b;
    for (int d = 0; d < D; ++d) s += r[d] * h[n * D + d];
    g[n] = T(1) / (T(1) + std::exp(-s));
  }
}

CoefficientShape toy_record_shape(const ToyConfig& c, int tokens) { return CoefficientShape{c.n_layer, tokens, 1, 1}; }

template <typename T>
void toy_forward(const ToyModel<T>& m, ToyRunState<T>& rs, const int32_t* tokens, int B, int T_, ToyGateSource<T>& source,
                 int first_window) {
  check_batch_fits(B, T_, m.config().seq_len, rs.max_batch, rs.max_tokens);
  rs.batch = B;
  rs.tokens = T_;
  const BatchPosition position{first_window, B, T_, &rs.controller_evaluations};
  const int L = m.config().n_layer, D = m.config().d_model;
  const int64_t N = int64_t(B) * T_;
  const auto& w = m.weights();
  toy_embed(w, rs, tokens, N, "toy");
  for (int l = 0; l < L; ++l) {
    const T* h = rs.h(l);
    T* a = rs.activation.data() + int64_t(l) * N * D;
    T* g = rs.gates.data() + int64_t(l) * N;
    T* next = rs.h(l + 1);
    if (ExecCounters* counters = exec_counters()) counters->blocks_executed.fetch_add(1, std::memory_order_relaxed);
    linear_forward(a, h, w.fc_weight[size_t(l)], w.fc_bias[size_t(l)], int(N), D, D);
    for (int64_t i = 0; i < N * D; ++i) a[i] = std::tanh(a[i]);
    source.coefficients(l, position, h, g);
    count_mixing_flops(2 * N * D);
    for (int64_t n = 0; n < N; ++n)
      for (int d = 0; d < D; ++d) next[n * D + d] = h[n * D + d] + g[n] * a[n * D + d];
  }
  linear_forward(rs.logits, rs.h(L), w.head, static_cast<const T*>(nullptr), int(N), D, kVocab);
}

template <typename T>
double toy_loss(ToyRunState<T>& rs, const int32_t* targets, double* window_nll) {
  const int B = rs.batch, Tn = rs.tokens;
  double total = 0;
  for (int b = 0; b < B; ++b) {
    double window = 0;
    for (int t = 0; t < Tn; ++t) {
      const int64_t n = int64_t(b) * Tn + t;
      if (targets[n] < 0 || targets[n] >= kVocab) throw Error("toy loss: target " + std::to_string(targets[n]) + " is not a byte");
      rs.targets[size_t(n)] = targets[n];
      const T* z = rs.logits + n * kVocab;
      const double top = double(*std::max_element(z, z + kVocab));
      double sum = 0;
      for (int v = 0; v < kVocab; ++v) sum += std::exp(double(z[v]) - top);
      window += std::log(sum) + top - double(z[targets[n]]);
    }
    if (window_nll != nullptr) window_nll[b] = window / Tn;
    total += window;
  }
  return total / (double(B) * Tn);
}

template <typename T>
void toy_backward(const ToyModel<T>& m, ToyRunState<T>& rs, ToyModel<T>& grads, T scale) {
  const int L = m.config().n_layer, D = m.config().d_model;
  const int64_t N = int64_t(rs.batch) * rs.tokens;
  const auto& w = m.weights();
  auto& dw = grads.weights();
  std::vector<T> dh = toy_head_backward(w, dw, rs, scale), du(size_t(N * D));
  for (int l = L - 1; l >= 0; --l) {
    const T* h = rs.h(l);
    const T* a = rs.activation.data() + int64_t(l) * N * D;
    const T* g = rs.gates.data() + int64_t(l) * N;
    const T* r = w.gate_weight[size_t(l)];
    std::vector<T> ds(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) {
      T dg = 0;
      for (int d = 0; d < D; ++d) {
        const T up = dh[size_t(n * D + d)];
        dg += up * a[n * D + d];
        du[size_t(n * D + d)] = up * g[n] * (T(1) - a[n * D + d] * a[n * D + d]);  // through tanh
      }
      ds[size_t(n)] = dg * g[n] * (T(1) - g[n]);  // through the sigmoid
    }
    for (int64_t n = 0; n < N; ++n) {
      dw.gate_bias[size_t(l)][0] += ds[size_t(n)];
      for (int d = 0; d < D; ++d) dw.gate_weight[size_t(l)][d] += ds[size_t(n)] * h[n * D + d];
    }
    // dh_l = dh_{l+1} (residual) + du W_l + ds r_l
    linear_backward(dh.data(), dw.fc_weight[size_t(l)], dw.fc_bias[size_t(l)], du.data(), h, w.fc_weight[size_t(l)], int(N), D,
                    D, true);
    for (int64_t n = 0; n < N; ++n)
      for (int d = 0; d < D; ++d) dh[size_t(n * D + d)] += ds[size_t(n)] * r[d];
  }
  toy_embedding_backward(dw, rs, dh);
}

template <typename T>
void toy_embed(const ToyWeights<T>& w, ToyRunState<T>& rs, const int32_t* tokens, int64_t N, const char* family) {
  const int D = rs.D;
  for (int64_t n = 0; n < N; ++n) {
    if (tokens[n] < 0 || tokens[n] >= kVocab)
      throw Error(std::string(family) + " forward: token " + std::to_string(tokens[n]) + " at row " + std::to_string(n) +
                  " is not a byte");
    rs.inputs[size_t(n)] = tokens[n];
    std::copy_n(w.wte + int64_t(tokens[n]) * D, D, rs.h(0) + n * D);
  }
}

template <typename T>
std::vector<T> toy_head_backward(const ToyWeights<T>& w, ToyWeights<T>& dw, ToyRunState<T>& rs, T scale) {
  const int D = rs.D;
  const int64_t N = int64_t(rs.batch) * rs.tokens;
  // dlogits = scale (softmax - onehot), [N, 256]
  std::vector<T> dz(size_t(N * kVocab)), dh(size_t(N * D));
  for (int64_t n = 0; n < N; ++n) {
    const T* z = rs.logits + n * kVocab;
    const double top = double(*std::max_element(z, z + kVocab));
    double sum = 0;
    for (int v = 0; v < kVocab; ++v) sum += std::exp(double(z[v]) - top);
    for (int v = 0; v < kVocab; ++v) dz[size_t(n * kVocab + v)] = T(std::exp(double(z[v]) - top) / sum) * scale;
    dz[size_t(n * kVocab + rs.targets[size_t(n)])] -= scale;
  }
  linear_backward(dh.data(), dw.head, static_cast<T*>(nullptr), dz.data(), rs.h(rs.L), w.head, int(N), D, kVocab);
  return dh;
}

template <typename T>
void toy_embedding_backward(ToyWeights<T>& dw, const ToyRunState<T>& rs, const std::vector<T>& dh) {
  const int D = rs.D;
  const int64_t N = int64_t(rs.batch) * rs.tokens;
  for (int64_t n = 0; n < N; ++n)
    for (int d = 0; d < D; ++d) dw.wte[int64_t(rs.inputs[size_t(n)]) * D + d] += dh[size_t(n * D + d)];
}

double toy_gemm_flops(const ToyConfig& c, int B, int T) {
  const double N = double(B) * T, D = c.d_model;
  return c.n_layer * 2.0 * N * D * D + 2.0 * N * D * kVocab;
}
double toy_controller_flops(const ToyConfig& c, int B, int T) { return c.n_layer * double(B) * T * (2.0 * c.d_model + 4.0); }
double toy_mixing_flops(const ToyConfig& c, int B, int T) { return c.n_layer * 2.0 * double(B) * T * c.d_model; }

#define FCA_TOY_INSTANTIATE(T)                                                                                        \
  template ToyWeights<T> ToySpec::bind<T>(ParameterBuffer<T>&, const ToyConfig&);                                   \
  template struct ToyRunState<T>;                                                                                     \
  template class ToyLiveGates<T>;                                                                                     \
  template void toy_forward<T>(const ToyModel<T>&, ToyRunState<T>&, const int32_t*, int, int, ToyGateSource<T>&, int); \
  template double toy_loss<T>(ToyRunState<T>&, const int32_t*, double*);                                              \
  template void toy_backward<T>(const ToyModel<T>&, ToyRunState<T>&, ToyModel<T>&, T);                               \
  template void toy_embed<T>(const ToyWeights<T>&, ToyRunState<T>&, const int32_t*, int64_t, const char*);             \
  template std::vector<T> toy_head_backward<T>(const ToyWeights<T>&, ToyWeights<T>&, ToyRunState<T>&, T);            \
  template void toy_embedding_backward<T>(ToyWeights<T>&, const ToyRunState<T>&, const std::vector<T>&);
FCA_TOY_INSTANTIATE(float)
FCA_TOY_INSTANTIATE(double)

}  // namespace fca::toy
