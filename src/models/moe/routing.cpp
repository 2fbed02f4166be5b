#include "models/moe/routing.h"

#include <cmath>

#include "core/error.h"
#include "core/phase_timer.h"
#include "core/exec_counters.h"
#include "ops/gemm.h"

namespace fca {

template <typename T>
void moe_top_k(const T* p, int E, int k, int32_t* experts, T* weights) {
  T sum = 0;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < E; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken = taken || experts[i] == e;
      if (!taken && (best < 0 || p[e] > p[best])) best = e;  // strict >: ties go to the lower index
    }
    experts[j] = best;
    weights[j] = p[best];
    sum += p[best];
  }
  if (k > 1)
    for (int j = 0; j < k; ++j) weights[j] /= sum;
}

void check_expert_record(const int32_t* experts, int k, int E, const std::string& where) {
  for (int j = 0; j < k; ++j) {
    if (experts[j] < 0 || experts[j] >= E)
      throw Error(where + ": expert index " + std::to_string(experts[j]) + " is outside [0, " + std::to_string(E) + ")");
    for (int i = 0; i < j; ++i)
      if (experts[i] == experts[j])
        throw Error(where + ": expert " + std::to_string(experts[j]) + " is selected twice (expected " + std::to_string(k) +
                    " distinct experts)");
  }
}

template <typename T>
void MoeLiveRouting<T>::route(int layer, const BatchPosition& batch, const T* m, T* probs, int32_t* experts, T* weights) {
  const PhaseScope phase_scope(Phase::controller);
  const MoeConfig& c = model_.config();
  const int64_t N = int64_t(batch.batch) * batch.tokens;
  const int E = c.n_expert, k = c.top_k;
  // r = m W_router^T [N, E], then a softmax per row in place.
  linear_forward(probs, m, model_.weights().blocks[size_t(layer)].router, static_cast<const T*>(nullptr), int(N), c.d_model, E);
  // Per row: the softmax after its max (E subtractions, exps, adds, divides), the top-k weights' sum
  // k and, for k > 1, their normalisation k.
  count_controller_flops(N * (4 * int64_t(E) + k + (k > 1 ? k : 0)));
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    T* p = probs + n * E;
    T mx = p[0];
    for (int e = 1; e < E; ++e) mx = std::max(mx, p[e]);
    T sum = 0;
    for (int e = 0; e < E; ++e) sum += (p[e] = std::exp(p[e] - mx));
    for (int e = 0; e < E; ++e) p[e] /= sum;
    moe_top_k(p, E, k, experts + n * k, weights + n * k);
  }
  count_controller_evaluation(batch);
}

CoefficientShape moe_record_shape(const MoeConfig& c, int tokens) {
  CoefficientShape s{c.n_layer, tokens, 1, c.top_k};
  s.kind = RecordKind::expert_routing;
  s.slots = c.top_k;
  s.categories = c.n_expert;
  return s;
}

namespace {
void check_record_fits(const CoefficientTensor& t, const MoeConfig& c, const BatchPosition& batch, int layer,
                       const char* what) {
  const CoefficientShape expected = moe_record_shape(c, batch.tokens);
  if (!(t.shape() == expected) || batch.first_window + batch.batch > t.windows() || layer >= c.n_layer)
    throw Error(std::string(what) + " has shape " + t.shape().to_string() + " for " + std::to_string(t.windows()) +
                " windows; the forward pass needs " + expected.to_string() + " for windows " +
                std::to_string(batch.first_window) + ".." + std::to_string(batch.first_window + batch.batch - 1));
}
}  // namespace

template <typename T>
void MoeRoutingSource<T>::record(const MoeConfig& c, CoefficientTensor& sink, int layer, const BatchPosition& batch, const T*,
                                 T*, int32_t* experts, T* weights) {
  check_record_fits(sink, c, batch, layer, "routing record");
  const int k = c.top_k;
  for (int b = 0; b < batch.batch; ++b)
    for (int t = 0; t < batch.tokens; ++t) {
      const int64_t n = int64_t(b) * batch.tokens + t;
      for (int j = 0; j < k; ++j) {
        sink.at(batch.first_window + b, layer, t, 0, j) = static_cast<float>(weights[n * k + j]);
        sink.discrete_at(batch.first_window + b, layer, t, j) = experts[n * k + j];
      }
    }
}

template <typename T>
void MoeRoutingSource<T>::replay(const MoeConfig& c, const CoefficientTensor& record, int layer, const BatchPosition& batch,
                                 const T*, T*, int32_t* experts, T* weights) {
  check_record_fits(record, c, batch, layer, "replayed routing record");
  const int k = c.top_k;
  for (int b = 0; b < batch.batch; ++b)
    for (int t = 0; t < batch.tokens; ++t) {
      const int64_t n = int64_t(b) * batch.tokens + t;
      const int w = batch.first_window + b;
      for (int j = 0; j < k; ++j) {
        experts[n * k + j] = record.discrete_at(w, layer, t, j);
        weights[n * k + j] = static_cast<T>(record.at(w, layer, t, 0, j));
      }
      check_expert_record(experts + n * k, k, c.n_expert,
                          "replayed routing, window " + std::to_string(w) + ", layer " + std::to_string(layer) + ", token " +
                              std::to_string(t));
    }
}

template void moe_top_k<float>(const float*, int, int, int32_t*, float*);
template void moe_top_k<double>(const double*, int, int, int32_t*, double*);
template class MoeLiveRouting<float>;
template class MoeLiveRouting<double>;
template class MoeRoutingSource<float>;
template class MoeRoutingSource<double>;

}  // namespace fca
