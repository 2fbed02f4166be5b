// Every MUDD backward (QK RMSNorm, partial rotary, erf GELU, per-stream LayerNorms, parallel
// residual, DA generators, signed mixing, untied head) through the whole model in double
// precision against central finite differences, on a sample of every parameter tensor.
#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"
#include "core/threads.h"
#include "models/mudd/forward.h"
#include "test_util.h"

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
  testing::expect_gradients_match_finite_differences(
      model.layout(), [&](const TensorSlot& slot) { return model.data() + slot.offset; },
      [&](const TensorSlot& slot) -> const double* { return grads.data() + slot.offset; }, loss_at, 5);
}

}  // namespace
}  // namespace fca
