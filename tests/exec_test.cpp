// Execution measurement: the counters agree with the structure that ran, for every gate kind and
// for skipped configurations; removing a block whose gate is exactly 0 changes nothing; the FLOP
// count matches an independent count; bad input is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>

#include "core/error.h"
#include "core/exec_counters.h"
#include "core/safetensors.h"
#include "core/threads.h"
#include "core/undefined_statistic.h"
#include "exec/exec.h"
#include "exec/counted_pass.h"
#include "exec/external_exec.h"
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
  MuddReplayedCoefficients<float> replayed(recorded);
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
      // A family counter (exit's, registered at installation) that this pass never counts, and
      // one that no family declares: each expected but not counted.
      {"propagated_rows", [](ExpectedCounts& e) { e.family["propagated_rows"] = 1; }},
      {"undeclared_rows", [](ExpectedCounts& e) { e.family["undeclared_rows"] = 2; }},
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

// An external model's counts: one counted pass's `counts` JSON (as fca_adapter writes it) becomes
// the mode's fields; every malformed or implausible answer is refused with the field named.
const char* kCounts = R"({"gemm_flops": 3000000000, "controller_flops": 1000000000, "controller_evaluations": 4,
  "units": {"blocks": {"modules": 4, "calls": 4, "rows": 56}, "experts": {"modules": 8, "calls": 16, "rows": 32}},
  "modules": [{"name": "blocks.0", "class": "Block", "calls": 1, "rows": 16, "flops": 500000000, "controller": false}],
  "gemm_ops": {"aten.mm.default": {"calls": 12, "flops": 4000000000}},
  "zero_ops": {"aten.add.Tensor": 30}, "uncounted_ops": {"fca_test.opaque.default": 4}, "unseen_work": [],
  "unit_warnings": []})";

nlohmann::ordered_json external_units() { return {{"blocks", 4}, {"experts", 8}}; }

std::string counts_with(const std::string& key, const nlohmann::json& value) {
  nlohmann::json c = nlohmann::json::parse(kCounts);
  c[key] = value;
  return c.dump();
}

TEST(ExecExternal, CountsBecomeTheModeEntry) {
  const auto j = external_counted_fields(kCounts, "live", external_units(), 16, "answer");
  EXPECT_EQ(j["total_blocks"], 4);
  EXPECT_EQ(j["executed_blocks"], 3.5);  // 56 block rows over 16 tokens: half the tokens skip one block
  EXPECT_EQ(j["executed_units_per_token"]["experts"], 2.0);
  EXPECT_EQ(j["unit_rows_per_pass"]["blocks"], 56);
  EXPECT_EQ(j["unit_calls_per_pass"]["experts"], 16);
  EXPECT_EQ(j["controller_evaluations_per_pass"], 4);
  EXPECT_DOUBLE_EQ(j["gflop_per_pass"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(j["gflop_per_token"].get<double>(), 0.25);
  EXPECT_EQ(j["gflop_per_pass_by_kind"].dump(), R"({"gemm":3.0,"controller":1.0})");  // no mixing kind
  EXPECT_EQ(j["gemm_ops"]["aten.mm.default"]["gflop"], 4.0);
  EXPECT_EQ(j["zero_ops"]["aten.add.Tensor"], 30);
  EXPECT_EQ(j["uncounted_ops"]["fca_test.opaque.default"], 4);
  EXPECT_EQ(j["modules"][0]["gflop"], 0.5);
  EXPECT_EQ(j["modules"][0]["controller"], false);
  // fully_counted is computed from what the adapter listed: an uncounted operator or unseen work makes it false.
  EXPECT_FALSE(j["fully_counted"].get<bool>());
  nlohmann::json full = nlohmann::json::parse(kCounts);
  full["uncounted_ops"] = nlohmann::json::object();
  EXPECT_TRUE(external_counted_fields(full.dump(), "live", external_units(), 16, "answer")["fully_counted"].get<bool>());
  full["unseen_work"] = {{{"kind", "parameter"}, {"module", "moe.0.experts.1"}, {"what", "weight [16, 16] took part in no counted product"},
                          {"calls", 2}}};
  full["unit_warnings"] = {"experts unit 'moe.0.experts.1': 34 rows and no counted product"};
  const auto unseen = external_counted_fields(full.dump(), "live", external_units(), 16, "answer");
  EXPECT_FALSE(unseen["fully_counted"].get<bool>());
  EXPECT_EQ(unseen["unseen_work"][0]["module"], "moe.0.experts.1");
  EXPECT_EQ(unseen["unit_warnings"].size(), 1u);
  // A reference without the experts of the model: 0 modules, with the reason.
  nlohmann::json dense = nlohmann::json::parse(kCounts);
  dense["units"]["experts"] = {{"modules", 0}, {"calls", 0}, {"rows", 0}, {"absent", "the reference 'Dense' has no experts"}};
  const auto ref = external_counted_fields(dense.dump(), "reference", external_units(), 16, "answer");
  EXPECT_EQ(ref["absent_units"]["experts"], "the reference 'Dense' has no experts");
  EXPECT_EQ(ref["executed_units_per_token"]["experts"], 0.0);
  // No blocks unit named: total and executed blocks are null.
  nlohmann::json c = nlohmann::json::parse(kCounts);
  c["units"].erase("blocks");
  const auto k = external_counted_fields(c.dump(), "live", {{"experts", 8}}, 16, "answer");
  EXPECT_TRUE(k["total_blocks"].is_null());
  EXPECT_TRUE(k["executed_blocks"].is_null());
}

TEST(ExecExternal, MalformedCountsAreRefused) {
  auto refused = [](const std::string& counts, const std::string& mode, const std::string& expected) {
    try {
      (void)external_counted_fields(counts, mode, external_units(), 16, "answer");
      ADD_FAILURE() << "accepted: " << counts;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  refused(counts_with("gemm_flops", -1), "live", "'gemm_flops' must be in [0");
  refused(R"({"gemm_flops": NaN})", "live", "counts is not valid JSON");
  refused(counts_with("controller_flops", "1e9"), "live", "'controller_flops' must be a number");
  nlohmann::json c = nlohmann::json::parse(kCounts);
  c.erase("zero_ops");
  refused(c.dump(), "live", "'zero_ops' is missing");
  refused(counts_with("controller_evaluations", 2.5), "live", "'controller_evaluations' must be an integer");
  refused(counts_with("controller_evaluations", 0), "live", "the live pass reports 0 controller evaluations");
  refused(kCounts, "replay", "the replay pass reports 4 controller evaluations, expected 0");
  refused(kCounts, "static_profile", "static_profile pass reports 4");
  // The units must be those of exec_prepare: the same kinds, the same matched modules.
  refused(counts_with("units", {{"blocks", {{"modules", 4}, {"calls", 4}, {"rows", 56}}}}), "live", "unit kinds");
  refused(counts_with("units", {{"blocks", {{"modules", 3}, {"calls", 4}, {"rows", 56}}}, {"experts", {{"modules", 8}, {"calls", 16}, {"rows", 32}}}}),
          "live", "3 modules, expected exec_prepare's 4");
  refused(counts_with("units", {{"blocks", {{"modules", 4}, {"calls", -4}, {"rows", 56}}}, {"experts", {{"modules", 8}, {"calls", 16}, {"rows", 32}}}}),
          "live", "'calls' must be in 0 ..");
  refused(counts_with("zero_ops", {{"aten.add.Tensor", -3}}), "live", "'aten.add.Tensor' must be in 0 ..");
  refused(counts_with("gemm_ops", {{"aten.mm.default", {{"calls", 1}}}}), "live", "'flops' is missing");
  refused(counts_with("modules", {{{"name", "b"}, {"class", "B"}, {"calls", 1}, {"rows", 1}, {"flops", -1.0}, {"controller", false}}}),
          "live", "'flops' must be in [0");
  refused(counts_with("modules", "blocks"), "live", "'modules' must be an array");
  refused(counts_with("unseen_work", {{{"kind", "guess"}, {"module", "m"}, {"what", "w"}, {"calls", 1}}}), "live",
          "kind \"guess\", expected \"parameter\" or \"multiply_then_sum\"");
  refused(counts_with("unseen_work", "none"), "live", "'unseen_work' must be an array");
  refused(counts_with("unit_warnings", {1}), "live", "unit_warnings[0] must be a string");
  nlohmann::json absent = nlohmann::json::parse(kCounts);
  absent["units"]["experts"] = {{"modules", 0}, {"calls", 0}, {"rows", 0}, {"absent", "no experts"}};
  refused(absent.dump(), "live", "'absent' is for a unit kind the reference lacks");
  absent["units"]["experts"]["rows"] = 3;
  refused(absent.dump(), "reference", "'absent' is for a unit kind the reference lacks");
  // A reference may evaluate a controller or not.
  EXPECT_NO_THROW((void)external_counted_fields(counts_with("controller_evaluations", 0), "reference", external_units(), 16, "a"));
}

// No saving is claimed from a partial count: fewer FLOPs and measurably faster, but a pass with
// work the counter could not see (or an operator without a formula) compares partial counts.
TEST(ExecExternal, NoSavingIsClaimedFromAPartialCount) {
  const nlohmann::ordered_json faster{{"estimate", 0.7}, {"ci95", {0.65, 0.75}}, {"runs", 5}, {"margin", 0.05}, {"difference", "faster"}};
  nlohmann::ordered_json live{{"mode", "live"}, {"gflop_per_token", 0.5}, {"fully_counted", true}};
  nlohmann::ordered_json reference{{"mode", "reference"}, {"gflop_per_token", 1.0}, {"fully_counted", true}};
  const auto full = saving(live, reference, faster);
  EXPECT_TRUE(full["saves"].get<bool>());
  EXPECT_TRUE(full["fully_counted"].get<bool>());
  live["fully_counted"] = false;
  const auto partial = saving(live, reference, faster);
  EXPECT_FALSE(partial["saves"].get<bool>());
  EXPECT_NE(partial["note"].get<std::string>().find("the live pass was not fully counted"), std::string::npos) << partial["note"];
  live["fully_counted"] = true;
  reference["fully_counted"] = false;
  EXPECT_FALSE(saving(live, reference, faster)["saves"].get<bool>());
  // Native passes carry no fully_counted: they are counted from the graph, in full.
  EXPECT_TRUE(saving({{"mode", "live"}, {"gflop_per_token", 0.5}}, {{"mode", "dense"}, {"gflop_per_token", 1.0}}, faster)["saves"].get<bool>());
}

SafetensorsReader prepare_answer(std::map<std::string, std::string> meta) {
  std::map<std::string, std::string> m{{"modes", R"([{"mode": "live"}, {"mode": "replay"}, {"mode": "static_profile", "profile": "LayerMean"},
                                                     {"mode": "reference", "label": "Dense"}])"},
                                       {"device", "cpu"}, {"timer", "perf_counter"}, {"threads", "2"}, {"units", R"({"blocks": 4})"},
                                       {"timed_pass", "run(ids, coefficients)"}};
  for (const auto& [k, v] : meta) m[k] = v;
  return SafetensorsReader(encode_safetensors({}, m), "answer");
}

TEST(ExecExternal, PrepareAnswerIsChecked) {
  const ExternalExecSetup s = parse_exec_prepare(prepare_answer({}));
  EXPECT_EQ(s.modes, (std::vector<std::string>{"live", "replay", "static_profile", "reference"}));
  EXPECT_EQ(s.reference_label, "Dense");
  EXPECT_EQ(s.threads, 2);
  EXPECT_EQ(s.units.dump(), R"({"blocks":4})");
  EXPECT_EQ(parse_exec_prepare(prepare_answer({{"modes", R"([{"mode": "live"}])"}})).reference_label, "");
  auto refused = [](std::map<std::string, std::string> meta, const std::string& expected) {
    try {
      (void)parse_exec_prepare(prepare_answer(std::move(meta)));
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  refused({{"modes", R"([{"mode": "replay"}, {"mode": "live"}])"}}, "must list \"live\" first");
  refused({{"modes", R"([{"mode": "live"}, {"mode": "fast"}])"}}, "mode \"fast\", expected live, replay");
  refused({{"modes", R"([{"mode": "live"}, {"mode": "live"}])"}}, "offered twice");
  refused({{"modes", R"([{"mode": "live"}, {"mode": "reference"}])"}}, "'label' is missing");
  refused({{"modes", "[]"}}, "non-empty JSON array");
  refused({{"timer", "wall"}}, "timer \"wall\"");
  refused({{"timed_pass", ""}}, "timed_pass is empty");
  refused({{"threads", "0"}}, "\"threads\"");
  refused({{"units", R"({"blocks": -1})"}}, "'blocks' must be in 0 ..");
  refused({{"units", "{blocks}"}}, "units is not valid JSON");
}

TEST(ExecExternal, SecondsMustBeAPositiveFiniteTime) {
  auto seconds = [](const std::string& text) { return external_seconds(SafetensorsReader(encode_safetensors({}, {{"seconds", text}}), "a")); };
  EXPECT_EQ(seconds("0.0125"), 0.0125);
  for (const char* bad : {"0", "0.0", "-0.1", "nan", "inf", "1e6", "2e7", "", "0.1s"}) EXPECT_THROW((void)seconds(bad), Error) << bad;
}

// exec.md for an external model: its label, executed blocks as a fraction, no mixing, the ratio to
// its reference in the table and in words below it, and the operators it could not count.
TEST(ExecExternal, MarkdownRendersExternalEntries) {
  auto ratio = [](double estimate, double low, double high, const char* difference) {
    return nlohmann::ordered_json{{"estimate", estimate}, {"ci95", {low, high}}, {"runs", 5}, {"margin", 0.05}, {"difference", difference}};
  };
  auto mode = [&](const char* name, nlohmann::ordered_json blocks, nlohmann::ordered_json ratio_to_reference, nlohmann::ordered_json uncounted) {
    return nlohmann::ordered_json{{"mode", name}, {"total_blocks", 4}, {"executed_blocks", blocks},
                                  {"gflop_per_token", 0.5}, {"gflop_per_pass_by_kind", {{"gemm", 1.0}, {"controller", 0.5}}},
                                  {"uncounted_ops", uncounted}, {"nll", 1.25},
                                  {"latency", {{"median_s", 0.002}, {"p10_s", 0.001}, {"p90_s", 0.003}}}, {"tokens_per_s", 8000.0},
                                  {"latency_ratio_to_dense", nullptr}, {"latency_ratio_to_reference", ratio_to_reference}};
  };
  nlohmann::ordered_json m{{"path", "external: python3 a.py"}, {"family", "external"}, {"label", "tiny"},
                           {"config", nlohmann::ordered_json::object()}, {"device", "cpu"}, {"timer", "perf_counter"},
                           {"tokens_per_pass", 16}, {"reference", {{"label", "Dense"}, {"mode", "reference"}}}};
  m["modes"] = {mode("live", 3.5, ratio(1.308, 1.251, 1.36, "slower"), {{"fca_test.opaque.default", 4}}),
                mode("replay", 4.0, ratio(0.8, 0.75, 0.85, "faster"), nlohmann::ordered_json::object()),
                mode("static_profile", nullptr, ratio(1.01, 0.97, 1.04, "no measurable difference at this size"), nlohmann::ordered_json::object()),
                mode("reference", 4.0, ratio(1.0, 1.0, 1.0, "no measurable difference at this size"), nlohmann::ordered_json::object())};
  nlohmann::ordered_json e{{"settings", {{"batch", 1}, {"runs", 5}, {"max_runs", 5}, {"warmup", 1}, {"margin", 0.05}}},
                           {"timing", {{"rounds", 5}, {"stopped_because", "the maximum of 5 rounds was reached"}}},
                           {"provenance", {{"threads", 2}}}, {"sgemm_peak_gflops", 100.0}, {"flop_convention", "native"},
                           {"flop_convention_external", "dispatcher"}, {"models", {m}}};
  const std::string md = exec_markdown(e);
  EXPECT_NE(md.find("| ratio to Dense (native) / reference (external) | NLL |"), std::string::npos) << md;
  EXPECT_NE(md.find("| tiny | live | 3.5 / 4 | 0.5 | 31.25 | – | 2.00 [1.00, 3.00] | 8000 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| tiny | static_profile | – |"), std::string::npos) << md;
  EXPECT_NE(md.find("| x1.308 [1.251, 1.360] slower | 1.2500 |"), std::string::npos) << md;
  EXPECT_NE(md.find("- `live`: 30.8% slower than Dense [25.1%, 36.0%]\n"), std::string::npos) << md;
  EXPECT_NE(md.find("- `replay`: 20.0% faster than Dense [15.0%, 25.0%]\n"), std::string::npos) << md;
  EXPECT_NE(md.find("- `static_profile`: 1.0% slower than Dense [-3.0%, +4.0%]: no measurable difference at this size\n"), std::string::npos) << md;
  EXPECT_EQ(md.find("- `reference`:"), std::string::npos) << md;
  EXPECT_NE(md.find("not counted: fca_test.opaque.default x4\n"), std::string::npos) << md;
  // Work the counter could not see and units that ran rows with no product are listed under the table.
  e["models"][0]["modes"][1]["unseen_work"] = {{{"kind", "parameter"}, {"module", "moe.0.experts.1"},
                                                {"what", "weight [16, 16] took part in no counted product"}, {"calls", 2}}};
  e["models"][0]["modes"][1]["unit_warnings"] = {"experts unit 'moe.0.experts.1': 34 rows and no counted product"};
  const std::string unseen = exec_markdown(e);
  EXPECT_NE(unseen.find("- `replay` ran work the counter could not see (not counted): moe.0.experts.1: parameter weight [16, 16] "
                        "took part in no counted product x2\n"),
            std::string::npos) << unseen;
  EXPECT_NE(unseen.find("- `replay`: experts unit 'moe.0.experts.1': 34 rows and no counted product\n"), std::string::npos) << unseen;
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
        SCOPED_TRACE(m["label"].dump() + " " + list + " " + mode["mode"].dump());
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
      SCOPED_TRACE(m["label"].dump() + " " + mode["mode"].dump());
      const auto& kind = mode["gflop_per_pass_by_kind"];
      EXPECT_TRUE(mode["counters_match_graph"].get<bool>());
      EXPECT_NEAR(mode["gflop_per_pass"].get<double>(),
                  kind["gemm"].get<double>() + kind["controller"].get<double>() + kind["mixing"].get<double>(), 1e-12);
      // Every mode mixes: the families' streams, and the Dense baseline's h + 1 F (the gated Dense
      // variant, whose unit gate is evaluated once per block but costs no controller FLOPs).
      EXPECT_GT(kind["mixing"].get<double>(), 0);
      if (mode["mode"] == "dense_same_shape") {
        EXPECT_EQ(mode["controller_evaluations_per_pass"], mode["executed_blocks"]);
      }
      // Routers and gates run only live (and in MoE's dense_experts, which routes live).
      const bool live = mode["mode"] == "live" || mode["mode"] == "dense_experts" || mode["mode"] == "dense_total_params";
      const bool has_controller = m["label"] != "dense" && mode["mode"] != "dense_same_shape";
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

TEST_F(ExecCli, ExternalFlagsAreChecked) {
  auto r = testing::run_fca({"exec", "--data", dir.path(), "--out", dir.file("x")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("fca: error: exec needs at least one --model or --external"), std::string::npos) << r.output;
  r = testing::run_fca({"exec", "--external", "sh -c 'exit 3'", "--skip-threshold", "0.5", "--data", dir.path(), "--out", dir.file("x")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("fca: error: --skip-threshold applies to fca's own models (--model)"), std::string::npos) << r.output;
  r = testing::run_fca({"exec", "--external", "sh -c 'exit 3'", "--external-timeout", "0", "--data", dir.path(), "--out", dir.file("x")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--external-timeout"), std::string::npos) << r.output;
  // An adapter that exits: named, and nothing written (the native model measured first included).
  r = testing::run_fca({"exec", "--model", dir.file("dense.safetensors"), "--external", "sh -c 'exit 3'", "--data", dir.path(),
                        "--runs", "1", "--warmup", "0", "--eval-windows", "8", "--out", dir.file("x"), "--no-progress"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("fca: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("sh -c 'exit 3'"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x/exec.json")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("x/exec.md")));
}

}  // namespace
}  // namespace fca
