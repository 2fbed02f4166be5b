// Where the gated model's coefficients g_l [B, T'] come from during a forward pass.
//
// - LiveCoefficients: the controller computes g from its parameters (and, for featuregate, from the
//   layer's attention statistics and update norm), counting every evaluation.
// - RecordingCoefficients: live, and every g is also written into a CoefficientTensor.
// - ReplayedCoefficients: g is read from a CoefficientTensor. It holds no controller at all, so the
//   controller's code cannot be reached, and it asks the forward pass not to compute the
//   controller's inputs (featuregate statistics).
#pragma once
#include <atomic>
#include <cstdint>
#include <tuple>

#include "core/exec_counters.h"
#include "models/base/batch_position.h"
#include "models/base/controller_source.h"
#include "models/base/recorded_source.h"
#include "models/coefficient_tensor.h"
#include "models/gated/model.h"

namespace fca {

// The controller: the gate function of docs/model.md, reading the gate parameters of a model.
template <typename T>
class GateController {
 public:
  GateController(const GatedConfig& config, const GatedWeights<T>& weights) : config_(config), weights_(weights) {}
  // Whether evaluate() reads the features phi (featuregate).
  bool needs_features() const { return config_.gate == GateKind::featuregate; }
  // g[n] for layer `layer`, rows n < batch.batch * batch.tokens; phi [N, 4] (read only by featuregate).
  void evaluate(int layer, const BatchPosition& batch, const T* phi, T* g) const;

 private:
  GatedConfig config_;
  GatedWeights<T> weights_;
};

template <typename T>
class CoefficientSource : public ControllerSource {
 public:
  using Value = T;
  using Inputs = std::tuple<const T*>;  // phi
  // Writes g [batch * tokens] for `layer`. phi [batch * tokens, 4] or null.
  virtual void coefficients(int layer, const BatchPosition& batch, const T* phi, T* g) = 0;
};

template <typename T>
class LiveCoefficients : public CoefficientSource<T> {
 public:
  explicit LiveCoefficients(const GatedModel<T>& model) : controller_(model.config(), model.weights()) {}
  bool evaluates_controller() const override { return true; }
  void coefficients(int layer, const BatchPosition& batch, const T* phi, T* g) override;

 private:
  GateController<T> controller_;
};

// Recording and replay are the shared sources of models/base/recorded_source.h over the record's
// one gate per (layer, token).
template <typename T>
using RecordingCoefficients = RecordingSource<LiveCoefficients<T>>;
template <typename T>
using ReplayedCoefficients = ReplayedSource<CoefficientSource<T>>;

// The gated family's coefficient shape for windows of `tokens` tokens: [L, tokens, 1, 1].
CoefficientShape gated_coefficient_shape(const GatedConfig& config, int tokens);

}  // namespace fca
