// `fca exec` for the hyper-connection family: the counters of every variant agree with the family's
// formulas (docs/hyper.md), and the controllers' FLOPs of both with a count by hand from the code
// that runs; a replay that reaches the controller (SHC's copy included) fails the check; exec.json
// carries the mixing and the controller as their own FLOP rows and compares live execution with
// dense_same_shape.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/exec_counters.h"
#include "core/threads.h"
#include "exec/counted_pass.h"
#include "exec/exec.h"
#include "models/hyper/exec/measure.h"
#include "models/hyper/forward.h"
#include "test_util.h"

namespace fca {
namespace {

HyperConfig small_config(HyperVariant v) {
  HyperConfig c;
  c.n_layer = 2, c.d_model = 16, c.n_head = 2, c.seq_len = 16, c.variant = v, c.streams = 3;
  return c;
}

// The family's formulas by hand for n 3, D 16, L 2: mixing per site and token 2nD(n+2) plus the
// read's and the write's own n - 1 and n adds below the multiply-add convention:
// read D(2n-1) = 80, write nD(2n+1) = 336, so 416 per site, 4 sites, and the collapse D(n-1) = 32.
//
// The controllers' FLOPs per site and token at n 3, D 16, counted by hand from what
// HyperController::evaluate runs (models/hyper/coefficients.cpp, LN0 in ops/simd.cpp's
// LayerNormRows) under core/exec_counters.h's convention, never from the family's formulas:
// - DHC: the projection z = W LN0(X_i), n = 3 GEMM rows of D x (n + 2) = 16 x 5 per token: 480;
//   LN0 of each stream (sum 16, mean 1, deviations, squares and their sum 48, variance 1, eps 1,
//   sqrt 1, reciprocal 1, centring and scaling 32: 101): 303; tanh, times the scale, plus the static
//   part for each of the n (n + 2) = 15 entries of z: 45. 828 in all.
// - mHC: the projection z = Phi vec(X), one GEMM row of nD = 48 x (n^2 + 2n) = 15: 1440; the RMS
//   (48 squares, 48 adds, division, eps, sqrt): 99; g / r, times alpha, plus b for each of the 15
//   entries: 45; the 3 reads' sigmoids (negation, exp, add, division) plus eps: 15; the 3 writes'
//   sigmoids times 2: 15; Sinkhorn's column softmax (subtraction, exp, sum, division, eps for each of
//   the 9 mixing entries): 45, then 20 row and 19 column normalisations of 3 lines of 3 (3 adds,
//   eps, 3 divisions: 7 a line): 39 * 21 = 819. 2478 in all.
// - SHC: a copy of the static square, 0.
constexpr double kDhcControllerPerSiteToken = 480 + 303 + 45;
constexpr double kMhcControllerPerSiteToken = 1440 + 99 + 45 + 15 + 15 + 45 + 819;

double controller_by_hand(HyperVariant v) {
  switch (v) {
    case HyperVariant::shc:
      return 0;
    case HyperVariant::dhc:
      return kDhcControllerPerSiteToken;
    case HyperVariant::mhc:
      return kMhcControllerPerSiteToken;
  }
  return 0;
}

TEST(HyperExec, FormulasByHand) {
  const HyperConfig c = small_config(HyperVariant::dhc);
  EXPECT_EQ(hyper_mixing_flops(c, 1, 1), 4 * 416.0 + 32.0);
  for (HyperVariant v : {HyperVariant::shc, HyperVariant::dhc, HyperVariant::mhc}) {
    SCOPED_TRACE(hyper_variant_name(v));
    EXPECT_EQ(hyper_controller_flops(small_config(v), 1, 1), 4 * controller_by_hand(v));  // 4 sites
  }
}

TEST(HyperExec, CountersMatchTheFormulasAndAReplayReachingTheControllerFails) {
  set_threads(2);
  const int B = 2, T = 16;
  std::vector<int32_t> tokens(size_t(B) * T);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 37) % 256);
  for (HyperVariant v : {HyperVariant::shc, HyperVariant::dhc, HyperVariant::mhc}) {
    SCOPED_TRACE(hyper_variant_name(v));
    const HyperConfig c = small_config(v);
    const HyperModel<float> model = HyperModel<float>::initialized(c, 3);
    HyperRunState<float> rs(c, B, T, false);
    CoefficientTensor recorded = hyper_coefficient_tensor(c, B, T);
    HyperRecordingCoefficients<float> live(model, recorded);
    ExecCounters counters;
    {
      CountingScope scope(counters);
      hyper_forward(model, rs, tokens.data(), B, T, live);
    }
    const ExpectedCounts live_expected{c.n_layer, hyper_gemm_flops(c, B, T), hyper_controller_flops(c, B, T),
                                       hyper_mixing_flops(c, B, T), c.sites(), 0};
    EXPECT_NO_THROW(check_counters("live", counters, live_expected));
    // What the live pass ran, against the count by hand (FormulasByHand): a wrong formula or a
    // wrong count (the controller's work counted twice, a projection GEMM outside its
    // ControllerGemms guard) fails here even where the two agree with each other.
    EXPECT_EQ(double(counters.controller_flops.load()), c.sites() * double(B) * T * controller_by_hand(v));
    const int64_t live_gemm_calls = counters.gemm_calls.load();
    const double live_gemm_flops = double(counters.gemm_flops.load());
    ExpectedCounts replay_expected = live_expected;
    replay_expected.controller_flops = 0;
    replay_expected.controller_evaluations = 0;
    HyperReplayedCoefficients<float> replayed(recorded);
    counters.reset();
    {
      CountingScope scope(counters);
      hyper_forward(model, rs, tokens.data(), B, T, replayed);
    }
    EXPECT_NO_THROW(check_counters("replay", counters, replay_expected));
    // The controller's projection is one GEMM per site (DHC, mHC), and none of its FLOPs are the
    // trunk's: live and replay run the same trunk GEMMs.
    EXPECT_EQ(live_gemm_calls - counters.gemm_calls.load(), v == HyperVariant::shc ? 0 : c.sites());
    EXPECT_EQ(live_gemm_flops, double(counters.gemm_flops.load()));
    // A "replay" that runs the controller fails, SHC's constant copy included (it is an evaluation).
    HyperLiveCoefficients<float> broken(model);
    counters.reset();
    {
      CountingScope scope(counters);
      hyper_forward(model, rs, tokens.data(), B, T, broken);
    }
    EXPECT_FALSE(counters_agree(counters, replay_expected));
    try {
      check_counters("replay", counters, replay_expected);
      ADD_FAILURE() << "a replay that ran the controller passed the counter check";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("controller evaluations"), std::string::npos) << e.what();
    }
  }
}

TEST(HyperExec, ExecReportsTheStreamsCostAgainstDenseSameShape) {
  set_threads(2);
  testing::TempDir dir;
  testing::write_corpus(dir.path(), 20000, 4000, 4000);
  ExecOptions o;
  for (HyperVariant v : {HyperVariant::shc, HyperVariant::mhc}) {
    const std::string path = dir.file(std::string(hyper_variant_name(v)) + ".safetensors");
    HyperModel<float>::initialized(small_config(v), 1).save(path);
    o.models.push_back(path);
  }
  o.runs = o.max_runs = 2;
  o.warmup = 0;
  o.batch = 2;
  o.eval_windows = 4;
  o.progress = false;
  o.out_dir = dir.file("exec");
  const auto e = run_exec(Corpus(dir.path()), o);  // throws if any mode's counters disagree with its formula
  for (const auto& m : e["models"]) {
    SCOPED_TRACE(m["label"].dump());
    EXPECT_EQ(m["family"], "hyper");
    std::vector<std::string> names;
    for (const auto& mode : m["modes"]) {
      names.push_back(mode["mode"]);
      EXPECT_TRUE(mode["counters_match_graph"].get<bool>());
      EXPECT_EQ(mode["executed_blocks"], 2);
      const auto& kind = mode["gflop_per_pass_by_kind"];
      if (mode["mode"] != "dense_same_shape") {
        EXPECT_GT(kind["mixing"].get<double>(), 0);
      }
      const bool has_controller = mode["mode"] == "live" && m["label"] != "shc n3";
      EXPECT_EQ(kind["controller"].get<double>() > 0, has_controller) << mode["mode"];
      if (mode["mode"] != "dense_same_shape") {
        EXPECT_EQ(mode["controller_evaluations_per_pass"], mode["mode"] == "live" ? 4 : 0) << mode["mode"];
      }
    }
    EXPECT_EQ(names, (std::vector<std::string>{"live", "replay", "cross_input", "identity_mixing", "dense_same_shape"}));
    // At initialisation SHC's squares are the identity, so identity replay is the live model bit for
    // bit; mHC's are near it (sigmoid reads and writes, Sinkhorn of off-diagonal logits -8).
    if (m["label"] == "shc n3") {
      EXPECT_EQ(m["modes"][3]["nll"], m["modes"][0]["nll"]);
    } else {
      EXPECT_NEAR(m["modes"][3]["nll"].get<double>(), m["modes"][0]["nll"].get<double>(), 1e-3);
    }
    ASSERT_EQ(m["savings"].size(), 1u);
    EXPECT_EQ(m["savings"][0]["against"], "dense_same_shape");
    EXPECT_GT(m["savings"][0]["flop_ratio"].get<double>(), 1.0);
    EXPECT_FALSE(m["savings"][0]["saves"].get<bool>());
  }
  std::ifstream md(dir.file("exec/exec.md"));
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("of which mixing, MFLOP/token"), std::string::npos);
  EXPECT_NE(text.find("| mhc n3 L2 D16 | identity_mixing | 2 / 2 |"), std::string::npos) << text;
}

}  // namespace
}  // namespace fca
