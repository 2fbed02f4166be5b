// Every backward pass against central finite differences in double precision: the whole model's
// gradient for every gate kind (gate parameters included), which exercises every kernel's backward.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "models/gated/forward.h"

namespace fca {
namespace {

// featuregate's features are constants for the gradient (stop-gradient). Finite differences must
// hold them fixed too: this source evaluates the controller of the perturbed model on the features
// recorded from the unperturbed pass.
class FrozenFeatureCoefficients : public CoefficientSource<double> {
 public:
  FrozenFeatureCoefficients(const GatedModel<double>& model, const std::vector<double>& phi)
      : controller_(model.config(), model.weights()), phi_(phi) {}
  // Declared as not running the controller, so that the pass computes no features of its own.
  bool evaluates_controller() const override { return false; }
  void coefficients(int layer, const BatchPosition& batch, const double*, double* g) override {
    controller_.evaluate(layer, batch, phi_.data() + layer * int64_t(batch.batch) * batch.tokens * 4, g);
  }

 private:
  GateController<double> controller_;
  const std::vector<double>& phi_;
};

GatedModel<double> perturbed_model(const GatedConfig& config, uint64_t seed) {
  GatedModel<double> m = GatedModel<double>::initialized(config, seed);
  Rng rng(seed + 1);
  // Move every parameter off its initial value (LayerNorm weights off 1, biases and gates off 0) so
  // that no gradient term vanishes by symmetry.
  for (size_t i = 0; i < m.buffer_size(); ++i) m.data()[i] += 0.3 * rng.normal();
  return m;
}

void check_gradients(GateKind kind) {
  GatedConfig config;
  config.n_layer = 2;
  config.d_model = 8;
  config.n_head = 2;
  config.seq_len = 6;
  config.gate = kind;
  const int B = 2, Tn = 5, N = B * Tn;
  GatedModel<double> model = perturbed_model(config, 7);
  std::vector<int32_t> tokens(N), targets(N);
  Rng rng(3);
  for (int i = 0; i < N; ++i) {
    tokens[i] = int32_t(rng.below(256));
    targets[i] = int32_t(rng.below(256));
  }
  tokens[1] = tokens[2] = tokens[3];  // repeated bytes: peaky attention in window 0

  GatedRunState<double> rs(config, B, Tn, true);
  LiveCoefficients<double> live(model);
  gated_forward(model, rs, tokens.data(), B, Tn, live);
  gated_loss(rs, targets.data(), nullptr);
  std::vector<double> phi(rs.features, rs.features + (kind == GateKind::featuregate ? config.n_layer * N * 4 : 0));
  GatedModel<double> grads(config);
  gated_backward(model, rs, grads, 1.0 / N);

  GatedRunState<double> probe(config, B, Tn, false);
  auto loss_at = [&](GatedModel<double>& m) {
    FrozenFeatureCoefficients frozen(m, phi);
    LiveCoefficients<double> plain(m);
    CoefficientSource<double>& source = kind == GateKind::featuregate ? static_cast<CoefficientSource<double>&>(frozen)
                                                                      : static_cast<CoefficientSource<double>&>(plain);
    gated_forward(m, probe, tokens.data(), B, Tn, source);
    return gated_loss(probe, targets.data(), nullptr);
  };
  // Step 1e-5: truncation error ~ h^2 |f'''| ~ 1e-10, rounding ~ 1e-16 / h ~ 1e-11; the tolerance
  // 1e-7 + 1e-5 |g| leaves two orders of margin and still catches any wrong term (those are O(|g|)).
  const double h = 1e-5;
  for (const auto& slot : model.layout()) {
    double worst = 0;
    for (size_t i = 0; i < slot.numel; ++i) {
      double& p = model.data()[slot.offset + i];
      const double saved = p;
      p = saved + h;
      const double up = loss_at(model);
      p = saved - h;
      const double down = loss_at(model);
      p = saved;
      const double numeric = (up - down) / (2 * h);
      const double analytic = grads.data()[slot.offset + i];
      const double err = std::abs(numeric - analytic);
      worst = std::max(worst, err);
      ASSERT_LE(err, 1e-7 + 1e-5 * std::abs(numeric))
          << gate_kind_name(kind) << " " << slot.name << "[" << i << "]: analytic " << analytic << " numeric "
          << numeric;
    }
  }
}

TEST(GradCheck, Dense) { check_gradients(GateKind::dense); }
TEST(GradCheck, Fixed) { check_gradients(GateKind::fixed); }
TEST(GradCheck, Uniform) { check_gradients(GateKind::uniform); }
TEST(GradCheck, LayerStatic) { check_gradients(GateKind::layerstatic); }
TEST(GradCheck, FeatureGate) { check_gradients(GateKind::featuregate); }

}  // namespace
}  // namespace fca
