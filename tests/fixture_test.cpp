// The gated model against the golden fixture written by an independent PyTorch implementation of
// docs/model.md (tests/fixtures/make_gated_fixture.py): logits, gates, features, hidden states, loss,
// per-window NLL and every parameter gradient, for each gate kind, in float32.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/safetensors.h"
#include "core/threads.h"
#include "models/gated/forward.h"
#include "test_util.h"

namespace fca {
namespace {

using testing::expect_close;

const std::string kFixture = std::string(FCA_SOURCE_DIR) + "/tests/fixtures/gated_tiny.safetensors";

void check_gate_kind(const std::string& G) {
  set_threads(2);
  SafetensorsReader fx(kFixture);
  const GatedConfig config = GatedConfig::from_json(fx.metadata().at(G + ".config"), kFixture);
  GatedModel<float> model(config);
  for (const auto& s : model.layout())
    fx.read_into<float>(G + ".param." + s.name, s.shape, model.data() + s.offset);
  const auto tokens = fx.read_as_double(G + ".tokens");
  const int B = int(fx.get(G + ".tokens").shape[0]), T = config.seq_len, N = B * T;
  std::vector<int32_t> inputs(static_cast<size_t>(N)), targets(static_cast<size_t>(N));
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      inputs[size_t(b * T + t)] = int32_t(tokens[size_t(b * (T + 1) + t)]);
      targets[size_t(b * T + t)] = int32_t(tokens[size_t(b * (T + 1) + t + 1)]);
    }
  GatedRunState<float> rs(config, B, T, true);
  LiveCoefficients<float> live(model);
  gated_forward(model, rs, inputs.data(), B, T, live);
  std::vector<double> window_nll(static_cast<size_t>(B));
  const double loss = gated_loss(rs, targets.data(), window_nll.data());

  expect_close(G + ".logits", rs.logits, fx.read_as_double(G + ".logits"));
  expect_close(G + ".gates", rs.gates, fx.read_as_double(G + ".gates"));
  for (int l = 0; l <= config.n_layer; ++l)
    expect_close(G + ".hidden." + std::to_string(l), rs.hidden[size_t(l)],
                 fx.read_as_double(G + ".hidden." + std::to_string(l)));
  if (config.gate == GateKind::featuregate)
    expect_close(G + ".features", rs.features, fx.read_as_double(G + ".features"));
  const std::vector<float> ours_loss{float(loss)}, ours_nll{float(window_nll[0]), float(window_nll[1])};
  expect_close(G + ".loss", ours_loss.data(), fx.read_as_double(G + ".loss"));
  expect_close(G + ".window_nll", ours_nll.data(), fx.read_as_double(G + ".window_nll"));

  GatedModel<float> grads(config);
  gated_backward(model, rs, grads, 1.0f / float(N));
  for (const auto& s : model.layout())
    expect_close(G + ".grad." + s.name, grads.data() + s.offset, fx.read_as_double(G + ".grad." + s.name));
}

TEST(GoldenFixture, Dense) { check_gate_kind("dense"); }
TEST(GoldenFixture, Fixed) { check_gate_kind("fixed"); }
TEST(GoldenFixture, Uniform) { check_gate_kind("uniform"); }
TEST(GoldenFixture, LayerStatic) { check_gate_kind("layerstatic"); }
TEST(GoldenFixture, FeatureGate) { check_gate_kind("featuregate"); }

}  // namespace
}  // namespace fca
