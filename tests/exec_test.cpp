// Execution measurement: the counters agree with the structure that ran, for every gate kind and
// for skipped configurations; removing a block whose gate is exactly 0 changes nothing; the FLOP
// count matches an independent count; bad input is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>

#include "core/exec_counters.h"
#include "core/threads.h"
#include "core/undefined_statistic.h"
#include "exec/exec.h"
#include "exec/counted_pass.h"
#include "models/gated/exec/flops.h"
#include "models/mudd/exec/flops.h"
#include "models/gated/forward.h"
#include "models/mod/model.h"
#include "models/moe/model.h"
#include "models/mudd/forward.h"
#include "test_util.h"

namespace fca {
namespace {

// One gated forward pass over `tokens` (B = tokens / T windows) with `counters` reset and installed.
void counted_pass(ExecCounters& counters, const GatedModel<float>& model, GatedRunState<float>& rs,
                  const std::vector<int32_t>& tokens, CoefficientSource<float>& source,
                  const std::vector<uint8_t>* executed = nullptr) {
  const int T = model.config().seq_len, B = int(tokens.size()) / T;
  counters.reset();
  const CountingScope scope(counters);
  gated_forward(model, rs, tokens.data(), B, T, source, 0, executed);
}

TEST(ExecCounters, CountersAgreeWithTheStructure) {
  set_threads(2);
  for (GateKind kind : {GateKind::dense, GateKind::fixed, GateKind::uniform, GateKind::layerstatic, GateKind::featuregate}) {
    GatedConfig c = testing::tiny_config(kind);
    c.n_layer = 3;
    const GatedModel<float> model = GatedModel<float>::initialized(c, 1);
    const int B = 2, T = c.seq_len;
    std::vector<int32_t> tokens(size_t(B) * T, 7);
    GatedRunState<float> rs(c, B, T, false);
    ExecCounters counters;
    LiveCoefficients<float> live(model);
    counted_pass(counters, model, rs, tokens, live);
    EXPECT_EQ(counters.blocks_executed, 3) << gate_kind_name(kind);
    // One per layer; featuregate's features are controller code too (features, then the gate).
    EXPECT_EQ(counters.controller_evaluations, kind == GateKind::featuregate ? 6 : 3) << gate_kind_name(kind);
    EXPECT_EQ(double(counters.gemm_flops), gated_forward_flops(c, B, T, 3)) << gate_kind_name(kind);
    // Per block: qkv, proj, fc, mlp proj + 2 attention GEMMs per (batch, head) and row block (T <= 64: one).
    EXPECT_EQ(counters.gemm_calls, 3 * (4 + 2 * B * c.n_head) + 1) << gate_kind_name(kind);

    // Replayed coefficients with block 1 removed: 2 blocks, no controller, fewer FLOPs.
    CoefficientTensor g(B, gated_coefficient_shape(c, T));
    std::fill(g.values().begin(), g.values().end(), 0.5f);
    ReplayedCoefficients<float> replayed(g);
    const std::vector<uint8_t> executed{1, 0, 1};
    counted_pass(counters, model, rs, tokens, replayed, &executed);
    EXPECT_EQ(counters.blocks_executed, 2);
    EXPECT_EQ(counters.controller_evaluations, 0);
    EXPECT_EQ(double(counters.gemm_flops), gated_forward_flops(c, B, T, 2));
  }
  // Off by default: nothing counts without a scope.
  EXPECT_EQ(exec_counters(), nullptr);
}

TEST(ExecCounters, FlopFormulaMatchesAnIndependentCount) {
  // L 2, D 16, H 2, T 16, B 2: N = 32 rows.
  //   Linear per block: qkv 2*32*48*16 + proj 2*32*16*16 + fc 2*32*64*16 + mlp 2*32*16*64 = 196,608
  //   Attention per block: per (batch, head) 2 GEMMs of 16x16x8 = 2 * 2*16*16*8 = 8,192, x 4 = 32,768
  //   Head: 2*32*16*256 = 262,144
  // Total: 2 * (196,608 + 32,768) + 262,144 = 720,896.
  EXPECT_EQ(gated_forward_flops(testing::tiny_config(GateKind::dense), 2, 16, 2), 720896.0);
}

TEST(ExecCounters, ControllerAndMixingFlopsAreCountedWhereTheyRun) {
  set_threads(2);
  // L 2, D 16, H 2, T 16, B 2 (N = 32), counted by hand under the convention of core/exec_counters.h:
  //   attention statistics per head: sum over n = 1..16 of (4n + 4) = 608, + 2 per row t > 0 = 30 -> 638;
  //     block 1 adds the KL term, sum of (2n + 1) = 288. Blocks: 4 x 638 = 2552 and 4 x (638 + 288) = 3704.
  //   features per row 3H + 4D + 7 = 77 and the gate 12, x 32 rows x 2 blocks = 5696.
  //   featuregate total 2552 + 3704 + 5696 = 11952; uniform and layerstatic one sigmoid (4) per block.
  //   mixing h + g F: 2 x 32 x 16 per block = 1024, x 2 = 2048, for every gate.
  const std::map<GateKind, double> controller{{GateKind::dense, 0}, {GateKind::fixed, 0}, {GateKind::uniform, 8},
                                              {GateKind::layerstatic, 8}, {GateKind::featuregate, 11952}};
  std::map<GateKind, double> flops_per_token;
  for (const auto& [kind, expected] : controller) {
    const GatedConfig c = testing::tiny_config(kind);
    const GatedModel<float> model = GatedModel<float>::initialized(c, 1);
    const int B = 2, T = c.seq_len;
    std::vector<int32_t> tokens(size_t(B) * T, 7);
    GatedRunState<float> rs(c, B, T, false);
    LiveCoefficients<float> live(model);
    ExecCounters counters;
    counted_pass(counters, model, rs, tokens, live);
    EXPECT_EQ(double(counters.controller_flops), expected) << gate_kind_name(kind);
    EXPECT_EQ(double(counters.controller_flops), gated_controller_flops(c, B, T, 2)) << gate_kind_name(kind);
    EXPECT_EQ(double(counters.mixing_flops), 2048.0) << gate_kind_name(kind);
    EXPECT_EQ(gated_mixing_flops(c, B, T, 2), 2048.0);
    const ExpectedCounts expected_live{2, gated_forward_flops(c, B, T, 2), gated_controller_flops(c, B, T, 2),
                                       gated_mixing_flops(c, B, T, 2), gated_controller_evaluations(c, 2), 0};
    const auto fields = counter_fields(counters, expected_live, int64_t(B) * T);
    EXPECT_TRUE(fields["counters_match_graph"].get<bool>()) << gate_kind_name(kind);
    flops_per_token[kind] = fields["gflop_per_token"].get<double>();
    // Replayed: the controller's arithmetic never runs; the mixing does.
    CoefficientTensor g(B, gated_coefficient_shape(c, T));
    ReplayedCoefficients<float> replayed(g);
    counted_pass(counters, model, rs, tokens, replayed);
    EXPECT_EQ(counters.controller_flops, 0) << gate_kind_name(kind);
    EXPECT_EQ(double(counters.mixing_flops), 2048.0) << gate_kind_name(kind);
  }
  // FeatureGate's features and gates cost FLOPs per token that Dense does not spend.
  EXPECT_GT(flops_per_token[GateKind::featuregate], flops_per_token[GateKind::dense]);
}

TEST(ExecCounters, MuddCountersMatchTheFormulaAndAReplayReachingTheGeneratorFails) {
  set_threads(2);
  const MuddModel<float> model = MuddModel<float>::load(std::string(FCA_SOURCE_DIR) + "/tests/data/muddpythia-tiny");
  const MuddConfig& c = model.config();
  const int B = 2, T = 16;
  std::vector<int32_t> tokens(size_t(B) * T);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 31) % 512);
  MuddRunState<float> rs(c, B, T);
  CoefficientTensor recorded = make_mudd_coefficients(c, B, T);
  MuddRecordingCoefficients<float> live(model, recorded);
  ExecCounters counters;
  {
    CountingScope scope(counters);
    mudd_forward(model, rs, tokens.data(), B, T, live);
  }
  const ExpectedCounts live_expected{c.n_layer, mudd_gemm_flops(c, B, T, true), mudd_controller_flops(c, B, T),
                                     mudd_mixing_flops(c, B, T), mudd_controller_evaluations(c), 0};
  EXPECT_NO_THROW(check_counters("live", counters, live_expected));
  // Mixing by hand: streams 4, 4, 4, 1 over sources 2, 3, 4, 5 of D 64: per row
  // 4*64*3 + 4*64*5 + 4*64*7 + 64*9 = 4416.
  EXPECT_EQ(mudd_mixing_flops(c, B, T), 4416.0 * B * T);
  EXPECT_GT(counters.controller_flops, 0);

  const ExpectedCounts replay_expected{c.n_layer, mudd_gemm_flops(c, B, T, false), 0.0, mudd_mixing_flops(c, B, T)};
  MuddReplayedCoefficients<float> replayed(c, recorded);
  counters.reset();
  {
    CountingScope scope(counters);
    mudd_forward(model, rs, tokens.data(), B, T, replayed);
  }
  EXPECT_NO_THROW(check_counters("replay", counters, replay_expected));
  // A "replay" that still runs the generator: the check must fail, naming what differs.
  MuddLiveCoefficients<float> broken(model);
  counters.reset();
  {
    CountingScope scope(counters);
    mudd_forward(model, rs, tokens.data(), B, T, broken);
  }
  try {
    check_counters("replay", counters, replay_expected);
    ADD_FAILURE() << "a replay that ran the generator passed the counter check";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("execution counters disagree with the graph (replay)"), std::string::npos) << m;
    EXPECT_NE(m.find("GEMM FLOPs"), std::string::npos) << m;
    EXPECT_NE(m.find("controller FLOPs"), std::string::npos) << m;
    EXPECT_EQ(m.find("mixing FLOPs"), std::string::npos) << m;
  }
}

// The check fails on a missed block or on controller work a replay must not show; and
// counters_match_graph in exec.json is computed from the counters against the expected counts,
// field by field, never written true on trust: each field that disagrees makes it false and is
// named by check_counters.
TEST(ExecCounters, TheGatedCheckFailsAndCountersMatchGraphIsComputed) {
  const GatedConfig c = testing::tiny_config(GateKind::featuregate);
  const GatedModel<float> model = GatedModel<float>::initialized(c, 1);
  const int B = 2, T = c.seq_len;
  std::vector<int32_t> tokens(size_t(B) * T, 3);
  GatedRunState<float> rs(c, B, T, false);
  LiveCoefficients<float> live(model);
  ExecCounters counters;
  counted_pass(counters, model, rs, tokens, live);
  auto expected = [&](int layers) {
    return ExpectedCounts{layers,
                          gated_forward_flops(c, B, T, layers),
                          gated_controller_flops(c, B, T, layers),
                          gated_mixing_flops(c, B, T, layers),
                          gated_controller_evaluations(c, layers),
                          0};
  };
  const ExpectedCounts right = expected(2);
  EXPECT_NO_THROW(check_counters("live", counters, right));
  ExpectedCounts replay = right;
  replay.controller_flops = 0;  // what a replay must show: this live pass is not one
  EXPECT_THROW(check_counters("replay", counters, replay), Error);
  EXPECT_THROW(check_counters("live", counters, expected(1)), Error);

  EXPECT_TRUE(counter_fields(counters, right, int64_t(B) * T)["counters_match_graph"].get<bool>());
  const std::vector<std::pair<std::string, std::function<void(ExpectedCounts&)>>> wrong = {
      {"blocks", [](ExpectedCounts& e) { e.blocks += 1; }},
      {"GEMM FLOPs", [](ExpectedCounts& e) { e.gemm_flops += 2; }},
      {"controller FLOPs", [](ExpectedCounts& e) { e.controller_flops += 1; }},
      {"mixing FLOPs", [](ExpectedCounts& e) { e.mixing_flops -= 1; }},
      {"controller evaluations", [](ExpectedCounts& e) { e.controller_evaluations = 0; }},
      {"routed rows", [](ExpectedCounts& e) { e.routed_rows = 1; }},
  };
  for (const auto& [what, perturb] : wrong) {
    ExpectedCounts e = right;
    perturb(e);
    EXPECT_FALSE(counters_agree(counters, e)) << what;
    EXPECT_FALSE(counter_fields(counters, e, int64_t(B) * T)["counters_match_graph"].get<bool>()) << what;
    try {
      check_counters("live", counters, e);
      ADD_FAILURE() << what << ": no error";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(what), std::string::npos) << err.what();
    }
  }
}

// Counting scopes do not nest: an inner scope would silently take over (and its end switch off)
// the outer one's counting.
TEST(ExecCounters, NestedCountingScopesAreRefused) {
  ExecCounters outer, inner;
  {
    const CountingScope scope(outer);
    EXPECT_THROW(CountingScope nested(inner), Error);
    EXPECT_EQ(exec_counters(), &outer);  // the outer scope still counts
  }
  EXPECT_EQ(exec_counters(), nullptr);
}

TEST(ExecSkip, RemovingABlockWithGateZeroChangesNothing) {
  set_threads(2);
  GatedConfig c = testing::tiny_config(GateKind::layerstatic);
  c.n_layer = 3;
  const GatedModel<float> model = GatedModel<float>::initialized(c, 4);
  const int B = 2, T = c.seq_len;
  std::vector<int32_t> tokens(size_t(B) * T);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 37) % 256);
  CoefficientTensor g(B, gated_coefficient_shape(c, T));
  for (int w = 0; w < B; ++w)
    for (int l = 0; l < 3; ++l)
      for (int t = 0; t < T; ++t) g.at(w, l, t) = l == 1 ? 0.0f : 0.7f;
  ReplayedCoefficients<float> source(g);
  GatedRunState<float> run_all(c, B, T, false), run_skip(c, B, T, false);
  gated_forward(model, run_all, tokens.data(), B, T, source);
  const std::vector<uint8_t> executed{1, 0, 1};
  gated_forward(model, run_skip, tokens.data(), B, T, source, 0, &executed);
  EXPECT_EQ(0, std::memcmp(run_all.logits, run_skip.logits, sizeof(float) * size_t(B) * T * kByteVocab));
}

TEST(ExecSkip, LiveFeatureGateCannotSkip) {
  GatedConfig c = testing::tiny_config(GateKind::featuregate);
  const GatedModel<float> model = GatedModel<float>::initialized(c, 4);
  std::vector<int32_t> tokens(size_t(c.seq_len), 1);
  GatedRunState<float> rs(c, 1, c.seq_len, false);
  LiveCoefficients<float> live(model);
  const std::vector<uint8_t> executed{1, 0};
  EXPECT_THROW(gated_forward(model, rs, tokens.data(), 1, c.seq_len, live, 0, &executed), Error);
}

class ExecCli : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_corpus(dir.path(), 20000, 4000, 4000);
    GatedModel<float>::initialized(testing::tiny_config(GateKind::layerstatic), 1).save(dir.file("ls.safetensors"));
    GatedModel<float>::initialized(testing::tiny_config(GateKind::dense), 1).save(dir.file("dense.safetensors"));
  }
  testing::TempDir dir;
};

TEST_F(ExecCli, SweepWritesTheTable) {
  const auto r = testing::run_fca({"exec", "--model", dir.file("dense.safetensors"), "--model", dir.file("ls.safetensors"),
                                   "--data", dir.path(), "--runs", "3", "--max-runs", "3", "--warmup", "1", "--skip-threshold", "0.4,0.6",
                                   "--eval-windows", "4", "--calib-windows", "4", "--out", dir.file("exec"), "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Initial gates are sigmoid(0) = 0.5: tau 0.4 removes nothing, tau 0.6 removes both blocks.
  EXPECT_NE(r.output.find("| layerstatic L2 D16 | skip tau=0.6 | 0 / 2 |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| layerstatic L2 D16 | skip tau=0.4 | 2 / 2 |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| dense L2 D16 | live | 2 / 2 |"), std::string::npos) << r.output;
  // Every configuration timed in the same rounds, every ratio with its paired interval and words.
  nlohmann::json e;
  std::ifstream(dir.file("exec/exec.json")) >> e;
  EXPECT_EQ(e["schema"], "fca-exec-v2");
  EXPECT_EQ(e["timing"]["rounds"], 3);
  EXPECT_NE(e["timing"]["stopped_because"].get<std::string>().find("maximum of 3 rounds"), std::string::npos) << e["timing"];
  EXPECT_EQ(e["dense_reference"]["model"], dir.file("dense.safetensors"));
  for (const auto& m : e["models"])
    for (const char* list : {"modes", "skip_sweep"}) {
      if (!m.contains(list)) continue;
      for (const auto& mode : m[list]) {
        SCOPED_TRACE(m["gate"].dump() + " " + list + " " + mode["mode"].dump());
        EXPECT_EQ(mode["latency"]["runs"], 3);
        const auto& r = mode["latency_ratio_to_dense"];
        ASSERT_TRUE(r["ci95"].is_array());
        EXPECT_LE(r["ci95"][0].get<double>(), r["estimate"].get<double>());
        EXPECT_GE(r["ci95"][1].get<double>(), r["estimate"].get<double>());
        EXPECT_TRUE(r["difference"] == "slower" || r["difference"] == "faster" || r["difference"] == "no measurable difference at this size");
        if (std::string(list) == "skip_sweep") {
          EXPECT_TRUE(mode["latency_ratio_to_unskipped"].contains("difference"));
        }
      }
    }
  // The reference against itself: every per-round ratio is 1.
  EXPECT_EQ(e["models"][0]["modes"][0]["latency_ratio_to_dense"]["estimate"], 1.0);
  EXPECT_EQ(e["models"][0]["modes"][0]["latency_ratio_to_dense"]["difference"], "no measurable difference at this size");
  EXPECT_NO_THROW(check_statistics(e, "exec.json"));
}

TEST_F(ExecCli, RoutedModelsReportControllerAndMixingFlops) {
  MoeModel<float>::initialized(MoeConfig{2, 16, 2, 16, 4, 2, 0, 0.01}, 1).save(dir.file("moe.safetensors"));
  ModModel<float>::initialized(ModConfig{4, 16, 2, 16, 0.25, 2}, 1).save(dir.file("mod.safetensors"));
  ExecOptions o;
  o.models = {dir.file("moe.safetensors"), dir.file("mod.safetensors"), dir.file("ls.safetensors")};
  o.runs = o.max_runs = 1;
  o.warmup = 0;
  o.batch = 2;
  o.eval_windows = 2;
  o.progress = false;
  const auto e = run_exec(Corpus(dir.path()), o);  // throws if any mode's counters disagree with its formula
  for (const auto& m : e["models"])
    for (const auto& mode : m["modes"]) {
      SCOPED_TRACE(m["gate"].dump() + " " + mode["mode"].dump());
      const auto& kind = mode["gflop_per_pass_by_kind"];
      EXPECT_TRUE(mode["counters_match_graph"].get<bool>());
      EXPECT_NEAR(mode["gflop_per_pass"].get<double>(),
                  kind["gemm"].get<double>() + kind["controller"].get<double>() + kind["mixing"].get<double>(), 1e-12);
      EXPECT_GT(kind["mixing"].get<double>(), 0);
      // Routers and gates run only live (and in MoE's dense_experts, which routes live).
      const bool live = mode["mode"] == "live" || mode["mode"] == "dense_experts" || mode["mode"] == "dense_total_params";
      const bool has_controller = m["gate"] != "dense" && mode["mode"] != "dense_same_shape";
      if (live && has_controller) {
        EXPECT_GT(kind["controller"].get<double>(), 0);
      } else if (!live) {
        EXPECT_EQ(kind["controller"].get<double>(), 0);
      }
    }
  EXPECT_NE(e["flop_convention"].get<std::string>().find("controllers and mixing"), std::string::npos);
}

TEST_F(ExecCli, BadInput) {
  auto r = testing::run_fca({"exec", "--model", dir.file("ls.safetensors"), "--data", dir.path(), "--skip-threshold", "1.5",
                             "--out", dir.file("x")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--skip-threshold: an entry is \"1.5\", expected a number in [0, 1]"), std::string::npos) << r.output;
  r = testing::run_fca({"exec", "--model", dir.file("ls.safetensors"), "--data", dir.path(), "--skip-threshold", "0.5x",
                        "--out", dir.file("x")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--skip-threshold: an entry is \"0.5x\", expected a number"), std::string::npos) << r.output;
  r = testing::run_fca({"exec", "--model", dir.file("dense.safetensors"), "--data", dir.path(), "--skip-threshold", "0.5",
                        "--out", dir.file("x")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("calibratable gates"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x/exec.json")));
}

}  // namespace
}  // namespace fca
