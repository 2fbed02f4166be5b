// The fca binary on good and bad input: every bad input gets a clear error naming the file, tensor
// or flag, a nonzero exit, and leaves no partial output file.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include "core/json.h"

#include "core/safetensors.h"
#include "core/sha256.h"
#include "models/gated/model.h"
#include "models/hyper/model.h"
#include "models/registry.h"
#include "train/train_family.h"
#include "test_util.h"

namespace fca {
namespace {

using testing::run_fca;

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_corpus(dir.path(), 20000, 2000, 2000);
    GatedModel<float>::initialized(testing::tiny_config(GateKind::featuregate), 1).save(model);
  }
  // No file or temporary file left in the folder other than the ones named.
  void expect_no_stray_files(const std::vector<std::string>& allowed) {
    for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
      if (entry.is_directory()) continue;
      const std::string name = entry.path().filename().string();
      bool ok = name == "train.txt" || name == "valid.txt" || name == "test.txt";
      for (const auto& a : allowed) ok = ok || name == a;
      EXPECT_TRUE(ok) << "unexpected file left behind: " << name;
    }
  }
  void expect_error(const std::vector<std::string>& args, const std::vector<std::string>& message_parts) {
    const auto r = run_fca(args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    for (const auto& part : message_parts) EXPECT_NE(r.output.find(part), std::string::npos) << "missing '" << part << "' in: " << r.output;
  }
  testing::TempDir dir;
  std::string model = dir.file("m.safetensors");
};

TEST_F(Cli, TrainEvalInfoTraceRoundTrip) {
  const std::string out = dir.file("runs/t.safetensors");  // the folder is created
  auto r = run_fca({"train", "--gate", "layerstatic", "--layers", "2", "--dim", "16", "--heads", "2", "--seq", "16",
                    "--batch", "2", "--steps", "3", "--data", dir.path(), "--out", out, "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_fca({"info", "--model", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("layerstatic"), std::string::npos);
  EXPECT_NE(r.output.find("parameters:"), std::string::npos);
  r = run_fca({"eval", "--model", out, "--data", dir.path(), "--split", "valid", "--windows", "3", "--out",
               dir.file("e.json"), "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir.file("e.json"));
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["windows"], 3);
  EXPECT_NEAR(j["bits_per_byte"].get<double>(), j["nll"].get<double>() / std::log(2.0), 1e-12);
  EXPECT_NEAR(j["byte_ppl"].get<double>(), std::exp(j["nll"].get<double>()), 1e-9);
  EXPECT_TRUE(j["provenance"].contains("model_sha256"));
  EXPECT_TRUE(j["provenance"]["data"].contains("split_sha256"));
  // trace, then replay the trace's coefficients: identical logits, no controller evaluation.
  testing::write_text(dir.file("ids.json"), "[[1,2,3,4,5,6],[7,8,9,10,11,12]]");
  r = run_fca({"trace", "--model", model, "--ids", dir.file("ids.json"), "--out", dir.file("live.safetensors")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_fca({"trace", "--model", model, "--ids", dir.file("ids.json"), "--out", dir.file("replay.safetensors"),
               "--replay", dir.file("live.safetensors")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  SafetensorsReader live(dir.file("live.safetensors")), replay(dir.file("replay.safetensors"));
  EXPECT_EQ(live.read_as_double("logits"), replay.read_as_double("logits"));
  EXPECT_EQ(replay.metadata().at("controller_evaluations"), "0");
  EXPECT_EQ(live.metadata().at("controller_evaluations"), "4");  // L = 2: features and gate per layer
  EXPECT_TRUE(live.has("blocks.1.features"));
  EXPECT_TRUE(live.has("hidden.2"));
}

TEST_F(Cli, MuddTrainEvalTraceAudit) {
  const std::string out = dir.file("mudd");
  auto r = run_fca({"train", "--arch", "mudd", "--layers", "2", "--dim", "16", "--heads", "2", "--seq", "16", "--batch", "2",
                    "--steps", "3", "--data", dir.path(), "--out", out, "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_fca({"info", "--model", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("MUDD folder"), std::string::npos) << r.output;
  r = run_fca({"eval", "--model", out, "--data", dir.path(), "--windows", "3", "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(out + "/eval-test.json"));
  r = run_fca({"trace", "--model", out, "--text", "a MUDD trace", "--out", dir.file("mt.safetensors")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_fca({"trace", "--model", out, "--text", "a MUDD trace", "--out", dir.file("mr.safetensors"), "--replay",
               dir.file("mt.safetensors")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  SafetensorsReader live(dir.file("mt.safetensors")), replay(dir.file("mr.safetensors"));
  EXPECT_EQ(live.read_as_double("logits"), replay.read_as_double("logits"));
  EXPECT_EQ(replay.metadata().at("controller_evaluations"), "0");
  EXPECT_EQ(live.get("coefficients").shape, (std::vector<int64_t>{1, 2, 12, 4, 3}));
  r = run_fca({"audit", "--model", out, "--data", dir.path(), "--eval-windows", "4", "--calib-windows", "4", "--reps", "2",
               "--bootstrap", "100", "--out", dir.file("mudd-audit"), "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("structure_removed"), std::string::npos);
}

// `fca families --json` lists every family fca installs (the test binary's toy and skip families are not in fca)
// with the configurations that cover its settings; scripts/compare_builds.sh trains each with its
// train_flags, so each configuration's flags must train a checkpoint of that configuration.
TEST_F(Cli, FamiliesListsEveryFamilyAndItsConfigurationsTrain) {
  const auto r = run_fca({"families", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json doc = nlohmann::json::parse(r.output);
  ASSERT_EQ(doc.at("schema"), "fca-families-v1");
  std::vector<std::string> listed, installed;
  for (const auto& f : doc.at("families")) listed.push_back(f.at("name"));
  for (const auto& f : train_families())
    if (f.name != "toy" && f.name != "skip") installed.push_back(f.name);
  EXPECT_EQ(listed, installed);
  for (const auto& f : doc.at("families")) {
    const TrainFamily& family = train_family_named(f.at("name"));
    const std::vector<nlohmann::json> expected = family_configurations(family);
    ASSERT_EQ(f.at("configurations").size(), expected.size()) << f.dump();
    EXPECT_EQ(f.at("checkpoint").at("weights"), family.files(checkpoint_path(family, "STEM")).weights);
    for (size_t i = 0; i < expected.size(); ++i) {
      const auto& c = f.at("configurations")[i];
      EXPECT_EQ(c.at("settings"), expected[i]) << c.dump();
      std::vector<std::string> args{"train", "--layers", "2", "--dim", "16", "--heads", "2", "--seq", "16", "--batch", "2",
                                    "--steps", "1", "--data", dir.path(), "--no-progress"};
      for (const auto& flag : c.at("train_flags")) args.push_back(flag);
      const std::string out = checkpoint_path(family, dir.file(c.at("name").get<std::string>()));
      args.insert(args.end(), {"--out", out});
      const auto trained = run_fca(args);
      ASSERT_EQ(trained.exit_code, 0) << c.dump() << trained.output;
      // The checkpoint is of the configuration: its label (the name results print) shows each
      // choice-valued setting's value ("dense", "mhc n4").
      const nlohmann::json config = nlohmann::json::parse(open_model(out, 1, 16)->config_json());
      const std::string label = family_named(family.name).label(config);
      for (const FamilySetting& s : family.settings) {
        if (!s.choices.empty()) {
          EXPECT_NE(label.find(expected[i].at(s.key).get<std::string>()), std::string::npos) << label;
        }
      }
    }
  }
}

// `fca bench train --model` trains the checkpoint's weights, and its JSON says so (the first step's
// loss and gradient norm, the checkpoint's SHA-256): bench/compare_pytorch.py times the same step in
// PyTorch and checks its first step against this one. For the gated family (its own benchmark) and
// the hyper family (its Trainable): a checkpoint of the fresh model of seed 7 gives that model's
// first step bit for bit on the same batch (seed 7 + 1), one of seed 8 does not; a hyper checkpoint of
// another config than the flags' is refused, naming both.
TEST(CliBench, TrainFromACheckpointStartsAtItsWeights) {
  testing::TempDir dir;
  const std::vector<std::string> common{"bench", "train", "--layers", "2", "--dim", "16", "--heads", "2", "--seq", "16",
                                        "--batch", "2", "--runs", "1", "--warmup", "0", "--threads", "2", "--json", "--seed", "7"};
  HyperConfig hyper;
  hyper.n_layer = 2, hyper.d_model = 16, hyper.n_head = 2, hyper.seq_len = 16, hyper.variant = HyperVariant::mhc, hyper.streams = 3;
  struct Family {
    std::string name;
    std::vector<std::string> flags;
    std::function<void(const std::string&, uint64_t)> save;
  };
  const std::vector<Family> families{
      {"gated", {"--gate", "featuregate"},
       [](const std::string& path, uint64_t seed) {
         GatedModel<float>::initialized(testing::tiny_config(GateKind::featuregate), seed).save(path);
       }},
      {"hyper", {"--arch", "hyper", "--hc-variant", "mhc", "--hc-streams", "3"},
       [&](const std::string& path, uint64_t seed) { HyperModel<float>::initialized(hyper, seed).save(path); }}};
  for (const Family& f : families) {
    SCOPED_TRACE(f.name);
    auto bench = [&](const std::vector<std::string>& extra) {
      std::vector<std::string> args = common;
      args.insert(args.end(), f.flags.begin(), f.flags.end());
      args.insert(args.end(), extra.begin(), extra.end());
      const auto r = run_fca(args);
      EXPECT_EQ(r.exit_code, 0) << r.output;
      return nlohmann::json::parse(r.output.substr(r.output.find('{')));
    };
    const auto fresh = bench({});
    ASSERT_TRUE(fresh.contains("first_step")) << fresh.dump();
    for (const uint64_t seed : {7, 8}) {
      const std::string path = dir.file(f.name + std::to_string(seed) + ".safetensors");
      f.save(path, seed);
      const auto loaded = bench({"--model", path});
      EXPECT_EQ(loaded["provenance"]["model_sha256"], sha256_file(path));
      for (const char* key : {"loss", "grad_norm"}) {
        const double a = fresh["first_step"][key].get<double>(), b = loaded["first_step"][key].get<double>();
        if (seed == 7) EXPECT_EQ(a, b) << key;
        else EXPECT_NE(a, b) << key;
      }
    }
  }
  std::vector<std::string> other = common;
  other.insert(other.end(), {"--arch", "hyper", "--hc-variant", "mhc", "--hc-streams", "2", "--model", dir.file("hyper7.safetensors")});
  const auto r = run_fca(other);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("model config differs from the flags'"), std::string::npos) << r.output;
}

TEST_F(Cli, MissingCheckpoint) {
  expect_error({"info", "--model", dir.file("nope.safetensors")}, {"nope.safetensors", "cannot open"});
}

TEST_F(Cli, TruncatedCheckpoint) {
  const std::string bytes = testing::read_bytes(model);
  testing::write_text(dir.file("cut.safetensors"), bytes.substr(0, bytes.size() / 2));
  expect_error({"info", "--model", dir.file("cut.safetensors")}, {"cut.safetensors", "truncated"});
  testing::write_text(dir.file("tiny.safetensors"), bytes.substr(0, 5));
  expect_error({"info", "--model", dir.file("tiny.safetensors")}, {"tiny.safetensors", "truncated"});
}

TEST_F(Cli, CorruptedHeader) {
  std::string bytes = testing::read_bytes(model);
  bytes[9] = '#';  // inside the JSON header
  testing::write_text(dir.file("bad.safetensors"), bytes);
  expect_error({"info", "--model", dir.file("bad.safetensors")}, {"bad.safetensors", "not valid JSON"});
  std::string huge = testing::read_bytes(model);
  huge[7] = 0x7f;  // header length far beyond the file
  testing::write_text(dir.file("huge.safetensors"), huge);
  expect_error({"info", "--model", dir.file("huge.safetensors")}, {"huge.safetensors", "exceeds the file"});
}

// A config that asks for more parameters than the file could hold is refused before anything is
// allocated from it; shape fields beyond their bounds are refused by name.
TEST_F(Cli, ConfigsCannotAskForMoreThanTheFileHolds) {
  const GatedModel<float> m = GatedModel<float>::initialized(testing::tiny_config(GateKind::featuregate), 1);
  std::vector<TensorToWrite> tensors;
  for (const auto& s : m.layout()) tensors.push_back({s.name, s.shape, m.data() + s.offset});
  auto with_config = [&](const std::string& name, const std::string& config) {
    write_safetensors(dir.file(name), tensors, {{"format", "fca-gated-v1"}, {"config", config}});
    return dir.file(name);
  };
  expect_error({"info", "--model", with_config("huge.safetensors", R"({"n_layer":4096,"d_model":65536,"n_head":64,"seq_len":1048576,"gate":"featuregate","gate_value":0.6})")},
               {"huge.safetensors", "its config describes", "parameters, but the file's"});
  expect_error({"info", "--model", with_config("layers.safetensors", R"({"n_layer":100000,"d_model":16,"n_head":2,"seq_len":16,"gate":"featuregate","gate_value":0.6})")},
               {"layers.safetensors", "n_layer must be in 1 .. 4096, found 100000"});
  expect_error({"info", "--model", with_config("heads.safetensors", R"({"n_layer":2,"d_model":16,"n_head":32,"seq_len":16,"gate":"featuregate","gate_value":0.6})")},
               {"heads.safetensors", "n_head must be in 1 .. 16, found 32"});
  expect_no_stray_files({"m.safetensors", "huge.safetensors", "layers.safetensors", "heads.safetensors"});
}

TEST_F(Cli, WrongShapeMissingTensorAndDtype) {
  const GatedConfig c = testing::tiny_config(GateKind::featuregate);
  const GatedModel<float> m = GatedModel<float>::initialized(c, 1);
  std::vector<TensorToWrite> tensors;
  for (const auto& s : m.layout()) {
    auto shape = s.shape;
    if (s.name == "blocks.1.mlp.fc.weight") shape = {shape[1], shape[0]};
    tensors.push_back({s.name, shape, m.data() + s.offset});
  }
  const std::map<std::string, std::string> meta{{"format", "fca-gated-v1"}, {"config", c.to_json()}};
  write_safetensors(dir.file("shape.safetensors"), tensors, meta);
  expect_error({"info", "--model", dir.file("shape.safetensors")},
               {"shape.safetensors", "blocks.1.mlp.fc.weight", "[16, 64]", "expected [64, 16]"});
  std::vector<TensorToWrite> all_but_last;
  for (const auto& s : m.layout()) all_but_last.push_back({s.name, s.shape, m.data() + s.offset});
  all_but_last.pop_back();  // gate.bias
  write_safetensors(dir.file("missing.safetensors"), all_but_last, meta);
  expect_error({"info", "--model", dir.file("missing.safetensors")}, {"missing.safetensors", "gate.bias", "missing"});
  // An integer dtype where F32 is expected: patch the header's dtype text of the first tensor.
  std::string bytes = testing::read_bytes(model);
  const auto pos = bytes.find("\"F32\"");
  ASSERT_NE(pos, std::string::npos);
  bytes = bytes.substr(0, pos) + "\"I32\"" + bytes.substr(pos + 5);  // same length: offsets stay valid
  testing::write_text(dir.file("dtype.safetensors"), bytes);
  expect_error({"info", "--model", dir.file("dtype.safetensors")}, {"dtype.safetensors", "I32", "floating-point"});
}

TEST_F(Cli, UnknownGateKind) {
  expect_error({"train", "--gate", "sparse", "--out", dir.file("x.safetensors"), "--data", dir.path()}, {"--gate", "sparse"});
  // A family's own flags: malformed numbers, and flags of another family, are refused by name.
  expect_error({"train", "--arch", "moe", "--top-k", "two", "--out", dir.file("x.safetensors"), "--data", dir.path()},
               {"--top-k: 'two' is not a whole number in 1 .. 4096"});
  expect_error({"train", "--arch", "mudd", "--capacity", "0.5", "--out", dir.file("x"), "--data", dir.path()},
               {"--capacity applies to --arch mod only"});
  GatedConfig c = testing::tiny_config(GateKind::dense);
  const std::string json = c.to_json();
  const size_t at = json.find("dense");
  const std::string cfg = json.substr(0, at) + "magic" + json.substr(at + 5);
  const GatedModel<float> m = GatedModel<float>::initialized(c, 1);
  std::vector<TensorToWrite> tensors;
  for (const auto& s : m.layout()) tensors.push_back({s.name, s.shape, m.data() + s.offset});
  write_safetensors(dir.file("gate.safetensors"), tensors, {{"format", "fca-gated-v1"}, {"config", cfg}});
  expect_error({"info", "--model", dir.file("gate.safetensors")}, {"gate.safetensors", "unknown gate kind 'magic'"});
  expect_no_stray_files({"m.safetensors", "gate.safetensors"});
}

TEST_F(Cli, SequenceLongerThanPositions) {
  expect_error({"eval", "--model", model, "--data", dir.path(), "--seq", "32", "--out", dir.file("e.json")},
               {"32", "longer than the model's 16 positions"});
  std::string ids = "[[";
  for (int i = 0; i < 20; ++i) {
    if (i > 0) ids += ',';
    ids += std::to_string(i);
  }
  testing::write_text(dir.file("ids.json"), ids + "]]");
  expect_error({"trace", "--model", model, "--ids", dir.file("ids.json"), "--out", dir.file("t.safetensors")},
               {"20 tokens", "16 positions"});
  expect_no_stray_files({"m.safetensors", "ids.json"});
}

TEST_F(Cli, SplitShorterThanOneWindow) {
  testing::write_text(dir.file("valid.txt"), "too short");
  expect_error({"eval", "--model", model, "--data", dir.path(), "--split", "valid", "--out", dir.file("e.json")},
               {"valid.txt", "shorter than one window", "17 bytes"});
  expect_error({"train", "--layers", "2", "--dim", "16", "--heads", "2", "--seq", "16", "--steps", "2", "--data", dir.path(),
                "--out", dir.file("x.safetensors")},
               {"valid.txt", "shorter than one window"});
  expect_no_stray_files({"m.safetensors"});
}

TEST_F(Cli, UnreadableFolder) {
  expect_error({"eval", "--model", model, "--data", dir.file("no-such-dir")}, {"no-such-dir", "does not exist"});
  std::filesystem::create_directory(dir.file("empty"));
  expect_error({"eval", "--model", model, "--data", dir.file("empty")}, {"empty", "train.txt", "wiki.train.raw"});
}

TEST_F(Cli, WikiTextLayoutIsAccepted) {
  const std::string wiki = dir.file("wiki");
  std::filesystem::create_directory(wiki);
  for (const char* s : {"train", "valid", "test"})
    std::filesystem::copy_file(dir.file(std::string(s) + ".txt"), wiki + "/wiki." + s + ".raw");
  const auto r = run_fca({"eval", "--model", model, "--data", wiki, "--windows", "2", "--out", dir.file("w.json"), "--no-progress"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(Cli, MalformedNumbersAndUnknownFlags) {
  expect_error({"train", "--steps", "12abc", "--out", dir.file("x.safetensors")}, {"--steps", "12abc"});
  expect_error({"train", "--lr", "0.1.2", "--out", dir.file("x.safetensors")}, {"--lr"});
  expect_error({"train", "--steps", "-5", "--out", dir.file("x.safetensors")}, {"--steps"});
  expect_error({"eval", "--model", model, "--frobnicate"}, {"frobnicate"});
  expect_error({"train", "--heads", "3", "--out", dir.file("x.safetensors"), "--data", dir.path()},
               {"d_model 256 is not divisible by n_head 3"});
  expect_no_stray_files({"m.safetensors"});
}

// Numbers on the command line: a value out of range, not finite, not representable or negative
// where only non-negative integers make sense is refused with a short message naming the flag
// (never the 309-digit DBL_MAX of a range bound).
TEST_F(Cli, NumbersOutOfRangeAreNamedPlainly) {
  auto short_error = [&](const std::vector<std::string>& args, const std::string& part) {
    const auto r = run_fca(args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(part), std::string::npos) << "missing '" << part << "' in: " << r.output;
    EXPECT_LT(r.output.size(), 400u) << r.output;
  };
  short_error({"train", "--lr", "1e999", "--out", dir.file("x.safetensors")}, "--lr: 1e999 is not a number > 0 (it is outside the range of a double)");
  short_error({"train", "--lr", "1e-400", "--out", dir.file("x.safetensors")}, "--lr: 1e-400 is not a number > 0 (it is outside the range of a double)");
  short_error({"train", "--lr", "0", "--out", dir.file("x.safetensors")}, "--lr: 0 is not a number > 0");
  short_error({"train", "--lr", "nan", "--out", dir.file("x.safetensors")}, "--lr: 'nan' is not a number > 0");
  short_error({"audit", "--model", model, "--out", dir.file("a"), "--small-penalty", "-1"}, "--small-penalty: -1 is not a number >= 0");
  short_error({"audit", "--model", model, "--out", dir.file("a"), "--seed", "-1"}, "--seed: '-1' is not a whole number in 0 .. 18446744073709551615");
  short_error({"train", "--seed", "99999999999999999999", "--out", dir.file("x.safetensors")}, "--seed: '99999999999999999999' is not a whole number");
  expect_no_stray_files({"m.safetensors"});
}

// Every numeric flag of every command, given a negative, malformed or out-of-range value, names
// itself and its valid range in words: never CLI11's bounds (DBL_MAX in 309 digits, "1797...") or a
// conversion error that names no range.
TEST_F(Cli, NumericFlagsNameTheirRangeInWords) {
  const std::string out = dir.file("x.safetensors");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"train", "--threads", "-3", "--out", out}, "--threads: -3 is not a whole number >= 0 (0 = all cores)"},
      {{"eval", "--model", model, "--threads", "x"}, "--threads: 'x' is not a whole number >= 0 (0 = all cores)"},
      {{"train", "--layers", "1.5", "--out", out}, "--layers: '1.5' is not a whole number >= 1"},
      {{"train", "--steps", "-5", "--out", out}, "--steps: -5 is not a whole number >= 1"},
      {{"train", "--eval-every", "-1", "--out", out}, "--eval-every: -1 is not a whole number >= 0 (0 = at the end only)"},
      {{"train", "--min-lr-ratio", "2", "--out", out}, "--min-lr-ratio: 2 is not a number in [0, 1]"},
      {{"eval", "--model", model, "--batch", "abc"}, "--batch: 'abc' is not a whole number >= 1"},
      {{"eval", "--model", model, "--windows", "-99999999999999999999"}, "--windows: -99999999999999999999 is not a whole number >= 0 (0 = all)"},
      {{"bench", "forward", "--runs", "0"}, "--runs: 0 is not a whole number >= 1"},
      {{"audit", "--model", model, "--reps", "1"}, "--reps: 1 is not a whole number in 2 .. 100000"},
      {{"audit", "--model", model, "--eval-windows", "1e9"}, "--eval-windows: '1e9' is not a whole number in 2 .. 16777216"},
      {{"audit", "--model", model, "--high-retention", "-0.5"}, "--high-retention: -0.5 is not a number in [0, 1]"},
      {{"audit", "--model", model, "--batch", "-2"}, "--batch: -2 is not a whole number >= 0 (0 = chosen by a probe)"},
      {{"exec", "--model", model, "--out", dir.file("e"), "--batch", "3000000000"},
       "--batch: 3000000000 is not a whole number >= 1: the largest allowed is 2147483647"},
      {{"exec", "--model", model, "--out", dir.file("e"), "--margin", "1"}, "--margin: 1 is not a number in [1e-06, 0.999999]"},
      {{"exec", "--model", model, "--out", dir.file("e"), "--time-budget", "-1"}, "--time-budget: -1 is not a number >= 0"},
      {{"exec", "--external", "true", "--out", dir.file("e"), "--external-timeout", "1e10"},
       "--external-timeout: 1e10 is not a number in [0.001, 1e+06]"},
      {{"audit", "--external", "true", "--out", dir.file("a"), "--external-timeout", "0"},
       "--external-timeout: 0 is not a number in [0.001, 1e+06]"},
      {{"aggregate", model, model, "--out", dir.file("g"), "--bootstrap", "-1"}, "--bootstrap: -1 is not a whole number >= 1"},
      // A family's own settings name their flag too, not the config key (hc_streams).
      {{"train", "--arch", "hyper", "--hc-streams", "0", "--out", out}, "--hc-streams: 0 is not a whole number in 1 .. 64"},
      {{"train", "--arch", "mod", "--capacity", "1.5", "--out", out}, "--capacity: 1.5 is not a number in (0, 1]"}};
  for (const auto& [args, message] : cases) {
    const auto r = run_fca(args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << "missing '" << message << "' in: " << r.output;
    EXPECT_EQ(r.output.find("1797"), std::string::npos) << r.output;
    EXPECT_LT(r.output.size(), 400u) << r.output;
  }
  expect_no_stray_files({"m.safetensors"});
}

// --plan writes nothing, so it needs no --out; an audit that runs does.
TEST_F(Cli, AuditPlanNeedsNoOutFolder) {
  const auto r = run_fca({"audit", "--model", model, "--data", dir.path(), "--eval-windows", "2", "--calib-windows", "2", "--reps", "2",
                          "--plan", "--no-progress"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("audit plan:"), std::string::npos) << r.output;
  expect_no_stray_files({"m.safetensors"});
  expect_error({"audit", "--model", model, "--data", dir.path(), "--no-progress"}, {"--out is required", "--plan"});
  testing::write_text(dir.file("notadir"), "a file");
  expect_error({"audit", "--model", model, "--data", dir.path(), "--eval-windows", "2", "--calib-windows", "2", "--reps", "2",
                "--no-progress", "--out", dir.file("notadir")},
               {"--out " + dir.file("notadir") + ": exists and is not a folder"});
}

// Study configs: unknown keys (a typo), wrong types, numbers that would narrow, empty lists and
// names that would leave the output folder are errors naming the file and the field.
TEST_F(Cli, StudyConfigsAreReadStrictly) {
  auto refused = [&](const std::string& body, const std::string& part) {
    testing::write_text(dir.file("study.json"), body);
    const auto r = run_fca({"study", "--config", dir.file("study.json"), "--out", dir.file("study")});
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(part), std::string::npos) << "missing '" << part << "' in: " << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir.file("study/report.html")));
  };
  const std::string data = "\"data\": \"" + dir.path() + "\", ";
  const std::string variant = R"({"name": "fg", "layers": 2, "dim": 16, "heads": 2, "seq": 16})";
  refused("{" + data + R"("variants": [)" + variant + R"(], "trian": {}})", "unknown key 'trian'");
  refused("{" + data + R"("variants": [{"name": "fg", "layres": 2}]})", "variants[0]: unknown key 'layres'");
  refused("{" + data + R"("variants": [)" + variant + R"(], "audit": {"bootstrap": 0}})", "'bootstrap' must be in 1 ..");
  refused("{" + data + R"("variants": [)" + variant + R"(], "seeds": []})", "'seeds' must be a non-empty array");
  refused("{" + data + R"("variants": [)" + variant + R"(], "seeds": [1, 1]})", "lists 1 twice");
  refused("{" + data + R"("variants": []})", "'variants' must be a non-empty array");
  refused("{" + data + R"("variants": [)" + variant + R"(], "train": {"steps": 1e12}})", "'steps' must be an integer");
  refused("{" + data + R"("variants": [)" + variant + R"(], "train": {"steps": 99999999999}})", "'steps' must be in 1 ..");
  refused("{" + data + R"("variants": [{"name": "../escape"}]})", "must not contain '/'");
  refused("{" + data + R"("variants": [{"name": "fg", "layers": "2"}]})", "'layers' must be an integer");
  refused("{" + data + R"("variants": [{"name": "m", "arch": "mod", "capacity": 1.5}]})", "variants[0]: mod setting \"capacity\": 1.5 is not a number in (0, 1]");
  refused("{" + data + R"("variants": [{"name": "m", "arch": "mod", "capacity": "half"}]})", "mod setting \"capacity\" must be a number, found \"half\"");
  // A family's setting on a variant of another family is refused, not ignored.
  refused("{" + data + R"("variants": [{"name": "fg", "capacity": 0.5}]})", "\"capacity\" is not a setting of the gated family");
  refused("{" + data + R"("variants": [{"name": "e", "arch": "moe", "gate": "dense"}]})", "\"gate\" is not a setting of the moe family");
  refused("{" + data + R"("variants": [)" + variant + R"(], "exec": {"skip_thresholds": [0.5, 2]}})", "'skip_thresholds'[1] must be in [0, 1]");
}

// --batch too large for the memory (a billion windows of the tiny model), or so large that the run
// state's byte count would overflow 64 bits (INT_MAX windows of 32768 tokens: a FeatureGate
// controller keeps [B, H, T, T] log-probabilities): every command that takes --batch fails before
// it writes anything, with one error on stderr naming the flag. Without the check these died in
// std::bad_alloc ("fca: internal error"), an "arena: cannot allocate" that named no flag, an OOM
// kill, or a byte count that wrapped.
class CliBatchMemory : public Cli {
 protected:
  static constexpr const char* kHuge = "1000000000";
  static constexpr const char* kOverflowing = "2147483647";
  // A FeatureGate model like `model` with 32768 positions.
  std::string long_model() {
    GatedConfig c = testing::tiny_config(GateKind::featuregate);
    c.seq_len = 32768;
    GatedModel<float>::initialized(c, 1).save(dir.file("long.safetensors"));
    return dir.file("long.safetensors");
  }
  // fca `args` --batch `batch`: a nonzero exit, nothing on stdout, stderr an error that starts with
  // "fca: error: --batch <batch>: " and contains `detail`, and none of `outputs` written.
  void expect_batch_refused(std::vector<std::string> args, const std::string& batch, const std::string& detail,
                            const std::vector<std::string>& outputs) {
    args.insert(args.end(), {"--batch", batch});
    std::string cmd = std::string("'") + FCA_BINARY + "'";
    for (const auto& a : args) cmd += " '" + a + "'";
    const testing::TempDir errors;
    const auto [status, out] = testing::run_shell(cmd + " 2>'" + errors.file("stderr") + "'");
    const std::string err = testing::read_bytes(errors.file("stderr"));
    EXPECT_NE(status, 0) << cmd << "\n" << err;
    EXPECT_EQ(err.rfind("fca: error: --batch " + batch + ": ", 0), 0u) << cmd << "\n" << err;
    EXPECT_NE(err.find(detail), std::string::npos) << "missing '" << detail << "' in: " << err;
    EXPECT_EQ(out, "") << cmd;
    for (const auto& o : outputs) EXPECT_FALSE(std::filesystem::exists(o)) << o << " was written by " << cmd;
  }
  // What a refusal says: a batch to try, or (for the overflow) a byte count past 64 bits.
  const std::string try_smaller = "windows needs ", past_64_bits = "windows needs 2^64 bytes or more, ";
};

TEST_F(CliBatchMemory, Train) {
  const std::string out = dir.file("t.safetensors");
  const std::vector<std::string> train = {"train", "--gate", "featuregate", "--layers", "2", "--dim", "16", "--heads", "2",
                                          "--steps", "1", "--data", dir.path(), "--out", out, "--no-progress"};
  auto with_seq = [&](const std::string& seq) {
    std::vector<std::string> args = train;
    args.insert(args.end(), {"--seq", seq});
    return args;
  };
  expect_batch_refused(with_seq("16"), kHuge, try_smaller, {out});
  expect_batch_refused(with_seq("32768"), kOverflowing, past_64_bits, {out});
  expect_no_stray_files({"m.safetensors"});
}

TEST_F(CliBatchMemory, Eval) {
  const std::string out = dir.file("e.json");
  expect_batch_refused({"eval", "--model", model, "--data", dir.path(), "--out", out, "--no-progress"}, kHuge, try_smaller, {out});
  expect_batch_refused({"eval", "--model", long_model(), "--data", dir.path(), "--out", out, "--no-progress"}, kOverflowing,
                       past_64_bits, {out});
  expect_no_stray_files({"m.safetensors", "long.safetensors"});
}

TEST_F(CliBatchMemory, Audit) {
  const std::string out = dir.file("a");
  const std::vector<std::string> outputs = {out + "/audit.json", out + "/audit.md", out + "/windows.csv", out + "/cache.safetensors"};
  expect_batch_refused({"audit", "--model", model, "--data", dir.path(), "--out", out, "--no-progress"}, kHuge, try_smaller, outputs);
  expect_batch_refused({"audit", "--model", long_model(), "--data", dir.path(), "--out", out, "--no-progress"}, kOverflowing,
                       past_64_bits, outputs);
  expect_no_stray_files({"m.safetensors", "long.safetensors"});
}

TEST_F(CliBatchMemory, Exec) {
  const std::string out = dir.file("x");
  const std::vector<std::string> outputs = {out + "/exec.json", out + "/exec.md"};
  expect_batch_refused({"exec", "--model", model, "--data", dir.path(), "--out", out, "--runs", "1", "--warmup", "0", "--no-progress"},
                       kHuge, try_smaller, outputs);
  expect_batch_refused({"exec", "--model", long_model(), "--data", dir.path(), "--out", out, "--runs", "1", "--warmup", "0",
                        "--no-progress"},
                       kOverflowing, past_64_bits, outputs);
  expect_no_stray_files({"m.safetensors", "long.safetensors"});
}

TEST_F(CliBatchMemory, Bench) {
  expect_batch_refused({"bench", "forward", "--model", model}, kHuge, try_smaller, {});
  expect_batch_refused({"bench", "forward", "--model", long_model()}, kOverflowing, past_64_bits, {});
  const std::vector<std::string> train = {"bench", "train", "--gate", "featuregate", "--layers", "2", "--dim", "16", "--heads", "2"};
  auto with_seq = [&](const std::string& seq) {
    std::vector<std::string> args = train;
    args.insert(args.end(), {"--seq", seq});
    return args;
  };
  expect_batch_refused(with_seq("16"), kHuge, try_smaller, {});
  expect_batch_refused(with_seq("32768"), kOverflowing, past_64_bits, {});
  expect_no_stray_files({"m.safetensors", "long.safetensors"});
}

// A study's train.batch too large for the memory names the config and the setting (a billion
// bytes per window: 65536 windows of 4096 tokens keep [B, H, T, T] probabilities per layer).
TEST_F(CliBatchMemory, StudyTrainBatch) {
  testing::write_text(dir.file("study.json"), R"({"data": ")" + dir.path() + R"(", "seeds": [1],
    "variants": [{"name": "fg", "gate": "featuregate", "layers": 2, "dim": 16, "heads": 2, "seq": 4096}],
    "train": {"batch": 65536, "steps": 1}})");
  const auto r = run_fca({"study", "--config", dir.file("study.json"), "--out", dir.file("study")});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("fca: error: " + dir.file("study.json") + ": train.batch 65536: the run state of 65536 windows needs "),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("study/fg-s1.safetensors")));
}

TEST_F(Cli, PrecisionIsAFlagEveryResultRecords) {
  // eval, exec and audit in bf16 record it in their provenance (audit.json also in its settings);
  // bench forward prints the GEMM path; another value, and bf16 for an adapter's model, are refused.
  auto r = run_fca({"eval", "--model", model, "--data", dir.path(), "--windows", "3", "--precision", "bf16", "--out",
                    dir.file("e.json"), "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream eval_in(dir.file("e.json"));
  EXPECT_EQ(nlohmann::json::parse(eval_in)["provenance"]["precision"], "bf16");
  r = run_fca({"exec", "--model", model, "--data", dir.path(), "--runs", "2", "--max-runs", "2", "--warmup", "0",
               "--eval-windows", "2", "--calib-windows", "2", "--precision", "bf16", "--out", dir.file("x"), "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream exec_in(dir.file("x/exec.json"));
  EXPECT_EQ(nlohmann::json::parse(exec_in)["provenance"]["precision"], "bf16");
  r = run_fca({"audit", "--model", model, "--data", dir.path(), "--eval-windows", "4", "--calib-windows", "2", "--reps", "2",
               "--bootstrap", "20", "--precision", "bf16", "--out", dir.file("a"), "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream audit_in(dir.file("a/audit.json"));
  const auto audit = nlohmann::json::parse(audit_in);
  EXPECT_EQ(audit["settings"]["precision"], "bf16");
  EXPECT_EQ(audit["provenance"]["precision"], "bf16");
  EXPECT_NE(audit["provenance"]["build"].get<std::string>().find("sgemm bf16 oneDNN"), std::string::npos);
  r = run_fca({"bench", "forward", "--layers", "2", "--dim", "64", "--heads", "2", "--seq", "16", "--batch", "2", "--runs", "1",
               "--warmup", "0", "--precision", "bf16"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("products in bf16: sgemm bf16 oneDNN"), std::string::npos) << r.output;
  expect_error({"eval", "--model", model, "--data", dir.path(), "--precision", "fp16"}, {"--precision", "fp16"});
  expect_error({"audit", "--external", "true", "--data", dir.path(), "--precision", "bf16", "--out", dir.file("b")},
               {"--precision bf16", "--external"});
}

}  // namespace
}  // namespace fca
