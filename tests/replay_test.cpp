// Exact replay: recording the coefficients of a live run and feeding them back through a replayed
// source gives bitwise-identical logits and NLL, with zero controller evaluations; featuregate's
// controller inputs are not even computed during replay.
#include <gtest/gtest.h>

#include <cstring>

#include "core/rng.h"
#include "models/gated/forward.h"
#include "test_util.h"

namespace fca {
namespace {

void check_exact_replay(GateKind kind) {
  GatedConfig config = testing::tiny_config(kind);
  GatedModel<float> model = GatedModel<float>::initialized(config, 11);
  Rng rng(5);
  // Give the gates something to do: random gate parameters, so g varies by layer (and token).
  for (const auto& s : model.layout())
    if (s.name.rfind("gate.", 0) == 0)
      for (size_t i = 0; i < s.numel; ++i) model.data()[s.offset + i] = float(rng.normal());
  const int W = 5, B = 2, T = config.seq_len;  // 5 windows in batches of 2 (the last batch has 1)
  std::vector<int32_t> tokens(size_t(W) * T), targets(size_t(W) * T);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(rng.below(256)), targets[i] = int32_t(rng.below(256));

  CoefficientTensor recorded(W, gated_coefficient_shape(config, T));
  RecordingCoefficients<float> recording(model, recorded);
  ReplayedCoefficients<float> replayed(recorded);
  GatedRunState<float> live_rs(config, B, T, false), replay_rs(config, B, T, false);
  for (int w0 = 0; w0 < W; w0 += B) {
    const int n = std::min(B, W - w0);
    gated_forward(model, live_rs, tokens.data() + w0 * T, n, T, recording, w0);
    const double live_loss = gated_loss(live_rs, targets.data() + w0 * T, nullptr);
    gated_forward(model, replay_rs, tokens.data() + w0 * T, n, T, replayed, w0);
    const double replay_loss = gated_loss(replay_rs, targets.data() + w0 * T, nullptr);
    EXPECT_EQ(0, std::memcmp(live_rs.logits, replay_rs.logits, sizeof(float) * size_t(n) * T * kByteVocab))
        << gate_kind_name(kind) << ": replayed logits differ from the live run, windows " << w0;
    EXPECT_EQ(live_loss, replay_loss);
  }
  // Counted by the controller code: 3 batches x L layers, twice for featuregate (features, gate).
  EXPECT_EQ(replay_rs.controller_evaluations, 0);
  EXPECT_EQ(live_rs.controller_evaluations, (kind == GateKind::featuregate ? 2 : 1) * 3 * config.n_layer);
  EXPECT_FALSE(replayed.evaluates_controller());
}

TEST(ExactReplay, Dense) { check_exact_replay(GateKind::dense); }
TEST(ExactReplay, Fixed) { check_exact_replay(GateKind::fixed); }
TEST(ExactReplay, Uniform) { check_exact_replay(GateKind::uniform); }
TEST(ExactReplay, LayerStatic) { check_exact_replay(GateKind::layerstatic); }
TEST(ExactReplay, FeatureGate) { check_exact_replay(GateKind::featuregate); }

TEST(ExactReplay, ReplayedCoefficientsAreUsed) {
  // Replaying different coefficients must change the output: replay is not a no-op.
  GatedConfig config = testing::tiny_config(GateKind::featuregate);
  GatedModel<float> model = GatedModel<float>::initialized(config, 3);
  const int T = config.seq_len;
  std::vector<int32_t> tokens(size_t(T), 65);
  CoefficientTensor ones(1, gated_coefficient_shape(config, T)), halves(1, gated_coefficient_shape(config, T));
  std::fill(ones.values().begin(), ones.values().end(), 1.0f);
  std::fill(halves.values().begin(), halves.values().end(), 0.5f);
  ReplayedCoefficients<float> a(ones), b(halves);
  GatedRunState<float> ra(config, 1, T, false), rb(config, 1, T, false);
  gated_forward(model, ra, tokens.data(), 1, T, a);
  gated_forward(model, rb, tokens.data(), 1, T, b);
  EXPECT_NE(0, std::memcmp(ra.logits, rb.logits, sizeof(float) * T * kByteVocab));
  EXPECT_EQ(rb.gates[0], 0.5f);
}

TEST(ExactReplay, ShapeMismatchIsAnError) {
  GatedConfig config = testing::tiny_config(GateKind::uniform);
  GatedModel<float> model = GatedModel<float>::initialized(config, 3);
  CoefficientTensor too_short(1, gated_coefficient_shape(config, 4));
  ReplayedCoefficients<float> source(too_short);
  GatedRunState<float> rs(config, 1, config.seq_len, false);
  std::vector<int32_t> tokens(size_t(config.seq_len), 1);
  EXPECT_THROW(gated_forward(model, rs, tokens.data(), 1, config.seq_len, source), Error);
}

}  // namespace
}  // namespace fca
