// The MoE and MoD models against the golden fixture of an independent PyTorch implementation of the
// docs/routed.md (tests/fixtures/make_routed_fixture.py): logits, hidden states,
// router probabilities and scores, the routing itself, losses with the auxiliary term, per-window
// NLL and every parameter gradient, in float32. Tolerances: expect_close (test_util.cpp); the
// generator measured float32 PyTorch within 1.7e-6 relative of the float64 reference here, the same
// level as the gated fixture, and its routing margins (>= 3e-3) keep float32 on the same experts.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/safetensors.h"
#include "core/threads.h"
#include "models/mod/forward.h"
#include "models/moe/forward.h"
#include "test_util.h"

namespace fca {
namespace {

using testing::expect_close;

const std::string kFixture = std::string(FCA_SOURCE_DIR) + "/tests/fixtures/routed_tiny.safetensors";

struct Windows {
  std::vector<int32_t> inputs, targets;
  int B = 0;
};

Windows read_windows(const SafetensorsReader& fx, const std::string& P, int T) {
  Windows w;
  const auto tokens = fx.read_as_double(P + ".tokens");
  w.B = int(fx.get(P + ".tokens").shape[0]);
  for (int b = 0; b < w.B; ++b)
    for (int t = 0; t < T; ++t) {
      w.inputs.push_back(int32_t(tokens[size_t(b * (T + 1) + t)]));
      w.targets.push_back(int32_t(tokens[size_t(b * (T + 1) + t + 1)]));
    }
  return w;
}

void check_moe(const std::string& P) {
  set_threads(2);
  SafetensorsReader fx(kFixture);
  const MoeConfig config = MoeConfig::from_json(fx.metadata().at(P + ".config"), kFixture);
  MoeModel<float> model(config);
  for (const auto& s : model.layout()) fx.read_into<float>(P + ".param." + s.name, s.shape, model.data() + s.offset);
  const int T = config.seq_len, L = config.n_layer, E = config.n_expert, k = config.top_k;
  const Windows w = read_windows(fx, P, T);
  const int N = w.B * T;
  MoeRunState<float> rs(config, w.B, T, true);
  MoeLiveRouting<float> live(model);
  moe_forward(model, rs, w.inputs.data(), w.B, T, live);
  std::vector<double> window_nll(size_t(w.B));
  const double ce = moe_loss(rs, w.targets.data(), window_nll.data());
  const double objective = moe_objective(rs, ce);

  expect_close(P + ".logits", rs.logits, fx.read_as_double(P + ".logits"));
  for (int l = 0; l <= L; ++l)
    expect_close(P + ".hidden." + std::to_string(l), rs.hidden[size_t(l)], fx.read_as_double(P + ".hidden." + std::to_string(l)));
  const auto probs = fx.read_as_double(P + ".router_probs"), experts = fx.read_as_double(P + ".experts"),
             weights = fx.read_as_double(P + ".weights"), aux = fx.read_as_double(P + ".aux");
  for (int l = 0; l < L; ++l) {
    const auto& s = rs.layers[size_t(l)];
    expect_close(P + ".router_probs[" + std::to_string(l) + "]", s.probs,
                 std::vector<double>(probs.begin() + l * N * E, probs.begin() + (l + 1) * N * E));
    expect_close(P + ".weights[" + std::to_string(l) + "]", s.weights,
                 std::vector<double>(weights.begin() + l * N * k, weights.begin() + (l + 1) * N * k));
    for (int i = 0; i < N * k; ++i) ASSERT_EQ(s.experts[i], int32_t(experts[size_t(l * N * k + i)])) << P << " layer " << l << " entry " << i;
    EXPECT_NEAR(s.aux, aux[size_t(l)], 1e-6 * std::abs(aux[size_t(l)])) << P << ".aux[" << l << "]";
  }
  const std::vector<float> ours_ce{float(ce)}, ours_loss{float(objective)};
  expect_close(P + ".ce_loss", ours_ce.data(), fx.read_as_double(P + ".ce_loss"));
  expect_close(P + ".loss", ours_loss.data(), fx.read_as_double(P + ".loss"));
  const std::vector<float> ours_nll(window_nll.begin(), window_nll.end());
  expect_close(P + ".window_nll", ours_nll.data(), fx.read_as_double(P + ".window_nll"));

  MoeModel<float> grads(config);
  moe_backward(model, rs, grads, 1.0f / float(N));
  for (const auto& s : model.layout())
    expect_close(P + ".grad." + s.name, grads.data() + s.offset, fx.read_as_double(P + ".grad." + s.name));
}

TEST(RoutedFixture, MoeTop2) { check_moe("moe"); }
TEST(RoutedFixture, MoeTop1) { check_moe("moe_k1"); }

TEST(RoutedFixture, MixtureOfDepths) {
  set_threads(2);
  SafetensorsReader fx(kFixture);
  const ModConfig config = ModConfig::from_json(fx.metadata().at("mod.config"), kFixture);
  ModModel<float> model(config);
  for (const auto& s : model.layout()) fx.read_into<float>("mod.param." + s.name, s.shape, model.data() + s.offset);
  const int T = config.seq_len, L = config.n_layer;
  const Windows w = read_windows(fx, "mod", T);
  const int N = w.B * T, K = config.selected_tokens(T);
  ModRunState<float> rs(config, w.B, T, true);
  ModLiveRouting<float> live(model);
  mod_forward(model, rs, w.inputs.data(), w.B, T, live);
  std::vector<double> window_nll(size_t(w.B));
  const double loss = mod_loss(rs, w.targets.data(), window_nll.data());
  expect_close("mod.logits", rs.logits, fx.read_as_double("mod.logits"));
  for (int l = 0; l <= L; ++l)
    expect_close("mod.hidden." + std::to_string(l), rs.hidden[size_t(l)], fx.read_as_double("mod.hidden." + std::to_string(l)));
  const auto scores = fx.read_as_double("mod.router_scores"), selected = fx.read_as_double("mod.selected");
  for (int l = 0; l < L; ++l) {
    if (!config.routed(l)) continue;
    const int r = config.routed_index(l);
    const auto& st = rs.routed[size_t(l)];
    expect_close("mod.router_scores[" + std::to_string(r) + "]", st.scores,
                 std::vector<double>(scores.begin() + r * N, scores.begin() + (r + 1) * N));
    std::vector<int> ours(size_t(N), 0);
    for (int i = 0; i < w.B * K; ++i) ours[size_t(st.rows[i])] = 1;
    for (int n = 0; n < N; ++n) ASSERT_EQ(ours[size_t(n)], int(selected[size_t(r * N + n)])) << "routed block " << r << " row " << n;
  }
  const std::vector<float> ours_loss{float(loss)}, ours_nll(window_nll.begin(), window_nll.end());
  expect_close("mod.loss", ours_loss.data(), fx.read_as_double("mod.loss"));
  expect_close("mod.window_nll", ours_nll.data(), fx.read_as_double("mod.window_nll"));
  ModModel<float> grads(config);
  mod_backward(model, rs, grads, 1.0f / float(N));
  for (const auto& s : model.layout())
    expect_close("mod.grad." + s.name, grads.data() + s.offset, fx.read_as_double("mod.grad." + s.name));
}

}  // namespace
}  // namespace fca
