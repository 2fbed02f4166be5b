#include "models/mod/routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/phase_timer.h"
#include "core/exec_counters.h"

namespace fca {

CoefficientShape mod_record_shape(const ModConfig& c, int tokens) {
  CoefficientShape s{c.routed_layers(), tokens, 1, 1};
  s.kind = RecordKind::token_selection;
  s.slots = 1;
  s.selected = c.selected_tokens(tokens);
  return s;
}

template <typename T>
void ModLiveRouting<T>::route(int layer, const BatchPosition& batch, int K, const T* h, T* scores, int32_t* rows,
                               T* weights) {
  const PhaseScope phase_scope(Phase::controller);
  const ModConfig& c = model_.config();
  const int D = c.d_model, Tn = batch.tokens;
  const T* w = model_.weights().router_weight[size_t(layer)];
  const T b = model_.weights().router_bias[size_t(layer)][0];
  const int64_t N = int64_t(batch.batch) * Tn;
  // Scores h . w + b (2D + 1 per row; a hand-written product, not a GEMM) and the selected rows'
  // sigmoid weights (4 each).
  count_controller_flops(N * (2 * int64_t(D) + 1) + int64_t(batch.batch) * K * 4);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    T s = 0;
    for (int d = 0; d < D; ++d) s += h[n * D + d] * w[d];
    scores[n] = s + b;
  }
  for (int bw = 0; bw < batch.batch; ++bw) {
    const T* s = scores + int64_t(bw) * Tn;
    std::vector<int32_t> order{};
    order.resize(size_t(Tn));
    std::iota(order.begin(), order.end(), 0);
    // Largest scores first, ties to the lower position; then the K chosen in position order.
    std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return s[x] > s[y]; });
    std::sort(order.begin(), order.begin() + K);
    for (int i = 0; i < K; ++i) {
      rows[int64_t(bw) * K + i] = int32_t(int64_t(bw) * Tn + order[size_t(i)]);
      weights[int64_t(bw) * K + i] = T(1) / (T(1) + std::exp(-s[order[size_t(i)]]));
    }
  }
  count_controller_evaluation(batch);
}

namespace {
void check_fits(const CoefficientTensor& t, const ModConfig& c, const BatchPosition& batch, const char* what) {
  const CoefficientShape expected = mod_record_shape(c, batch.tokens);
  if (!(t.shape() == expected) || batch.first_window + batch.batch > t.windows())
    throw Error(std::string(what) + " has shape " + t.shape().to_string() + " for " + std::to_string(t.windows()) +
                " windows; the forward pass needs " + expected.to_string() + " for windows " +
                std::to_string(batch.first_window) + ".." + std::to_string(batch.first_window + batch.batch - 1));
}
}  // namespace

template <typename T>
void ModRoutingSource<T>::record(const ModConfig& c, CoefficientTensor& sink, int layer, const BatchPosition& batch, int K,
                                 const T*, T* scores, int32_t* rows, T*) {
  check_fits(sink, c, batch, "selection record");
  const int r = c.routed_index(layer), Tn = batch.tokens;
  for (int b = 0; b < batch.batch; ++b) {
    const int w = batch.first_window + b;
    for (int t = 0; t < Tn; ++t) {
      const T s = scores[int64_t(b) * Tn + t];
      sink.at(w, r, t) = static_cast<float>(T(1) / (T(1) + std::exp(-s)));
      sink.discrete_at(w, r, t, 0) = 0;
    }
    for (int i = 0; i < K; ++i) sink.discrete_at(w, r, rows[int64_t(b) * K + i] - b * Tn, 0) = 1;
  }
}

template <typename T>
void ModRoutingSource<T>::replay(const ModConfig& config, const CoefficientTensor& record, int layer, const BatchPosition& batch,
                                 int K, const T*, T*, int32_t* rows, T* weights) {
  check_fits(record, config, batch, "replayed selection record");
  const int r = config.routed_index(layer), Tn = batch.tokens;
  for (int b = 0; b < batch.batch; ++b) {
    const int w = batch.first_window + b;
    int count = 0;
    for (int t = 0; t < Tn; ++t) {
      const int32_t sel = record.discrete_at(w, r, t, 0);
      if (sel != 0 && sel != 1)
        throw Error("replayed selection, window " + std::to_string(w) + ", layer " + std::to_string(layer) + ", token " +
                    std::to_string(t) + ": selected is " + std::to_string(sel) + ", expected 0 or 1");
      if (sel == 1) {
        if (count < K) {
          rows[int64_t(b) * K + count] = int32_t(int64_t(b) * Tn + t);
          weights[int64_t(b) * K + count] = static_cast<T>(record.at(w, r, t));
        }
        ++count;
      }
    }
    if (count != K)
      throw Error("replayed selection, window " + std::to_string(w) + ", layer " + std::to_string(layer) + ": " +
                  std::to_string(count) + " tokens selected, expected exactly K = " + std::to_string(K));
  }
}

template class ModLiveRouting<float>;
template class ModLiveRouting<double>;
template class ModRoutingSource<float>;
template class ModRoutingSource<double>;

}  // namespace fca
