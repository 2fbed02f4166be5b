// The PyTorch engine (python/fca_torch) against fca's own: the same checkpoints give the same logits
// and the same audit figures in both, one AdamW step from a checkpoint gives the same weights, two
// gloo ranks under torchrun are one process with gradient accumulation 2, and a run killed with
// SIGKILL resumes to the weights of a run that was never interrupted (docs/torch-engine.md).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "audit_agreement.h"
#include "core/error.h"
#include "study/torch_engine.h"
#include "train/train_family.h"
#include "test_util.h"

namespace fca {
namespace {

using testing::python;
using testing::read_json;
using testing::run_fca;
using testing::run_shell;
using testing::source;

// Logits of the two engines: float32 arithmetic in a different order (GEMM blocking, fca's
// polynomial exp and tanh with 2.4e-7 relative error, summation order): 2.4e-6 .. 3.3e-6 measured on
// logits up to 10 after 150 steps, a few float32 ulps of the largest logit; the bound is 1e-5.
constexpr double kLogitTolerance = 1e-5;
// Weights after one AdamW step in both engines, per tensor max |a - b| / max |a|: the gradients
// differ by float32 rounding (~1e-7 relative), which m / sqrt(v) passes on to the step.
constexpr double kWeightTolerance = 1e-6;

class TorchEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::python_has_torch()) << python() << " cannot import torch: FCA_WITH_TORCH=1 scripts/install_deps.sh";
    testing::write_corpus(dir.path(), 200000, 12000, 12000);
  }
  // fca_torch's modules on the path, one thread per process, the system Python.
  std::string py(const std::string& module_and_args) const {
    return "PYTHONPATH=" + source("python") + " OMP_NUM_THREADS=1 " + python() + " -m " + module_and_args;
  }
  std::string shape_flags(const std::string& arch, const std::string& gate = "") const {
    std::string f = "--layers 3 --dim 64 --heads 2 --seq 32 --batch 8 --data " + dir.path() + " --seed 3";
    return arch == "mudd" ? f + " --arch mudd" : f + " --gate " + gate;
  }
  static std::vector<std::string> split(const std::string& flags) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i < flags.size()) {
      const size_t j = flags.find(' ', i);
      out.push_back(flags.substr(i, j == std::string::npos ? std::string::npos : j - i));
      if (j == std::string::npos) break;
      i = j + 1;
    }
    return out;
  }
  void train_native(const std::string& flags, const std::string& out) {
    auto args = split("train " + flags + " --eval-every 0 --no-progress --out " + out);
    const auto r = run_fca(args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  void train_torch(const std::string& flags, const std::string& out, const std::string& launcher = "fca_torch.train") {
    const auto [status, output] = run_shell(py(launcher + " " + flags + " --eval-every 0 --no-progress --out " + out) + " 2>&1");
    ASSERT_EQ(status, 0) << output;
  }
  // fca's logits (fca trace on 4 windows of the valid split) against fca_torch's on the same tokens.
  void expect_same_logits(const std::string& model) {
    const std::string ids = dir.file("ids.json");
    const std::string text = testing::read_bytes(dir.file("valid.txt"));
    nlohmann::json windows = nlohmann::json::array();
    for (int w = 0; w < 4; ++w) {
      std::vector<int> window;
      for (int t = 0; t < 32; ++t) window.push_back(int(static_cast<unsigned char>(text[size_t(w) * 500 + t])));
      windows.push_back(window);
    }
    testing::write_text(ids, windows.dump());
    const auto r = run_fca({"trace", "--model", model, "--ids", ids, "--out", dir.file("trace.safetensors")});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto [status, output] = run_shell(python() + " " + source("tests/torch_engine/compare.py") + " logits " + model + " " +
                                            dir.file("trace.safetensors") + " " + std::to_string(kLogitTolerance));
    EXPECT_EQ(status, 0) << model << ": " << output;
    std::printf("%s: %s", model.c_str(), output.c_str());
  }
  // fca's native audit of `model` against its audit through fca_torch's hooked adapter; returns the
  // largest difference over every figure compared.
  double audit_difference(const std::string& model) {
    const std::vector<std::string> common{"audit", "--data", dir.path(), "--eval-windows", "24", "--calib-windows", "24",
                                          "--reps", "3", "--bootstrap", "500", "--no-progress"};
    std::filesystem::remove_all(dir.file("native"));
    std::filesystem::remove_all(dir.file("torch"));
    auto native = common;
    native.insert(native.end(), {"--model", model, "--out", dir.file("native")});
    auto r = run_fca(native);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    auto external = common;
    external.insert(external.end(), {"--external", py("fca_torch.serve --model " + model), "--out", dir.file("torch")});
    r = run_fca(external);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (r.exit_code != 0) return 1;
    const auto n = read_json(dir.file("native/audit.json")), e = read_json(dir.file("torch/audit.json"));
    EXPECT_TRUE(e["exact_replay"]["passed"].get<bool>());
    EXPECT_EQ(e["provenance"]["model_sha256"], n["provenance"]["model_sha256"]);
    for (const auto& c : e["conditions"]) EXPECT_EQ(c["controller_evaluations"], 0) << c["name"];
    double worst = 0;
    std::string where;
    testing::expect_same_figures(n, e, "", worst, where);
    std::printf("%s: largest native/torch audit difference %.3g at %s\n", model.c_str(), worst, where.c_str());
    return worst;
  }
  testing::TempDir dir;
};

const char* const kGates[] = {"dense", "fixed", "uniform", "layerstatic", "featuregate"};

TEST_F(TorchEngine, NativeCheckpointsGiveTheSameLogitsAndAuditInPyTorch) {
  for (const char* gate : kGates) {
    const std::string model = dir.file(std::string(gate) + ".safetensors");
    train_native(shape_flags("gated", gate) + " --steps 150 --lr 3e-3 --warmup 10", model);
    expect_same_logits(model);
    EXPECT_LE(audit_difference(model), 1e-6) << gate;
  }
  const std::string mudd = dir.file("mudd");
  train_native(shape_flags("mudd") + " --steps 150 --lr 3e-3 --warmup 10", mudd);
  expect_same_logits(mudd);
  EXPECT_LE(audit_difference(mudd), 1e-6) << "mudd";
}

TEST_F(TorchEngine, PyTorchCheckpointsGiveTheSameLogitsAndAuditNatively) {
  for (const std::string arch : {"featuregate", "mudd"}) {
    const std::string model = arch == "mudd" ? dir.file("mudd") : dir.file("fg.safetensors");
    train_torch((arch == "mudd" ? shape_flags("mudd") : shape_flags("gated", arch)) + " --steps 150 --lr 3e-3 --warmup 10", model);
    expect_same_logits(model);
    EXPECT_LE(audit_difference(model), 1e-6) << arch;
    // fca reads the trainer's log as its own (the report's training curves).
    const std::string log = arch == "mudd" ? model + "/train.log.jsonl" : model + ".log.jsonl";
    EXPECT_NE(testing::read_bytes(log).find("\"label\": \"" + std::string(arch) + "\""), std::string::npos) << log;
  }
}

// Both engines take step 41 of the same schedule from the same checkpoint and training state
// (written by fca after 40 steps): the same windows, learning rate, gradient, clipping and AdamW.
TEST_F(TorchEngine, OneAdamWStepGivesTheSameWeights) {
  for (const std::string arch : {"featuregate", "mudd"}) {
    const std::string flags = (arch == "mudd" ? shape_flags("mudd") : shape_flags("gated", arch)) + " --steps 100 --warmup 5";
    const std::string native = arch == "mudd" ? dir.file("native-mudd") : dir.file("native.safetensors");
    const std::string torch = arch == "mudd" ? dir.file("torch-mudd") : dir.file("torch.safetensors");
    train_native(flags + " --stop-after 40", native);
    if (arch == "mudd") {
      std::filesystem::copy(native, torch, std::filesystem::copy_options::recursive);
    } else {
      std::filesystem::copy_file(native, torch);
      std::filesystem::copy_file(dir.file("native.train-state.safetensors"), dir.file("torch.train-state.safetensors"));
    }
    train_native(flags + " --stop-after 1 --resume", native);
    train_torch(flags + " --stop-after 1 --resume", torch);
    const auto [status, output] = run_shell(python() + " " + source("tests/torch_engine/compare.py") + " weights " + native + " " +
                                            torch + " " + std::to_string(kWeightTolerance) + " --exclude-key-bias");
    EXPECT_EQ(status, 0) << arch << ": " << output;
    std::printf("%s: %s", arch.c_str(), output.c_str());
  }
}

// torchrun on Debian 12 (torch 1.13, Python 3.11) needs --redirects 1: its default 0 is a Flag
// member that Python 3.11 no longer enumerates, and the launcher fails before starting a worker.
// The rendezvous port is the test process's own (ctest may run other tests beside it).
std::string torchrun(int ranks) {
  return "torch.distributed.run --nproc_per_node " + std::to_string(ranks) + " --master_port " +
         std::to_string(20000 + ::getpid() % 20000) + " --redirects 1 --tee 1 --log_dir /tmp/fca-torchrun-logs --module fca_torch.train";
}

TEST_F(TorchEngine, TwoGlooRanksAreOneProcessWithGradientAccumulationTwo) {
  const std::string flags = shape_flags("gated", "featuregate") + " --steps 8 --warmup 2";
  train_torch(flags + " --grad-accum 2", dir.file("accumulated.safetensors"));
  train_torch(flags, dir.file("ranks.safetensors"), torchrun(2));
  const auto [status, output] = run_shell(python() + " " + source("tests/torch_engine/compare.py") + " weights " +
                                          dir.file("accumulated.safetensors") + " " + dir.file("ranks.safetensors") + " 1e-6");
  EXPECT_EQ(status, 0) << output;
  std::printf("%s", output.c_str());
  const std::string log = testing::read_bytes(dir.file("ranks.safetensors.log.jsonl"));
  EXPECT_NE(log.find("\"ranks\": 2"), std::string::npos) << log;
  EXPECT_NE(log.find("\"grad_accum\": 2"), std::string::npos) << log;  // recorded as fca records mpirun's ranks
}

TEST_F(TorchEngine, AKilledRunResumesToTheWeightsOfAnUninterruptedOne) {
  // Checkpoints 100 steps apart (about 1 s here): the kill lands long before the second one, never
  // between a checkpoint's two renames (weights, then state), a pair resume refuses by design.
  const std::string flags = shape_flags("gated", "featuregate") + " --steps 400 --warmup 5 --checkpoint-every 100";
  train_torch(flags, dir.file("whole.safetensors"));
  // The same run, killed with SIGKILL once its first checkpoint is on disk, then started again.
  const std::string state = dir.file("killed.train-state.safetensors");
  const std::string launch = py("fca_torch.train " + flags + " --eval-every 0 --no-progress --resume --out " +
                                dir.file("killed.safetensors"));
  // One shell starts it, waits for the file, kills it and reaps it (its exit status: 128 + 9).
  const auto [status, output_killed] = run_shell(
      launch + " >" + dir.file("first.log") + " 2>&1 & pid=$!; i=0; while [ ! -e " + state +
      " ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done; kill -9 $pid; wait $pid; echo \"exit status $?\"");
  ASSERT_TRUE(std::filesystem::exists(state)) << testing::read_bytes(dir.file("first.log"));
  EXPECT_NE(output_killed.find("exit status 137"), std::string::npos) << output_killed;
  const std::string log_before = testing::read_bytes(dir.file("killed.safetensors.log.jsonl"));
  EXPECT_EQ(log_before.find("\"type\": \"end\""), std::string::npos) << "the run ended before it was killed: " << log_before;
  const auto [again, output] = run_shell(launch);
  ASSERT_EQ(again, 0) << output;
  EXPECT_NE(testing::read_bytes(dir.file("killed.safetensors.log.jsonl")).find("\"type\": \"resume\""), std::string::npos);
  const auto [same, diff] = run_shell(python() + " " + source("tests/torch_engine/compare.py") + " weights " +
                                      dir.file("whole.safetensors") + " " + dir.file("killed.safetensors") + " 0");
  EXPECT_EQ(same, 0) << diff;
}

// The trainer's command line carries fca train's options and the family's own settings (as the
// same flags), and under --gpus runs torchrun with restarts.
TEST(TorchEngineCommand, CarriesTheRunsOptionsAndTheFamilysSettings) {
  TrainOptions o;
  o.arch = "gated";
  o.shape = {3, 64, 2, 32};
  o.settings = resolve_settings(train_family_named("gated"), {{"gate", "fixed"}, {"gate_value", 0.3}}, "test");
  o.batch = 5;
  o.steps = 70;
  o.lr = 2e-3;
  o.seed = 9;
  o.checkpoint_every = 7;
  o.out = "runs/it's.safetensors";
  o.resume = true;
  StudyEngine engine;
  engine.name = "torch";
  engine.python = "/usr/bin/python3";
  const std::string one = torch_train_command(engine, o, "data/x");
  for (const char* part : {"'/usr/bin/python3' -m fca_torch.train --arch 'gated' --layers 3 --dim 64 --heads 2 --seq 32",
                           " --gate 'fixed' --gate-value 0.29999999999999999 ", " --batch 5 ", " --steps 70 ", " --lr 0.002 ",
                           " --seed 9 ", " --checkpoint-every 7 ", " --data 'data/x' ", " --out 'runs/it'\\''s.safetensors'", " --resume"})
    EXPECT_NE(one.find(part), std::string::npos) << part << " in " << one;
  engine.gpus = 4;
  EXPECT_NE(torch_train_command(engine, o, "data/x").find("-m torch.distributed.run --standalone --nproc_per_node 4 --max_restarts 3"),
            std::string::npos);
  o.arch = "moe";
  EXPECT_THROW(torch_train_command(engine, o, "data/x"), Error);
  EXPECT_FALSE(engine.handles("moe"));
  EXPECT_TRUE(engine.handles("mudd"));
  // --gpus is the torch engine's; the native engine refuses it rather than ignoring it.
  StudyEngine native;
  native.gpus = 2;
  EXPECT_THROW(check_study_engine(native, "fca study"), Error);
  EXPECT_NO_THROW(check_study_engine(engine, "fca study"));
}

// fca study --engine torch: fca_torch trains the gated and MUDD variants and fca audits them through
// fca_torch.serve; evaluation, execution and the report are fca's, and the report names each
// checkpoint by its file as a native study does.
TEST_F(TorchEngine, AStudyTrainsAndAuditsItsVariantsThroughPyTorch) {
  const std::string out = dir.file("study");
  testing::write_text(dir.file("study.json"), R"({
    "data": ")" + dir.path() + R"(",
    "seeds": [1, 2],
    "variants": [
      {"name": "dense", "arch": "gated", "gate": "dense", "layers": 2, "dim": 32, "heads": 2, "seq": 32},
      {"name": "fg", "arch": "gated", "gate": "featuregate", "layers": 2, "dim": 32, "heads": 2, "seq": 32},
      {"name": "mudd", "arch": "mudd", "layers": 2, "dim": 32, "heads": 2, "seq": 32}
    ],
    "train": {"batch": 4, "steps": 12, "warmup": 2, "eval_every": 12, "eval_windows": 4, "checkpoint_every": 6},
    "eval_windows": 8,
    "audit": {"eval_windows": 8, "calib_windows": 8, "reps": 2, "bootstrap": 100},
    "exec": {"runs": 2, "max_runs": 2, "warmup": 0, "eval_windows": 4, "calib_windows": 4}
  })");
  const std::string python_path = "PYTHONPATH=" + source("python") + " ";
  auto [status, output] = run_shell(python_path + FCA_BINARY + " study --no-progress --config " + dir.file("study.json") +
                                    " --out " + out + " --engine torch --torch-python " + python() + " 2>&1");
  ASSERT_EQ(status, 0) << output;
  for (const std::string stem : {"dense-s1", "fg-s2"}) {
    EXPECT_NE(testing::read_bytes(out + "/" + stem + ".safetensors.log.jsonl").find("\"engine\": \"torch\""), std::string::npos) << stem;
    const auto audit = read_json(out + "/" + stem + "-audit/audit.json");
    EXPECT_EQ(audit["model"]["family"], "external") << stem;
    EXPECT_NE(audit["provenance"]["adapter_command"].get<std::string>().find("-m fca_torch.serve --model"), std::string::npos);
    EXPECT_TRUE(audit["exact_replay"]["passed"].get<bool>());
  }
  EXPECT_NE(testing::read_bytes(out + "/mudd-s1/train.log.jsonl").find("\"engine\": \"torch\""), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(out + "/fg-aggregate.json"));
  // Each variant's first checkpoint is timed natively (the paper page reads those) and through its
  // adapter against the same-shape Dense (the report cards show the adapter's, on the model's device).
  const auto exec = read_json(out + "/exec/exec.json");
  ASSERT_EQ(exec["models"].size(), 6u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(exec["models"][i]["family"], i < 2 ? "gated" : "mudd");
    EXPECT_EQ(exec["models"][i + 3]["family"], "external");
    EXPECT_EQ(exec["models"][i + 3]["model_sha256"], exec["models"][i]["model_sha256"]);
    EXPECT_EQ(exec["models"][i + 3]["modes"][0]["executed_units_per_token"]["blocks"], 2.0);
  }
  const std::string report = testing::read_bytes(out + "/report.md");
  EXPECT_NE(report.find("Timed on fg-s1 (1 of 2 checkpoints): 2 of 2 blocks per token execute with the live controller"), std::string::npos)
      << report.substr(0, 3000);
  EXPECT_NE(report.find("(measured in the adapter's process)"), std::string::npos);
  // Every seed's audit names its checkpoint file, so the report labels it as a native study does.
  EXPECT_EQ(read_json(out + "/fg-s2-audit/audit.json")["model"]["path"], out + "/fg-s2.safetensors");
  EXPECT_NE(report.find("per-checkpoint audit: `fg-s2 ("), std::string::npos) << report.substr(0, 3000);
  // Finished pieces are skipped the second time, whichever engine made them.
  std::tie(status, output) = run_shell(python_path + FCA_BINARY + " study --config " + dir.file("study.json") + " --out " + out +
                                       " --engine torch --torch-python " + python() + " 2>&1");
  ASSERT_EQ(status, 0) << output;
  EXPECT_NE(output.find("train fg seed 2: done before, skipped"), std::string::npos) << output;
  // A trainer that fails is named, with how it ended.
  std::tie(status, output) = run_shell(std::string(FCA_BINARY) + " study --no-progress --config " + dir.file("study.json") +
                                       " --out " + dir.file("other") + " --engine torch --torch-python /bin/false 2>&1");
  EXPECT_NE(status, 0);
  EXPECT_NE(output.find("the torch engine's trainer exited with status 1"), std::string::npos) << output;
}

}  // namespace
}  // namespace fca
