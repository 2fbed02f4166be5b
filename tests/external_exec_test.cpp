// Claim 3 for a model fca does not implement (fca exec --external; docs/external-protocol.md): the
// executed work, the FLOPs and the latency are measured in the adapter's process from what ran, and
// exec.json carries them to the report. The models are examples/gated_hooked.py (the gated family in
// plain PyTorch, hooked) and tests/external/exec_models.py (routed, masked, skipping and opaque
// models written to be seen through).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "models/gated/config.h"
#include "models/gated/exec/flops.h"
#include "ops/attention.h"
#include "test_util.h"

namespace fca {
namespace {

using testing::python;
using testing::python_has_torch;
using testing::read_json;
using testing::run_fca;
using testing::run_shell;
using testing::source;

// exec.json holds FLOPs as GFLOP (flops / 1e9, a double). Converting back is exact to about 1e-16
// relative, while one FLOP of difference in the ~1e8-1e9 FLOPs of these passes is >= 1e-9 relative:
// a relative tolerance of 1e-12 therefore compares the integer counts exactly.
void expect_flops(double gflop, double flops, const std::string& what) {
  EXPECT_NEAR(gflop * 1e9, flops, 1e-12 * std::max(1.0, flops)) << what;
}

class ExternalExec : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(python_has_torch()) << python() << " cannot import torch and numpy: `make test` installs Debian's "
                                    << "python3-torch (FCA_WITH_TORCH=1 scripts/install_deps.sh)";
    testing::write_corpus(dir.path(), 200000, 12000, 12000);
  }
  // fca exec's arguments for a short measurement (batch 8, the default).
  std::vector<std::string> exec_args(const std::string& out, int runs = 3) const {
    return {"exec", "--data", dir.path(), "--runs", std::to_string(runs), "--max-runs", std::to_string(runs), "--warmup", "1",
            "--eval-windows", "16", "--calib-windows", "8", "--no-progress", "--out", out};
  }
  // exec.json of one external model (its entry), after asserting that fca exec succeeded.
  nlohmann::json exec_external(const std::string& command, const std::string& out, int runs = 3) const {
    auto args = exec_args(out, runs);
    args.insert(args.end(), {"--external", command});
    const auto r = run_fca(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (r.exit_code != 0) return nlohmann::json();
    const auto j = read_json(out + "/exec.json");
    EXPECT_EQ(j["models"].size(), 1u);
    return j["models"][0];
  }
  std::string exec_model(const std::string& style, const std::string& extra = "") const {
    return python() + " " + source("tests/external/exec_models.py") + " --style " + style + extra;
  }
  // A gated checkpoint of L 3, D 48, H 2, T 64, briefly trained (counts and latency do not depend on the weights).
  std::string train(const std::string& gate) const {
    const std::string path = dir.file(gate + ".safetensors");
    const auto r = run_fca({"train", "--gate", gate, "--layers", "3", "--dim", "48", "--heads", "2", "--seq", "64", "--steps", "20",
                            "--eval-every", "0", "--data", dir.path(), "--no-progress", "--out", path});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return path;
  }
  std::string hooked(const std::string& model, const std::string& reference) const {
    return python() + " " + source("examples/gated_hooked.py") + " --model " + model + " --reference " + reference;
  }
  static const nlohmann::json& mode(const nlohmann::json& entry, const std::string& name) {
    for (const auto& m : entry["modes"])
      if (m["mode"] == name) return m;
    throw std::runtime_error("no mode " + name + " in " + entry["modes"].dump().substr(0, 200));
  }
  testing::TempDir dir;
};

// The hooked FeatureGate checkpoint counts the same GEMM FLOPs as fca's native engine, with one
// documented difference of convention: fca's blocked causal attention kernel executes only the
// (query, key) pairs of the tiles on and below the diagonal (attention_executed_pairs), while the
// PyTorch model multiplies the full T x T score matrix, which the dispatcher counts as it runs. Its
// controller's product phi . w_l (an mv of 2 x 4 FLOPs per row) is counted at the dispatcher, where
// fca's native convention counts the controller's element-wise arithmetic instead.
TEST_F(ExternalExec, FeatureGateCountsAgreeWithNativeAndTheReportShowsClaim3) {
  const std::string fg = train("featuregate"), dense = train("dense");
  auto native_args = exec_args(dir.file("native"));
  native_args.insert(native_args.end(), {"--model", fg});
  const auto r = run_fca(native_args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto native = read_json(dir.file("native/exec.json"))["models"][0];
  const auto external = exec_external(hooked(fg, dense), dir.file("external"));
  ASSERT_FALSE(external.is_null());

  const int B = 8, T = 64, L = 3, D = 48;
  GatedConfig c;
  c.n_layer = L, c.d_model = D, c.n_head = 2, c.seq_len = T, c.gate = GateKind::featuregate;
  const double native_gemm = gated_forward_flops(c, B, T, L);
  expect_flops(mode(native, "live")["gflop_per_pass_by_kind"]["gemm"], native_gemm, "native GEMM FLOPs");
  const double blocked_attention = 4.0 * L * B * double(attention_executed_pairs(T)) * D;
  const double full_attention = 4.0 * L * B * double(T) * T * D;
  ASSERT_LT(blocked_attention, full_attention);  // the conventions differ at T 64, so the test can tell them apart
  const auto& live = mode(external, "live");
  expect_flops(live["gflop_per_pass_by_kind"]["gemm"], native_gemm - blocked_attention + full_attention, "hooked GEMM FLOPs");
  expect_flops(live["gflop_per_pass_by_kind"]["controller"], 2.0 * B * T * 4 * L, "the controller's products");
  EXPECT_EQ(live["executed_blocks"].get<double>(), mode(native, "live")["executed_blocks"].get<double>());
  EXPECT_EQ(live["total_blocks"], L);
  EXPECT_EQ(live["controller_evaluations_per_pass"], L);  // GateController once per block
  EXPECT_TRUE(live["uncounted_ops"].empty()) << live["uncounted_ops"];

  EXPECT_EQ(external["family"], "external");
  EXPECT_EQ(external["model_sha256"], native["model_sha256"]);  // the same weights file
  for (const char* name : {"replay", "static_profile"}) {
    EXPECT_EQ(mode(external, name)["controller_evaluations_per_pass"], 0) << name;
    expect_flops(mode(external, name)["gflop_per_pass_by_kind"]["gemm"], native_gemm - blocked_attention + full_attention, name);
  }
  EXPECT_TRUE(mode(external, "replay")["exact"].get<bool>());
  // FeatureGate's statistics (phi_2 is the only logsumexp) are computed inside its controller: live
  // runs them, a replay, which never calls the controller, none.
  EXPECT_TRUE(live["zero_ops"].contains("aten.logsumexp.default")) << live["zero_ops"];
  for (const char* name : {"replay", "static_profile"})
    EXPECT_FALSE(mode(external, name)["zero_ops"].contains("aten.logsumexp.default")) << name << mode(external, name)["zero_ops"];
  EXPECT_EQ(mode(external, "replay")["nll"], live["nll"]);  // exact replay: the same NLL bit for bit
  // The Dense reference has the same products and no controller.
  const auto& reference = mode(external, "reference");
  EXPECT_EQ(external["reference"]["label"], "Dense");
  expect_flops(reference["gflop_per_pass_by_kind"]["gemm"], native_gemm - blocked_attention + full_attention, "Dense reference");
  EXPECT_EQ(reference["gflop_per_pass_by_kind"]["controller"], 0.0);
  ASSERT_TRUE(live["latency_ratio_to_reference"].is_object());
  EXPECT_TRUE(live["latency_ratio_to_dense"].is_null());  // never against a native engine
  ASSERT_EQ(external["savings"].size(), 1u);
  EXPECT_EQ(external["savings"][0]["against"], "reference");

  // The report's card of the hooked model's audit shows claim 3 from this exec.json.
  auto audit = run_fca({"audit", "--external", hooked(fg, dense), "--data", dir.path(), "--eval-windows", "16", "--calib-windows",
                        "16", "--reps", "2", "--bootstrap", "100", "--no-progress", "--out", dir.file("audit")});
  ASSERT_EQ(audit.exit_code, 0) << audit.output;
  const auto rep = run_fca({"report", "--audit", dir.file("audit/audit.json"), "--exec", dir.file("external/exec.json"), "--out",
                            dir.file("report.html")});
  ASSERT_EQ(rep.exit_code, 0) << rep.output;
  const std::string html = testing::read_bytes(dir.file("report.html"));
  EXPECT_NE(html.find("3 of 3 blocks per token execute with the live controller"), std::string::npos);
  EXPECT_NE(html.find("than Dense ["), std::string::npos);
  EXPECT_EQ(html.find("Not measured (no exec.json"), std::string::npos);
}

// Routed experts: each expert runs on the rows routed to it, so its FLOPs are exactly its rows times
// the per-row cost 2 D^2, the rows of a layer sum to k per token, and the total is below the
// dense-experts figure. The same router written with dense masking runs every expert on every token.
TEST_F(ExternalExec, ExpertsRunOnTheRowsRoutedToThemAndMaskingShowsFullExecution) {
  const int B = 8, T = 16, D = 16, E = 4, K = 2, L = 3;
  const double dense_experts = double(B) * T * E * L * 2.0 * D * D;
  for (const std::string style : {"routed", "masked"}) {
    const auto e = exec_external(exec_model(style), dir.file(style));
    ASSERT_FALSE(e.is_null());
    const auto& live = mode(e, "live");
    EXPECT_EQ(e["units"]["experts"], E * L);
    double rows = 0, flops = 0;
    int experts = 0;
    for (const auto& m : live["modules"]) {
      const std::string name = m["name"];
      if (name.find(".experts.") == std::string::npos) continue;
      ++experts;
      expect_flops(m["gflop"], m["rows"].get<double>() * 2.0 * D * D, style + " " + name);
      rows += m["rows"].get<double>();
      flops += m["gflop"].get<double>() * 1e9;
    }
    EXPECT_EQ(experts, E * L) << style;
    const double per_token = style == "routed" ? K * L : E * L;
    EXPECT_EQ(rows, per_token * B * T) << style;
    EXPECT_EQ(live["executed_units_per_token"]["experts"].get<double>(), per_token) << style;
    if (style == "routed")
      EXPECT_LT(flops, dense_experts);
    else
      EXPECT_NEAR(flops, dense_experts, 1e-12 * dense_experts);
  }
}

// A block that truly skips half of each window's tokens runs on fewer rows; one whose "skip"
// multiplies its update by 0 runs on every row.
TEST_F(ExternalExec, SkippingShowsInTheRowsAndMultiplyingByZeroDoesNot) {
  const auto skip = exec_external(exec_model("skip"), dir.file("skip"));
  const auto zero = exec_external(exec_model("zero"), dir.file("zero"));
  ASSERT_FALSE(skip.is_null());
  ASSERT_FALSE(zero.is_null());
  EXPECT_EQ(mode(skip, "live")["total_blocks"], 4);
  EXPECT_EQ(mode(skip, "live")["executed_blocks"].get<double>(), 3.5);
  EXPECT_EQ(mode(zero, "live")["executed_blocks"].get<double>(), 4.0);
}

// A product in a custom operator has no formula: it is listed by name with its calls, never counted
// as 0 silently; the same product through a custom autograd Function calling torch.mm is counted.
TEST_F(ExternalExec, AnOperatorWithoutAFormulaIsListedAsUncounted) {
  const auto e = exec_external(exec_model("opaque"), dir.file("opaque"));
  ASSERT_FALSE(e.is_null());
  const auto& live = mode(e, "live");
  ASSERT_TRUE(live["uncounted_ops"].contains("fca_test.opaque_matmul.default")) << live["uncounted_ops"];
  EXPECT_EQ(live["uncounted_ops"]["fca_test.opaque_matmul.default"], 1);
  ASSERT_TRUE(live["gemm_ops"].contains("aten.mm.default")) << live["gemm_ops"];
  EXPECT_EQ(live["gemm_ops"]["aten.mm.default"]["calls"], 1);
  expect_flops(live["gemm_ops"]["aten.mm.default"]["gflop"], 2.0 * 8 * 16 * 16 * 16, "the Function's torch.mm");
  const std::string md = testing::read_bytes(dir.file("opaque/exec.md"));
  EXPECT_NE(md.find("fca_test.opaque_matmul.default"), std::string::npos) << md;
}

// An MoE measured against a Dense model, which has no experts: the reference counts them as 0 with
// the reason, and the rest is compared as for any reference.
TEST_F(ExternalExec, AnMoeIsMeasuredAgainstADenseReferenceWithoutExperts) {
  const auto e = exec_external(exec_model("routed", " --reference dense"), dir.file("moe-dense"));
  ASSERT_FALSE(e.is_null());
  const auto& reference = mode(e, "reference");
  EXPECT_EQ(e["reference"]["label"], "Dense");
  EXPECT_EQ(reference["executed_units_per_token"]["experts"], 0.0);
  EXPECT_NE(reference["absent_units"]["experts"].get<std::string>().find("has no module matching executed['experts']"), std::string::npos)
      << reference["absent_units"];
  EXPECT_EQ(reference["executed_blocks"].get<double>(), 3.0);
  EXPECT_TRUE(mode(e, "live")["fully_counted"].get<bool>());
  ASSERT_EQ(e["savings"].size(), 1u);
  EXPECT_GT(e["savings"][0]["flop_ratio"].get<double>(), 1.0);  // the MoE adds expert work to the same blocks
  const std::string md = testing::read_bytes(dir.file("moe-dense/exec.md"));
  EXPECT_NE(md.find("- `reference`: experts counted as 0: the reference 'Dense' has no module"), std::string::npos) << md;
}

// Experts whose products run in numpy: no operator is uncounted, but their weights took part in no
// counted product, so the pass is not fully counted and no saving is claimed, with the reason.
TEST_F(ExternalExec, WorkOutsideTheDispatcherIsListedAndNoSavingIsClaimed) {
  const auto e = exec_external(exec_model("numpy", " --reference dense"), dir.file("numpy"));
  ASSERT_FALSE(e.is_null());
  const auto& live = mode(e, "live");
  EXPECT_TRUE(live["uncounted_ops"].empty()) << live["uncounted_ops"];
  EXPECT_FALSE(live["fully_counted"].get<bool>());
  ASSERT_FALSE(live["unseen_work"].empty());
  EXPECT_EQ(live["unseen_work"][0]["kind"], "parameter");
  EXPECT_NE(live["unseen_work"][0]["module"].get<std::string>().find(".experts."), std::string::npos) << live["unseen_work"];
  EXPECT_FALSE(live["unit_warnings"].empty());
  ASSERT_EQ(e["savings"].size(), 1u);
  EXPECT_FALSE(e["savings"][0]["saves"].get<bool>());
  EXPECT_NE(e["savings"][0]["note"].get<std::string>().find("not fully counted"), std::string::npos) << e["savings"][0];
  const std::string md = testing::read_bytes(dir.file("numpy/exec.md"));
  EXPECT_NE(md.find("ran work the counter could not see"), std::string::npos) << md;
}

// A replay whose logits differ from the live pass's is refused: exact is computed from the digests,
// and the error names the adapter by its name, not by its command.
TEST_F(ExternalExec, AnInexactReplayIsRefused) {
  auto args = exec_args(dir.file("inexact"));
  args.insert(args.end(), {"--external", exec_model("inexact")});
  const auto r = run_fca(args);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("adapter 'MoeStyle': the replay of the counted timing batch"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("replay is not exact"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("inexact/exec.json")));
}

// A bad flag, and an adapter that dies in the middle of the measurement: a clear error, no exec.json.
TEST_F(ExternalExec, BadFlagsAndADyingAdapterLeaveNoExecJson) {
  auto refused = [&](std::vector<std::string> extra, const std::string& part) {
    auto args = exec_args(dir.file("bad"));
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_fca(args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("fca: error:"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(part), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir.file("bad/exec.json")));
    EXPECT_FALSE(std::filesystem::exists(dir.file("bad/exec.md")));
  };
  refused({"--external", exec_model("routed"), "--skip-threshold", "0.5"}, "--skip-threshold");
  refused({"--external", exec_model("routed", " --die-after 5")}, "exited with status 3");
  refused({}, "--external");
}

// The counting rules on cases with known answers (every product's formula, the operators listed as
// 0 or uncounted, rows, attribution, controllers) and the CUDA timer's order of events on a stand-in
// for torch.cuda: tests/external/check_exec_counting.py.
TEST_F(ExternalExec, CountingRulesAndTheCudaTimer) {
  const auto [status, output] = run_shell(python() + " " + source("tests/external/check_exec_counting.py") + " 2>&1");
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("all checks passed"), std::string::npos) << output;
}

// What the counter must never count as 0 without a trace (numpy, multiply-then-sum, fused paths,
// operators that had no formula, rows from the wrong argument, the root against "outside every
// module", units with products on 0 rows) and the agreement with torch.profiler's count:
// tests/external/check_exec_unseen.py.
TEST_F(ExternalExec, NothingIsCountedAsZeroWithoutATrace) {
  const auto [status, output] = run_shell(python() + " " + source("tests/external/check_exec_unseen.py") + " 2>&1");
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("all checks passed"), std::string::npos) << output;
}

// fca_adapter.exec measures the model this Python process holds and returns exec.json.
TEST_F(ExternalExec, PythonApiMeasuresTheModelInProcess) {
  const std::string cmd = std::string("FCA_BIN=") + FCA_BINARY + " " + python() + " " + source("tests/external/api_checks.py") + " exec " +
                          dir.path() + " " + dir.file("api") + " 2>&1";
  const auto [status, output] = run_shell(cmd);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("all checks passed"), std::string::npos) << output;
}

}  // namespace
}  // namespace fca
