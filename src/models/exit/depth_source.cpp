#include "models/exit/depth_source.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "core/exec_counters.h"
#include "core/phase_timer.h"
#include "models/routing_record.h"
#include "ops/layernorm.h"

namespace fca {

CoefficientShape exit_record_shape(const ExitConfig& c, int tokens) {
  CoefficientShape s{c.exit_points(), tokens, 1, 1};
  s.kind = RecordKind::exit_depth;
  s.slots = 1;
  s.min_exit = c.min_exit;
  return s;
}

template <typename T>
void ExitLiveDepth<T>::score(int k, const BatchPosition& batch, int n, const T* x, const ExitClassifierScratch<T>& scratch) {
  const PhaseScope phase_scope(Phase::controller);
  const ExitConfig& c = model_.config();
  const int D = c.d_model;
  const auto& w = model_.weights();
  // docs/exit.md, "FLOPs": LayerNorm(ln_f) 7D + 3 and the score 2D per row.
  count_controller_flops(int64_t(n) * (9 * int64_t(D) + 3));
  layernorm_forward(scratch.z, scratch.mean, scratch.rstd, x, w.ln_f_weight, w.ln_f_bias, n, D);
  const T* wk = w.exit_weight + int64_t(k - 1) * D;
  const T bk = w.exit_bias[k - 1];
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; ++i) {
    const T* z = scratch.z + int64_t(i) * D;
    T acc = 0;
    for (int d = 0; d < D; ++d) acc += wk[d] * z[d];
    scratch.scores[i] = acc + bk;
  }
  count_controller_evaluation(batch);
}

template <typename T>
void ExitLiveDepth<T>::route(int k, const BatchPosition& batch, int n, const int32_t*, const T* x,
                             const ExitClassifierScratch<T>& scratch, uint8_t* exits) {
  score(k, batch, n, x, scratch);
  for (int i = 0; i < n; ++i) exits[i] = scratch.scores[i] >= tau_ ? 1 : 0;
}

namespace {
void check_fits(const CoefficientTensor& t, const ExitConfig& c, const BatchPosition& batch, const char* what) {
  const CoefficientShape expected = exit_record_shape(c, batch.tokens);
  if (!(t.shape() == expected) || batch.first_window + batch.batch > t.windows())
    throw Error(std::string(what) + " has shape " + t.shape().to_string() + " for " + std::to_string(t.windows()) +
                " windows; the forward pass needs " + expected.to_string() + " for windows " +
                std::to_string(batch.first_window) + ".." + std::to_string(batch.first_window + batch.batch - 1));
}
}  // namespace

template <typename T>
void ExitDepthSource<T>::record_begin(const ExitConfig& c, CoefficientTensor& sink, const BatchPosition& batch) {
  check_fits(sink, c, batch, "exit record");
  // The absorbing fill: below m the token may not stop (c 1, q 0); from m on, until a decision
  // overwrites it, the token has already stopped (c 0, q 1).
  for (int b = 0; b < batch.batch; ++b)
    for (int k = 1; k <= c.exit_points(); ++k)
      for (int t = 0; t < batch.tokens; ++t) {
        const int w = batch.first_window + b;
        sink.at(w, k - 1, t) = k < c.min_exit ? 0.0f : 1.0f;
        sink.discrete_at(w, k - 1, t, 0) = k < c.min_exit ? 1 : 0;
      }
}

template <typename T>
void ExitDepthSource<T>::record(const ExitConfig&, CoefficientTensor& sink, int k, const BatchPosition& batch, int n,
                                const int32_t* rows, const T*, const ExitClassifierScratch<T>& scratch, uint8_t* exits) {
  const T* s = scratch.scores;
  const int Tn = batch.tokens;
  for (int i = 0; i < n; ++i) {
    const int w = batch.first_window + rows[i] / Tn, t = rows[i] % Tn;
    // q = sigmoid(s) in double, rounded once: only the record reads it (the decision is s >= tau).
    sink.at(w, k - 1, t) = static_cast<float>(1.0 / (1.0 + std::exp(-double(s[i]))));
    sink.discrete_at(w, k - 1, t, 0) = exits[i] ? 0 : 1;
  }
}

template <typename T>
void ExitDepthSource<T>::replay_begin(const ExitConfig& c, const CoefficientTensor& record, const BatchPosition& batch) {
  check_fits(record, c, batch, "replayed exit record");
  for (int b = 0; b < batch.batch; ++b) {
    const int w = batch.first_window + b;
    check_exit_record(record.window_discrete(w), record.shape(), "replayed exit record, window " + std::to_string(w));
  }
}

template <typename T>
void ExitDepthSource<T>::replay(const ExitConfig&, const CoefficientTensor& record, int k, const BatchPosition& batch, int n,
                                const int32_t* rows, const T*, const ExitClassifierScratch<T>&, uint8_t* exits) {
  const int Tn = batch.tokens;
  for (int i = 0; i < n; ++i) {
    const int w = batch.first_window + rows[i] / Tn, t = rows[i] % Tn;
    exits[i] = record.discrete_at(w, k - 1, t, 0) == 0 ? 1 : 0;
  }
}

template class ExitLiveDepth<float>;
template class ExitLiveDepth<double>;
template class ExitDepthSource<float>;
template class ExitDepthSource<double>;

}  // namespace fca
