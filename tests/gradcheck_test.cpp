// Every backward pass of the gated family against central finite differences in double precision,
// on every element of every tensor (the conformance suite samples 12 per tensor), for every gate
// kind (gate parameters included): the whole model's gradient, which exercises every kernel's
// backward. The objective and its gradient are the family's gradient probe (train/gradient_probe.h;
// featuregate's features held at the backward pass's values, as its stop-gradient has them).
#include <gtest/gtest.h>

#include <cmath>

#include "core/threads.h"
#include "models/gated/train/trainable.h"

namespace fca {
namespace {

void check_gradients(GateKind kind) {
  set_threads(1);  // thousands of tiny passes: threading overhead would dominate
  GradientProbe probe = gated_gradient_probe({2, 8, 2, 6}, {{"gate", gate_kind_name(kind)}, {"gate_value", 0.6}}, 7);
  probe.backward();
  // Step 1e-5: truncation error ~ h^2 |f'''| ~ 1e-10, rounding ~ 1e-16 / h ~ 1e-11; the tolerance
  // 1e-7 + 1e-5 |g| leaves two orders of margin and still catches any wrong term (those are O(|g|)).
  const double h = 1e-5;
  for (const auto& slot : probe.layout)
    for (size_t i = 0; i < slot.numel; ++i) {
      double& p = probe.parameter(slot)[i];
      const double saved = p;
      p = saved + h;
      const double up = probe.objective();
      p = saved - h;
      const double down = probe.objective();
      p = saved;
      const double numeric = (up - down) / (2 * h), analytic = probe.gradient(slot)[i];
      ASSERT_LE(std::abs(numeric - analytic), 1e-7 + 1e-5 * std::abs(numeric))
          << gate_kind_name(kind) << " " << slot.name << "[" << i << "]: analytic " << analytic << " numeric " << numeric;
    }
}

TEST(GradCheck, Dense) { check_gradients(GateKind::dense); }
TEST(GradCheck, Fixed) { check_gradients(GateKind::fixed); }
TEST(GradCheck, Uniform) { check_gradients(GateKind::uniform); }
TEST(GradCheck, LayerStatic) { check_gradients(GateKind::layerstatic); }
TEST(GradCheck, FeatureGate) { check_gradients(GateKind::featuregate); }

}  // namespace
}  // namespace fca
