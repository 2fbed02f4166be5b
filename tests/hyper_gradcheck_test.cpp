// The hyper family's backward (docs/hyper.md: the mixing, the branches, DHC's LN0 and tanh, mHC's
// 1/r path, sigmoids and unrolled Sinkhorn) through the whole model in double precision against
// central finite differences, on a sample of every parameter tensor; and in float32 against the
// gradients of the independent PyTorch implementation (tests/fixtures/hyper_tiny.safetensors).
#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"
#include "core/safetensors.h"
#include "core/threads.h"
#include "models/hyper/forward.h"
#include "test_util.h"

namespace fca {
namespace {

void check_against_finite_differences(HyperVariant variant) {
  set_threads(1);  // thousands of tiny passes: threading overhead would dominate
  HyperConfig c;
  c.n_layer = 2, c.d_model = 8, c.n_head = 2, c.seq_len = 6, c.variant = variant, c.streams = 3;
  c.sinkhorn_iters = 6;
  c.eps = 1e-3;  // visible in the gradients, so that its placement is checked too
  HyperModel<double> model = HyperModel<double>::initialized(c, 3);
  // Away from the initialisation: every dynamic path carries gradient, the mixing is not I.
  Rng rng(17);
  for (const auto& s : model.layout()) {
    double* p = model.tensor(s.name);
    for (size_t i = 0; i < s.numel; ++i) p[i] += (s.name.starts_with("hc.") ? 0.3 : 0.2) * rng.normal();
    if (s.name.ends_with(".static")) p[0] = 0;
  }
  const int B = 2, Tn = 5, N = B * Tn;
  std::vector<int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; ++i) tokens[size_t(i)] = int32_t(rng.below(256)), targets[size_t(i)] = int32_t(rng.below(256));

  HyperRunState<double> rs(c, B, Tn, true);
  HyperLiveCoefficients<double> live(model);
  hyper_forward(model, rs, tokens.data(), B, Tn, live);
  hyper_loss(rs, targets.data(), nullptr);
  HyperModel<double> grads(c);
  hyper_backward(model, rs, grads, 1.0 / N);

  HyperRunState<double> probe(c, B, Tn, false);
  auto loss_at = [&]() {
    HyperLiveCoefficients<double> source(model);
    hyper_forward(model, probe, tokens.data(), B, Tn, source);
    return hyper_loss(probe, targets.data(), nullptr);
  };
  testing::expect_gradients_match_finite_differences(
      model.layout(), [&](const TensorSlot& slot) { return model.tensor(slot.name); },
      [&](const TensorSlot& slot) -> const double* { return grads.tensor(slot.name); }, loss_at, 5,
      [](const TensorSlot& slot, size_t i) { return slot.name.ends_with(".static") && i == 0; });  // masked: never read
}

TEST(HyperGradCheck, Shc) { check_against_finite_differences(HyperVariant::shc); }
TEST(HyperGradCheck, Dhc) { check_against_finite_differences(HyperVariant::dhc); }
TEST(HyperGradCheck, Mhc) { check_against_finite_differences(HyperVariant::mhc); }

TEST(HyperGradCheck, DhcWithoutTanh) {
  // hc_tanh false drops the (1 - tau^2) factor: covered by its own pass.
  set_threads(1);
  HyperConfig c;
  c.n_layer = 1, c.d_model = 8, c.n_head = 2, c.seq_len = 4, c.variant = HyperVariant::dhc, c.streams = 2, c.tanh = false;
  HyperModel<double> model = HyperModel<double>::initialized(c, 4);
  Rng rng(9);
  for (const auto& s : model.layout())
    if (s.name.starts_with("hc.")) {
      double* p = model.tensor(s.name);
      for (size_t i = 0; i < s.numel; ++i) p[i] += 0.3 * rng.normal();
      if (s.name.ends_with(".static")) p[0] = 0;
    }
  const int B = 1, Tn = 4;
  std::vector<int32_t> tokens{1, 2, 3, 4}, targets{2, 3, 4, 5};
  HyperRunState<double> rs(c, B, Tn, true);
  HyperLiveCoefficients<double> live(model);
  hyper_forward(model, rs, tokens.data(), B, Tn, live);
  hyper_loss(rs, targets.data(), nullptr);
  HyperModel<double> grads(c);
  hyper_backward(model, rs, grads, 1.0 / (B * Tn));
  HyperRunState<double> probe(c, B, Tn, false);
  for (const char* name : {"hc.0.dyn.weight", "hc.1.dyn.weight", "hc.0.dyn.scale", "hc.1.static"})
    for (size_t i : {size_t(1), size_t(3)}) {
      double& p = model.tensor(name)[i];
      const double saved = p, h = 1e-5;
      auto loss_at = [&] {
        HyperLiveCoefficients<double> source(model);
        hyper_forward(model, probe, tokens.data(), B, Tn, source);
        return hyper_loss(probe, targets.data(), nullptr);
      };
      p = saved + h;
      const double up = loss_at();
      p = saved - h;
      const double down = loss_at();
      p = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(grads.tensor(name)[i], numeric, 1e-7 + 1e-5 * std::abs(numeric)) << name << "[" << i << "]";
    }
}

// Float32 against the PyTorch reference's gradients. The float32 rerun of the reference differs
// from its float64 gradients by at most 3.1e-7 (values up to 0.33); 2e-5 relative plus 2e-6
// absolute is the forward tests' tolerance, ten times that level.
void check_fixture_gradients(const std::string& V) {
  set_threads(2);
  const std::string path = std::string(FCA_SOURCE_DIR) + "/tests/fixtures/hyper_tiny.safetensors";
  SafetensorsReader fx(path);
  const HyperConfig config = HyperConfig::from_json(fx.metadata().at(V + ".config"), path);
  HyperModel<float> model(config);
  for (const auto& s : model.layout()) fx.read_into<float>(V + ".param." + s.name, s.shape, model.tensor(s.name));
  const auto tokens = fx.read_as_double(V + ".tokens");
  const int B = int(fx.get(V + ".tokens").shape[0]), T = config.seq_len;
  std::vector<int32_t> inputs, targets;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      inputs.push_back(int32_t(tokens[size_t(b * (T + 1) + t)]));
      targets.push_back(int32_t(tokens[size_t(b * (T + 1) + t + 1)]));
    }
  HyperRunState<float> rs(config, B, T, true);
  HyperLiveCoefficients<float> live(model);
  hyper_forward(model, rs, inputs.data(), B, T, live);
  hyper_loss(rs, targets.data(), nullptr);
  HyperModel<float> grads(config);
  hyper_backward(model, rs, grads, 1.0f / float(B * T));
  for (const auto& s : model.layout())
    testing::expect_close(V + ".grad." + s.name, grads.tensor(s.name), fx.read_as_double(V + ".grad." + s.name), 2e-5,
                          2e-6);
}

TEST(HyperFixtureGradients, Shc) { check_fixture_gradients("shc"); }
TEST(HyperFixtureGradients, Dhc) { check_fixture_gradients("dhc"); }
TEST(HyperFixtureGradients, Mhc) { check_fixture_gradients("mhc"); }

}  // namespace
}  // namespace fca
