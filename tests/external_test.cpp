// Audits of models fca does not implement, through the external protocol (docs/external-protocol.md)
// and the PyTorch adapters in examples/: they agree with fca's native audit of the same checkpoint,
// and a broken adapter gets a clear error and leaves no partial output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include "core/json.h"

#include "core/error.h"
#include "models/external/protocol.h"
#include "models/gated/model.h"
#include "audit_agreement.h"
#include "test_util.h"

namespace fca {
namespace {

using testing::python;
using testing::python_has_torch;
using testing::read_json;
using testing::run_fca;
using testing::run_shell;
using testing::source;

// The transport alone, with shell commands standing in for adapters (no Python needed).
TEST(AdapterConnection, SafetensorsDocumentsRoundTripInMemory) {
  const std::vector<int32_t> ids{1, -2, 3, 4, 5, 6};
  const std::vector<uint8_t> text{'a', 'b', 'c'};
  const std::string doc = encode_safetensors({{"ids", {2, 3}, ids.data(), DType::I32}, {"text", {3}, text.data(), DType::U8}},
                                             {{"type", "tokenize"}});
  const SafetensorsReader r(doc, "message");
  EXPECT_EQ(r.metadata().at("type"), "tokenize");
  EXPECT_EQ(r.read_as_double("ids"), (std::vector<double>{1, -2, 3, 4, 5, 6}));
  EXPECT_EQ(r.get("text").dtype, DType::U8);
}

TEST(AdapterConnection, MalformedFieldsAreNamed) {
  const SafetensorsReader r(encode_safetensors({}, {{"vocab", "12x"}, {"layers", "-1"}, {"big", "99999999999999999999"}}), "answer");
  auto message = [&](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { answer_integer(r, "vocab", 2, 100); }).find("field \"vocab\" is \"12x\", expected an integer"), std::string::npos);
  EXPECT_NE(message([&] { answer_integer(r, "layers", 1, 100); }).find("field \"layers\" is -1, expected 1 .. 100"), std::string::npos);
  EXPECT_NE(message([&] { answer_integer(r, "big", 1, 100); }).find("expected an integer"), std::string::npos);
  EXPECT_NE(message([&] { answer_text(r, "family"); }).find("metadata field \"family\" is missing"), std::string::npos);
}

TEST(AdapterConnection, ExitAndSilenceAreErrors) {
  auto message = [](const std::string& command, double timeout) {
    try {
      AdapterConnection c(command, timeout);
      c.request("describe", {});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // It exits after reading the length prefix: fca is still sending or already waiting, either way
  // the error names the exit status.
  EXPECT_NE(message("head -c 8 >/dev/null; exit 7", 10).find("exited with status 7"), std::string::npos);
  EXPECT_NE(message("exec sleep 30", 0.3).find("did not send an answer to describe within 0.3 s"), std::string::npos);
}

TEST(AdapterConnection, FramesBothWays) {
  // `cat` echoes each request: a well-framed answer of the request's own type.
  AdapterConnection echo("exec cat", 10);
  const std::vector<double> nll{0.5, 1.5};
  const SafetensorsReader a = echo.request("run_replay", {{"nll", {2}, nll.data(), DType::F64}});
  EXPECT_EQ(answer_text(a, "protocol"), kExternalProtocol);
  EXPECT_EQ(a.read_as_double("nll"), nll);
  EXPECT_EQ(echo.requests(), 1);
}

class External : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(python_has_torch()) << python() << " cannot import torch and numpy: `make test` installs Debian's "
                                    << "python3-torch (FCA_WITH_TORCH=1 scripts/install_deps.sh)";
    testing::write_corpus(dir.path(), 200000, 12000, 12000);
  }
  std::string adapter(const std::string& script, const std::string& model, const std::string& extra = "") const {
    return python() + " " + source(script) + " --model " + model + " --threads 2" + extra;
  }
  std::vector<std::string> audit_args(const std::string& out) const {
    return {"audit", "--data", dir.path(), "--eval-windows", "32", "--calib-windows", "32", "--reps", "4",
            "--bootstrap", "1000", "--no-progress", "--out", out};
  }
  // `worst_out`: the largest relative difference over the figures compared.
  void expect_agreement(const std::vector<std::string>& native_model, const std::string& command, double* worst_out = nullptr) {
    auto native_args = audit_args(dir.file("native"));
    native_args.insert(native_args.end(), native_model.begin(), native_model.end());
    auto r = run_fca(native_args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto external_args = audit_args(dir.file("external"));
    external_args.insert(external_args.end(), {"--external", command});
    r = run_fca(external_args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto n = read_json(dir.file("native/audit.json")), e = read_json(dir.file("external/audit.json"));
    EXPECT_EQ(e["model"]["family"], "external");
    EXPECT_EQ(e["exact_replay"]["logits_compared"], "sha256");
    EXPECT_EQ(n["exact_replay"]["logits_compared"], "values");
    EXPECT_TRUE(e["exact_replay"]["passed"].get<bool>());
    EXPECT_EQ(e["provenance"]["model_sha256"], n["provenance"]["model_sha256"]);  // the same weights file
    for (const auto& c : e["conditions"]) EXPECT_EQ(c["controller_evaluations"], 0) << c["name"];
    double worst = 0;
    std::string worst_path;
    testing::expect_same_figures(n, e, "", worst, worst_path);
    std::printf("largest native/external difference: %.3g at %s\n", worst, worst_path.c_str());
    if (worst_out != nullptr) *worst_out = worst;
  }
  testing::TempDir dir;
};

TEST_F(External, FeatureGateThroughPyTorchAgreesWithNative) {
  const std::string model = dir.file("fg.safetensors");
  auto r = run_fca({"train", "--gate", "featuregate", "--layers", "3", "--dim", "48", "--heads", "2", "--seq", "64",
                    "--steps", "400", "--lr", "3e-3", "--eval-every", "0", "--data", dir.path(), "--no-progress",
                    "--out", model});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Retention is 1 - DeltaNLL(static) / DeltaNLL(structure_removed): with gates near 0.5 in every
  // layer (a briefly trained model) the denominator is ~0 and the ratio amplifies the engines'
  // 1e-7 rounding differences without bound. Distinct per-layer gate biases make structure_removed
  // (one global gate) cost something, so that every figure is well conditioned.
  GatedModel<float> m = GatedModel<float>::load(model);
  const float biases[3] = {-2.0f, 0.0f, 2.0f};
  for (int l = 0; l < 3; ++l) m.weights().gate_bias[l] = biases[l];
  m.save(model);
  expect_agreement({"--model", model}, adapter("examples/gated_adapter.py", model));
  // The same model unmodified, through hooks on its controller module alone (examples/gated_hooked.py).
  std::filesystem::remove_all(dir.file("native"));
  std::filesystem::remove_all(dir.file("external"));
  double worst = 1;
  expect_agreement({"--model", model}, adapter("examples/gated_hooked.py", model), &worst);
  EXPECT_LE(worst, 1e-6);  // every deterministic figure (6.5e-8 measured: float32 rounding of two engines)
}

TEST_F(External, MuddThroughPyTorchAgreesWithNative) {
  const std::string folder = std::string(FCA_SOURCE_DIR) + "/tests/data/muddpythia-tiny";
  ASSERT_TRUE(std::filesystem::exists(folder + "/config.json")) << folder;
  expect_agreement({"--model", folder}, adapter("examples/mudd_adapter.py", folder));
}

TEST_F(External, MuddExampleMatchesTheReferenceFixture) {
  // The example's PyTorch MUDD against the reference implementation's golden outputs, and its
  // bitwise replay (tests/external/check_mudd_example.py says what it checks and why).
  const std::string cmd = python() + " " + source("tests/external/check_mudd_example.py") + " --testdata " +
                          std::string(FCA_SOURCE_DIR) + "/tests/data 2>&1";
  const auto [status, output] = run_shell(cmd);
  EXPECT_EQ(status, 0) << output;
}

// Discovery: every module that ran, its output shapes and whether it varied with the input, so that
// a user can pick the controller globs.
TEST_F(External, ModulesAreListedForPickingControllers) {
  const std::string cmd = "PYTHONPATH=" + source("python") + " " + python() + " -m fca_adapter modules --build " +
                          source("tests/external/hooked_models.py") + ":mudd_model 2>&1";
  const auto [status, output] = run_shell(cmd);
  ASSERT_EQ(status, 0) << output;
  for (const char* row : {"dynamic_dense.0                          DynamicDense           1  yes     [2, 2, 16, 2]",
                          "dynamic_dense.2                          DynamicDense           1  yes     [2, 2, 16, 4]",
                          "head                                     Linear                 1  yes     [2, 16, 256]"})
    EXPECT_NE(output.find(row), std::string::npos) << row << "\n" << output;
}

TEST_F(External, StudyWithAnExternalVariant) {
  // The study trains fg, then audits the same checkpoint natively and through the PyTorch adapter.
  const std::string out = dir.file("study");
  testing::write_text(dir.file("study.json"), R"({
    "data": ")" + dir.path() + R"(",
    "seeds": [1],
    "variants": [
      {"name": "fg", "arch": "gated", "gate": "featuregate", "layers": 2, "dim": 16, "heads": 2, "seq": 16},
      {"name": "fg-pytorch", "arch": "external", "command": ")" + adapter("examples/gated_adapter.py", out + "/fg-s1.safetensors") + R"("}
    ],
    "train": {"batch": 4, "steps": 6, "warmup": 2, "eval_every": 6, "eval_windows": 4, "checkpoint_every": 3},
    "eval_windows": 8,
    "audit": {"eval_windows": 8, "calib_windows": 8, "reps": 2, "bootstrap": 100},
    "exec": {"runs": 2, "max_runs": 2, "warmup": 0, "eval_windows": 4, "calib_windows": 4}
  })");
  auto r = run_fca({"study", "--config", dir.file("study.json"), "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f : {"fg-pytorch.eval-test.json", "fg-pytorch-audit/audit.json", "report.html"})
    EXPECT_TRUE(std::filesystem::exists(out + "/" + f)) << f;
  const auto native = read_json(out + "/fg-s1-audit/audit.json"), external = read_json(out + "/fg-pytorch-audit/audit.json");
  EXPECT_NEAR(native["baseline"]["nll"].get<double>(), external["baseline"]["nll"].get<double>(), 1e-5);
  EXPECT_NE(testing::read_bytes(out + "/report.html").find("[external: gated-pytorch]"), std::string::npos);
  // Its execution is measured through the adapter with the native variant's, and its card shows it.
  const auto exec = read_json(out + "/exec/exec.json");
  ASSERT_EQ(exec["models"].size(), 2u);
  EXPECT_EQ(exec["models"][1]["family"], "external");
  EXPECT_EQ(exec["models"][1]["model_sha256"], external["provenance"]["model_sha256"]);
  EXPECT_EQ(exec["models"][1]["modes"][0]["executed_blocks"], 2.0);
  EXPECT_NE(testing::read_bytes(out + "/report.html").find("measured in the adapter&#39;s process"), std::string::npos);
  r = run_fca({"study", "--config", dir.file("study.json"), "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("audit fg-pytorch (external): done before, skipped"), std::string::npos) << r.output;
}

TEST_F(External, StudyRejectsAnExternalVariantWithoutCommand) {
  testing::write_text(dir.file("study.json"), R"({"data": ")" + dir.path() + R"(", "variants": [{"name": "x", "arch": "external"}]})");
  const auto r = run_fca({"study", "--config", dir.file("study.json"), "--out", dir.file("study")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("arch \"external\" needs a 'command'"), std::string::npos) << r.output;
}

// Models written in the styles of third-party code (tests/external/hooked_models.py), audited as
// they are through fca_adapter.HookedAdapter: a MUDD-style [C, B, T, L] controller with per-layer
// sizes, a router Linear over flattened tokens with inline top-k, one gate called twice per pass, a
// tuple-returning gate with converters, a bf16 gate, a gate emitting fp16. Each passes exact replay
// and the sensitivity probe with 0 controller evaluations in every replay, and every replay's digest
// of what the hooked modules returned matches what fca sent rounded to their dtype (bf16 and fp16:
// the static and probe coefficients are not 16-bit values); what the hooks cannot vouch for is refused.
TEST_F(External, HookedModelsOfThirdPartyStylesAreAuditedAsTheyAre) {
  const std::map<std::string, int> layers{{"mudd", 3}, {"moe", 3},     {"twice", 2},  {"tuple", 3},
                                          {"bf16", 3}, {"fp16", 3}, {"tensors", 3}};
  for (const auto& [style, L] : layers) {
    const std::string out = dir.file("hooked-" + style);
    auto args = audit_args(out);
    const std::string command = python() + " " + source("tests/external/hooked_models.py") + " --style " + style;
    args.insert(args.end(), {"--external", command});
    const auto r = run_fca(args);
    ASSERT_EQ(r.exit_code, 0) << style << ": " << r.output;
    const auto j = read_json(out + "/audit.json");
    // Named by the model's class (HookedAdapter's default name); the command is provenance.
    const std::string name = style == "mudd" ? "MuddStyle" : style == "moe" ? "MoeStyle" : style == "tensors" ? "TensorKinds" : "GatedStyle";
    EXPECT_EQ(j["model"]["path"], "external: " + name) << style;
    EXPECT_EQ(j["provenance"]["model"], "external: " + name) << style;
    EXPECT_EQ(j["provenance"]["adapter_command"], command) << style;
    EXPECT_NE(r.output.find("audit of external: " + name + ":"), std::string::npos) << r.output;
    EXPECT_TRUE(j["exact_replay"]["passed"].get<bool>()) << style;
    EXPECT_TRUE(j["replay_sensitivity"]["passed"].get<bool>()) << style;
    EXPECT_EQ(j["model"]["coefficient_shape"]["layer"], L) << style;
    EXPECT_EQ(j["model"]["controller_evaluations_counted_by"], "the adapter (reported in its answers)");
    for (const auto& c : j["conditions"]) EXPECT_EQ(c["controller_evaluations"], 0) << style << " " << c["name"];
    // Without identity coefficients the identity condition is skipped, and the audit says why.
    if (style == "mudd" || style == "moe") {
      EXPECT_NE(j["settings"]["skipped_reasons"]["identity"].get<std::string>().find("no identity coefficients"), std::string::npos);
    }
  }
  auto refused = [&](const std::string& style, const std::string& fault, const std::string& part) {
    auto args = audit_args(dir.file("hooked-" + fault));
    args.insert(args.end(), {"--external", python() + " " + source("tests/external/hooked_models.py") + " --style " + style +
                                               " --fault " + fault});
    const auto r = run_fca(args);
    EXPECT_NE(r.exit_code, 0) << fault << ": " << r.output;
    EXPECT_NE(r.output.find(part), std::string::npos) << fault << ": " << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir.file("hooked-" + fault + "/audit.json")));
  };
  refused("bf16", "unused", "replay sensitivity probe failed");
  refused("tuple", "direct", "module 'gates.0.proj', inside the controller 'gates.0', was called");
  // The gate's class-level forward, called directly, bypasses its hooks and its replacement: it
  // still counts as an evaluation, and fca's check of 0 evaluations in replay fails.
  refused("fp16", "classcall", "the controller was evaluated");
  // The converter edits the gate's output in place: recording and replay agree with each other, but
  // not with the model run without hooks, which is the plain live pass exact replay compares with.
  refused("tuple", "inplace", "recording the coefficients changed the run");
  // The model receives other values than fca sent (its converter clamps them to [0, 1]): the digest
  // of what the hooked modules returned differs from what fca sent.
  refused("tuple", "clamp", "the adapter's replay used coefficients with SHA-256");
}

// The Python API: fca_adapter.audit runs fca on the model this Python process holds (no second
// Python process), returns audit.json and raises AuditError with fca's message.
TEST_F(External, PythonApiAuditsTheModelInProcess) {
  const std::string cmd = std::string("FCA_BIN=") + FCA_BINARY + " " + python() + " " + source("tests/external/api_checks.py") + " audit " +
                          dir.path() + " " + dir.file("api") + " 2>&1";
  const auto [status, output] = run_shell(cmd);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("all checks passed"), std::string::npos) << output;
}

// python/ installs as a package offline (Debian 12, python3-torch from Debian), into a virtual
// environment that sees the system's torch; installed from a copy, so the tree stays clean.
TEST_F(External, PythonPackageInstallsOffline) {
  std::filesystem::copy(source("python"), dir.file("python-src"), std::filesystem::copy_options::recursive);
  const std::string venv = dir.file("venv");
  const std::string cmd = python() + " -m venv --system-site-packages " + venv + " && " + venv +
                          "/bin/pip install -q --no-index --no-build-isolation " + dir.file("python-src") + " && cd " +
                          dir.path() + " && " + venv + "/bin/python -c 'import fca_adapter; print(fca_adapter.HookedAdapter.__name__)' 2>&1";
  const auto [status, output] = run_shell(cmd);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("HookedAdapter"), std::string::npos) << output;
}

class BrokenAdapter : public External {
 protected:
  void SetUp() override {
    External::SetUp();
    GatedModel<float>::initialized(testing::tiny_config(GateKind::featuregate), 1).save(model);
  }
  // The audit fails with every part of `message_parts` in its output, and writes no audit.json,
  // windows.csv, audit.md or temporary file.
  void expect_failure(const std::string& fault, const std::vector<std::string>& message_parts,
                      const std::vector<std::string>& extra = {}) {
    auto args = audit_args(dir.file("out"));
    args.insert(args.end(), {"--external", adapter("tests/external/faulty_adapter.py", model, " --fault " + fault)});
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_fca(args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    for (const auto& part : message_parts) EXPECT_NE(r.output.find(part), std::string::npos) << "missing '" << part << "' in: " << r.output;
    if (std::filesystem::exists(dir.file("out")))
      for (const auto& entry : std::filesystem::directory_iterator(dir.file("out"))) {
        const std::string name = entry.path().filename().string();
        // A complete coefficient cache may stay (it is valid, and a rerun reuses it); nothing else.
        EXPECT_EQ(name, "cache.safetensors") << "left behind after a failed audit: " << name;
      }
  }
  std::string model = dir.file("m.safetensors");
};

TEST_F(BrokenAdapter, WrongShape) {
  // Found in the plan's first recording pass (the plain live passes before it record nothing).
  expect_failure("wrong_shape", {"answer to run_live", "tensor 'coefficients' is F32 [8, 2, 15, 1, 1]", "expected F32 [8, 2, 16, 1, 1]"});
}

TEST_F(BrokenAdapter, InexactReplay) {
  expect_failure("inexact", {"exact replay failed", "logits SHA-256 differs in 4 of 4 batches"});
}

TEST_F(BrokenAdapter, ProcessExits) {
  expect_failure("exit", {"exited with status 3", "run_replay"});
}

TEST_F(BrokenAdapter, ProcessHangs) {
  expect_failure("hang", {"did not send an answer to run_replay within 3 s", "--external-timeout"}, {"--external-timeout", "3"});
}

TEST_F(BrokenAdapter, PrintsToStdout) {
  expect_failure("stdout", {"answered describe with a message of", "print to stdout"});
}

// A replay that honours the handed coefficients at token 0 only: exact (its own controller computes
// the same values), and a probe that perturbs every token of a layer at once would pass it; the
// probe's two random token subsets per layer and stream catch it.
TEST_F(BrokenAdapter, ReplayHonouringOneTokenIsRefused) {
  expect_failure("one_token", {"replay sensitivity probe failed", "tokens"});
}

TEST_F(BrokenAdapter, RaisesAnError) {
  expect_failure("raise", {"failed on run_live", "RuntimeError: injected failure in forward"});
}

TEST_F(BrokenAdapter, EvaluatesTheControllerInReplay) {
  expect_failure("controller", {"controller was evaluated"});
}

// The bug that once produced a clean audit ("no functional dependence"): replay calls the original
// controller instead of using the handed coefficients, counts nothing, and exact replay passes.
TEST_F(BrokenAdapter, IgnoresTheHandedCoefficients) {
  expect_failure("ignores", {"replay sensitivity probe failed", "ignores the handed coefficients"});
}

TEST_F(BrokenAdapter, ReportsOtherCoefficientsThanItWasHanded) {
  expect_failure("ignores_reported", {"the adapter's replay used coefficients with SHA-256", "but fca sent"});
}

TEST_F(BrokenAdapter, CountsNoControllerEvaluationsLive) {
  expect_failure("uncounted", {"reports 0 controller evaluations for a live pass"});
}

TEST_F(BrokenAdapter, CountsMoreControllerEvaluationsLiveThanLayers) {
  expect_failure("overcounted", {"reports 3 controller evaluations for a live pass", "expected 2, one per controller layer"});
}

// HookedAdapter's default model hash over a third-party model's tensors of every kind (0-dim,
// non-contiguous, fp16, bool, integer, non-persistent, tied) and its refusals of meta and sparse
// tensors: tests/external/check_state_hash.py.
TEST_F(External, StateHashCoversEveryTensorKind) {
  const auto [status, output] = run_shell(python() + " " + source("tests/external/check_state_hash.py") + " 2>&1");
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("all checks passed"), std::string::npos) << output;
}

TEST_F(BrokenAdapter, CommandThatIsNoAdapter) {
  auto args = audit_args(dir.file("out"));
  args.insert(args.end(), {"--external", "true"});
  const auto r = run_fca(args);
  EXPECT_NE(r.exit_code, 0);
  // `true` exits at once: while fca is still sending describe, or before it answers.
  EXPECT_NE(r.output.find("`true` exited with status 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("describe"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/audit.json")));
}

TEST_F(BrokenAdapter, ModelAndExternalTogether) {
  auto args = audit_args(dir.file("out"));
  args.insert(args.end(), {"--model", model, "--external", "true"});
  const auto r = run_fca(args);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("excludes"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace fca
