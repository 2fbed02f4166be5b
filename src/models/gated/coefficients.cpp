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

CoefficientShape gated_coefficient_shape(const GatedConfig& config, int tokens) {
  return CoefficientShape{config.n_layer, tokens, 1, 1};
}

template class GateController<float>;
template class GateController<double>;
template class LiveCoefficients<float>;
template class LiveCoefficients<double>;

}  // namespace fca
