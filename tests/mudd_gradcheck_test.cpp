// Every MUDD backward (QK RMSNorm, partial rotary, erf GELU, per-stream LayerNorms, parallel
// residual, DA generators, signed mixing, untied head) through the whole model in double
// precision against central finite differences, on a sample of every parameter tensor.
#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"
#include "core/threads.h"
#include "models/mudd/forward.h"

namespace fca {
namespace {

MuddConfig tiny_mudd_config() {
  MuddConfig c;
  c.n_layer = 3;
  c.dim = 8;
  c.n_head = 2;
  c.head_dim = 4;
  c.vocab_size = 11;
  c.block_size = 8;
  c.intermediate_size = 256;  // FFN widths 128, 256, 384 (multiples of 128 by the formula)
  c.rotary_pct = 0.5;         // 2 rotary dims per head
  return c;
}

TEST(MuddGradCheck, WholeModelAgainstFiniteDifferences) {
  set_threads(1);  // thousands of tiny passes: threading overhead would dominate
  const MuddConfig c = tiny_mudd_config();
  MuddModel<double> model(c);
  Rng rng(17);
  for (const auto& s : model.layout()) {
    const bool norm_scale = s.name.find("norm") != std::string::npos && s.name.ends_with("weight");
    for (size_t i = 0; i < s.numel; ++i) model.data()[s.offset + i] = (norm_scale ? 1.0 : 0.0) + 0.4 * rng.normal();
  }
  const int B = 2, Tn = 5, N = B * Tn;
  std::vector<int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; ++i) tokens[size_t(i)] = int32_t(rng.below(11)), targets[size_t(i)] = int32_t(rng.below(11));

  MuddRunState<double> rs(c, B, Tn, true);
  MuddLiveCoefficients<double> live(model);
  mudd_forward(model, rs, tokens.data(), B, Tn, live);
  mudd_loss(rs, targets.data(), nullptr);
  MuddModel<double> grads(c);
  mudd_backward(model, rs, grads, 1.0 / N);

  MuddRunState<double> probe(c, B, Tn, false);
  auto loss_at = [&]() {
    MuddLiveCoefficients<double> source(model);
    mudd_forward(model, probe, tokens.data(), B, Tn, source);
    return mudd_loss(probe, targets.data(), nullptr);
  };
  // h = 1e-5: truncation ~h^2 |f'''| ~ 1e-10, rounding ~1e-16 / h ~ 1e-11; tolerance 1e-7 + 1e-5 |g|.
  const double h = 1e-5;
  Rng pick(5);
  for (const auto& slot : model.layout()) {
    // Up to 12 elements per tensor (all of small ones), chosen at random: every tensor is checked.
    const size_t samples = std::min<size_t>(slot.numel, 12);
    for (size_t k = 0; k < samples; ++k) {
      const size_t i = slot.numel <= 12 ? k : size_t(pick.below(slot.numel));
      double& p = model.data()[slot.offset + i];
      const double saved = p;
      p = saved + h;
      const double up = loss_at();
      p = saved - h;
      const double down = loss_at();
      p = saved;
      const double numeric = (up - down) / (2 * h), analytic = grads.data()[slot.offset + i];
      ASSERT_LE(std::abs(numeric - analytic), 1e-7 + 1e-5 * std::abs(numeric))
          << slot.name << "[" << i << "]: analytic " << analytic << " numeric " << numeric;
    }
  }
}

}  // namespace
}  // namespace fca
