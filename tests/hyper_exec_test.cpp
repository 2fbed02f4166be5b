// `fca exec` for the hyper-connection family: the counters of every variant agree with the family's
// formulas (docs/hyper.md), computed independently of the code that counts; a replay that reaches the
// controller (SHC's copy included) fails the check; exec.json carries the mixing and the controller
// as their own FLOP rows and compares live execution with dense_same_shape.
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
TEST(HyperExec, FormulasByHand) {
  const HyperConfig c = small_config(HyperVariant::dhc);
  EXPECT_EQ(hyper_mixing_flops(c, 1, 1), 4 * 416.0 + 32.0);
  // The controllers' projection GEMMs alone: DHC n rows of D x (n+2) per token, mHC one row of
  // nD x (n^2+2n); SHC nothing.
  HyperConfig mhc = small_config(HyperVariant::mhc), shc = small_config(HyperVariant::shc);
  EXPECT_EQ(hyper_controller_flops(c, 1, 1) - 4.0 * double(hyper_dhc_controller_flops_per_token(c)), 4 * 2.0 * 3 * 16 * 5);
  EXPECT_EQ(hyper_controller_flops(mhc, 1, 1) - 4.0 * double(hyper_mhc_controller_flops_per_token(mhc)), 4 * 2.0 * 48 * 15);
  EXPECT_EQ(hyper_controller_flops(shc, 1, 1), 0.0);
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
    SCOPED_TRACE(m["gate"].dump());
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
      const bool has_controller = mode["mode"] == "live" && m["gate"] != "shc n3";
      EXPECT_EQ(kind["controller"].get<double>() > 0, has_controller) << mode["mode"];
      if (mode["mode"] != "dense_same_shape") {
        EXPECT_EQ(mode["controller_evaluations_per_pass"], mode["mode"] == "live" ? 4 : 0) << mode["mode"];
      }
    }
    EXPECT_EQ(names, (std::vector<std::string>{"live", "replay", "cross_input", "identity_mixing", "dense_same_shape"}));
    // At initialisation SHC's squares are the identity, so identity replay is the live model bit for
    // bit; mHC's are near it (sigmoid reads and writes, Sinkhorn of off-diagonal logits -8).
    if (m["gate"] == "shc n3") {
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
