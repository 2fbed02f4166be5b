#include "models/gated/coefficients.h"

#include <cmath>

#include "core/error.h"
#include "core/phase_timer.h"
#include "core/exec_counters.h"

namespace fca {
namespace {
constexpr int64_t kSigmoidFlops = 4;  // negate, exp, add, divide
template <typename T>
T sigmoid(T z) {
  return T(1) / (T(1) + std::exp(-z));
}
}  // namespace

template <typename T>
void GateController<T>::evaluate(int layer, const BatchPosition& batch, const T* phi, T* g) const {
  const PhaseScope phase_scope(Phase::controller);
  count_controller_evaluation(batch);
  const int64_t N = int64_t(batch.batch) * batch.tokens;
  switch (config_.gate) {
    case GateKind::dense:
      for (int64_t n = 0; n < N; ++n) g[n] = T(1);
      return;
    case GateKind::fixed:
      for (int64_t n = 0; n < N; ++n) g[n] = static_cast<T>(config_.gate_value);
      return;
    case GateKind::uniform: {
      count_controller_flops(kSigmoidFlops);
      const T v = sigmoid(weights_.gate_logit[0]);
      for (int64_t n = 0; n < N; ++n) g[n] = v;
      return;
    }
    case GateKind::layerstatic: {
      count_controller_flops(kSigmoidFlops);
      const T v = sigmoid(weights_.gate_logit[layer]);
      for (int64_t n = 0; n < N; ++n) g[n] = v;
      return;
    }
    case GateKind::featuregate: {
      const T* w = weights_.gate_weight + 4 * layer;
      const T b = weights_.gate_bias[layer];
      count_controller_flops(N * (8 + kSigmoidFlops));  // b + w . phi: 4 multiplies, 4 adds
      for (int64_t n = 0; n < N; ++n) {
        const T* f = phi + 4 * n;
        g[n] = sigmoid(b + w[0] * f[0] + w[1] * f[1] + w[2] * f[2] + w[3] * f[3]);
      }
      return;
    }
  }
}

template <typename T>
void LiveCoefficients<T>::coefficients(int layer, const BatchPosition& batch, const T* phi, T* g) {
  controller_.evaluate(layer, batch, phi, g);
}

template <typename T>
RecordingCoefficients<T>::RecordingCoefficients(const GatedModel<T>& model, CoefficientTensor& sink)
    : LiveCoefficients<T>(model), sink_(sink) {
  const auto& s = sink.shape();
  if (s.layers != model.config().n_layer || s.streams != 1 || s.sources != 1)
    throw Error("recording sink has shape " + s.to_string() + ", expected [layer " +
                std::to_string(model.config().n_layer) + ", token T, stream 1, source 1]");
}

template <typename T>
void RecordingCoefficients<T>::coefficients(int layer, const BatchPosition& batch, const T* phi, T* g) {
  LiveCoefficients<T>::coefficients(layer, batch, phi, g);
  if (batch.first_window + batch.batch > sink_.windows() || batch.tokens != sink_.shape().tokens)
    throw Error("recording sink holds " + std::to_string(sink_.windows()) + " windows of " +
                std::to_string(sink_.shape().tokens) + " tokens; batch asks for windows " +
                std::to_string(batch.first_window) + ".." + std::to_string(batch.first_window + batch.batch - 1) +
                " of " + std::to_string(batch.tokens));
  for (int b = 0; b < batch.batch; ++b)
    for (int t = 0; t < batch.tokens; ++t)
      sink_.at(batch.first_window + b, layer, t) = static_cast<float>(g[int64_t(b) * batch.tokens + t]);
}

template <typename T>
void ReplayedCoefficients<T>::coefficients(int layer, const BatchPosition& batch, const T*, T* g) {
  const auto& s = coefficients_.shape();
  if (batch.first_window + batch.batch > coefficients_.windows() || batch.tokens != s.tokens ||
      layer >= s.layers || s.streams != 1 || s.sources != 1)
    throw Error("replayed coefficients have shape " + s.to_string() + " for " +
                std::to_string(coefficients_.windows()) + " windows; the forward pass asks for layer " +
                std::to_string(layer) + " of windows " + std::to_string(batch.first_window) + ".." +
                std::to_string(batch.first_window + batch.batch - 1) + " with " + std::to_string(batch.tokens) +
                " tokens");
  for (int b = 0; b < batch.batch; ++b)
    for (int t = 0; t < batch.tokens; ++t)
      g[int64_t(b) * batch.tokens + t] = static_cast<T>(coefficients_.at(batch.first_window + b, layer, t));
}

CoefficientShape gated_coefficient_shape(const GatedConfig& config, int tokens) {
  return CoefficientShape{config.n_layer, tokens, 1, 1};
}

template class GateController<float>;
template class GateController<double>;
template class LiveCoefficients<float>;
template class LiveCoefficients<double>;
template class RecordingCoefficients<float>;
template class RecordingCoefficients<double>;
template class ReplayedCoefficients<float>;
template class ReplayedCoefficients<double>;

}  // namespace fca
