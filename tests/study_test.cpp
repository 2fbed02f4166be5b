// fca study end to end on a tiny config: every piece is produced, the report exists, and a second
// run skips everything that is finished.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "core/json.h"
#include "models/registry.h"
#include "study/study.h"
#include "test_util.h"

namespace fca {
namespace {

TEST(Study, RunsAndResumes) {
  testing::TempDir dir;
  testing::write_corpus(dir.path(), 30000, 8000, 8000);
  testing::write_text(dir.file("study.json"), R"({
    "title": "tiny study",
    "data": ")" + dir.path() + R"(",
    "seeds": [1, 2],
    "variants": [
      {"name": "fg", "arch": "gated", "gate": "featuregate", "layers": 2, "dim": 16, "heads": 2, "seq": 16},
      {"name": "mudd", "arch": "mudd", "layers": 2, "dim": 16, "heads": 2, "seq": 16}
    ],
    "train": {"batch": 4, "steps": 6, "warmup": 2, "eval_every": 6, "eval_windows": 4, "checkpoint_every": 3},
    "eval_windows": 8,
    "audit": {"eval_windows": 8, "calib_windows": 8, "reps": 2, "bootstrap": 100},
    "exec": {"runs": 2, "max_runs": 2, "warmup": 0, "skip_thresholds": [0.5], "eval_windows": 4, "calib_windows": 4}
  })");
  const std::string out = dir.file("out");
  auto r = testing::run_fca({"study", "--config", dir.file("study.json"), "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f : {"fg-s1.safetensors", "fg-s2.safetensors", "mudd-s1/model.safetensors", "mudd-s2/model.safetensors",
                        "fg-s1.eval-test.json", "mudd-s2.eval-test.json", "fg-s1-audit/audit.json", "mudd-s2-audit/audit.json",
                        "fg-aggregate.json", "mudd-aggregate.json", "exec/exec.json", "report.html", "report.md"})
    EXPECT_TRUE(std::filesystem::exists(out + "/" + f)) << f;
  EXPECT_NE(r.output.find("report: " + out + "/report.html"), std::string::npos) << r.output;
  // Two seeds: the verdicts come from the aggregates (checkpoint level) and list the seeds' audits.
  const std::string md = testing::read_bytes(out + "/report.md");
  EXPECT_NE(md.find("Claims 1 and 2 at the checkpoint level: aggregate of 2 independently trained checkpoints (" + out +
                    "/fg-aggregate.json)"), std::string::npos) << md;
  EXPECT_NE(md.find("per-checkpoint audit: `fg-s2 (" + out + "/fg-s2-audit/audit.json)`"), std::string::npos) << md;
  EXPECT_NE(md.find("over checkpoints"), std::string::npos) << md;
  const std::string html = testing::read_bytes(out + "/report.html");
  EXPECT_NE(html.find("Per-checkpoint audits:"), std::string::npos);
  // One card per variant; every seed's tables under its own label.
  size_t cards = 0;
  for (size_t at = html.find("<div class=\"card\">"); at != std::string::npos; at = html.find("<div class=\"card\">", at + 1)) ++cards;
  EXPECT_EQ(cards, 2u);
  for (const char* heading : {"fg-s1: featuregate", "fg-s2: featuregate", "mudd-s1: mudd", "mudd-s2: mudd"})
    EXPECT_NE(html.find(heading), std::string::npos) << heading;
  r = testing::run_fca({"study", "--config", dir.file("study.json"), "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("train fg seed 1: done before, skipped"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("audit mudd seed 2: done before, skipped"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("] train fg seed 1\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("measure execution: done before, skipped"), std::string::npos) << r.output;
  // A variant added to the study: exec.json measured another set of models, so execution is
  // measured again and the report shows the new variant's card (a hyper-connection model).
  std::string config = testing::read_bytes(dir.file("study.json"));
  const std::string mudd_line = R"({"name": "mudd", "arch": "mudd", "layers": 2, "dim": 16, "heads": 2, "seq": 16})";
  config.replace(config.find(mudd_line), mudd_line.size(),
                 mudd_line + R"(, {"name": "mhc", "arch": "hyper", "hc_variant": "mhc", "hc_streams": 3, "layers": 2, "dim": 16, "heads": 2, "seq": 16})");
  testing::write_text(dir.file("study.json"), config);
  r = testing::run_fca({"study", "--config", dir.file("study.json"), "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("measure execution of 3 models (exec.json measured another set of models)"), std::string::npos) << r.output;
  nlohmann::json e = nlohmann::json::parse(testing::read_bytes(out + "/exec/exec.json"));
  ASSERT_EQ(e["models"].size(), 3u);
  EXPECT_EQ(e["models"][2]["family"], "hyper");
  EXPECT_NE(testing::read_bytes(out + "/report.html").find("Live execution runs"), std::string::npos);
}

// The paper's Uniform-Matched: a fixed gate at each seed's FeatureGate gate mass. Listed first, it
// is trained after its source; each seed's value is the gate mass that seed's FeatureGate checkpoint
// measures on the valid split, recorded with the source's hash and reused on a second run.
TEST(Study, UniformMatchedTrainsAfterItsSourceAtItsGateMass) {
  testing::TempDir dir;
  testing::write_corpus(dir.path(), 30000, 8000, 8000);
  testing::write_text(dir.file("study.json"), R"({
    "data": ")" + dir.path() + R"(",
    "seeds": [1, 2],
    "variants": [
      {"name": "matched", "arch": "gated", "gate": "fixed", "gate_value_from": "fg", "layers": 2, "dim": 16, "heads": 2, "seq": 16},
      {"name": "fg", "arch": "gated", "gate": "featuregate", "layers": 2, "dim": 16, "heads": 2, "seq": 16}
    ],
    "train": {"batch": 4, "steps": 6, "warmup": 2, "eval_every": 6, "eval_windows": 4, "checkpoint_every": 3},
    "eval_windows": 8,
    "audit": {"eval_windows": 8, "calib_windows": 8, "reps": 2, "bootstrap": 100},
    "exec": {"runs": 2, "max_runs": 2, "warmup": 0, "eval_windows": 4, "calib_windows": 4}
  })");
  const std::string out = dir.file("out");
  auto r = testing::run_fca({"study", "--config", dir.file("study.json"), "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(r.output.find("] train fg seed 2\n"), r.output.find("] train matched seed 1\n")) << r.output;
  std::vector<double> masses;
  for (int seed : {1, 2}) {
    const std::string s = std::to_string(seed);
    const auto mass = nlohmann::json::parse(testing::read_bytes(out + "/matched-s" + s + ".gate-mass.json"));
    EXPECT_EQ(mass["split"], "valid");
    EXPECT_EQ(mass["source"], out + "/fg-s" + s + ".safetensors");
    // The value is the source checkpoint's gate mass on the valid split, as fca eval measures it.
    const auto e = testing::run_fca({"eval", "--model", out + "/fg-s" + s + ".safetensors", "--data", dir.path(), "--split", "valid",
                                     "--windows", "8", "--out", dir.file("fg-valid-" + s + ".json")});
    ASSERT_EQ(e.exit_code, 0) << e.output;
    const auto valid = nlohmann::json::parse(testing::read_bytes(dir.file("fg-valid-" + s + ".json")));
    // (the same windows; only the batching of the sum may differ)
    EXPECT_NEAR(mass["gate_mass"].get<double>(), valid["gate_mass"].get<double>(), 1e-9) << seed;
    const auto eval = nlohmann::json::parse(testing::read_bytes(out + "/matched-s" + s + ".eval-test.json"));
    EXPECT_EQ(eval["config"]["gate"], "fixed");
    EXPECT_EQ(eval["config"]["gate_value"].get<double>(), mass["gate_mass"].get<double>()) << seed;
    EXPECT_EQ(eval["variant"], "matched");
    masses.push_back(mass["gate_mass"].get<double>());
  }
  EXPECT_NE(masses[0], masses[1]);  // per seed, not pooled
  // Two seeds with different gate values are one row of the quality table.
  const std::string html = testing::read_bytes(out + "/report.html");
  EXPECT_NE(html.find("matched: gated (per-seed settings) L2 D16"), std::string::npos);
  r = testing::run_fca({"study", "--config", dir.file("study.json"), "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("measure the gate mass of fg seed 1: done before, skipped"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train matched seed 2: done before, skipped"), std::string::npos) << r.output;
  // A source retrained since: the matched checkpoint was trained with another value and is refused.
  // (a retrained seed 1 that came out as seed 2's weights)
  std::filesystem::copy_file(out + "/fg-s2.safetensors", out + "/fg-s1.safetensors", std::filesystem::copy_options::overwrite_existing);
  r = testing::run_fca({"study", "--config", dir.file("study.json"), "--out", out});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("matched-s1.safetensors: trained with gate_value"), std::string::npos) << r.output;
}

TEST(StudyConfig, GateValueFromNamesAGatedVariantWithLearnedGates) {
  const auto error = [](const std::string& variants) {
    try {
      parse_study_config(nlohmann::json::parse(R"({"out": "x", "variants": [)" + variants + "]}"), "study.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string fg = R"({"name": "fg", "arch": "gated", "gate": "featuregate"})";
  EXPECT_EQ(error(fg + R"(, {"name": "m", "arch": "gated", "gate": "fixed", "gate_value_from": "fg"})"), "no error");
  EXPECT_NE(error(fg + R"(, {"name": "m", "arch": "gated", "gate": "fixed", "gate_value_from": "nope"})").find("gate_value_from \"nope\" names no variant"),
            std::string::npos);
  EXPECT_NE(error(fg + R"(, {"name": "m", "arch": "gated", "gate": "uniform", "gate_value_from": "fg"})")
                .find("the variant must be arch \"gated\" with gate \"fixed\""),
            std::string::npos);
  EXPECT_NE(error(R"({"name": "d", "arch": "gated", "gate": "dense"}, {"name": "m", "arch": "gated", "gate": "fixed", "gate_value_from": "d"})")
                .find("the source must be a variant with learned gates (gated: featuregate, layerstatic or uniform), found gate \"dense\""),
            std::string::npos);
  EXPECT_NE(error(R"({"name": "x", "arch": "mudd"}, {"name": "m", "arch": "gated", "gate": "fixed", "gate_value_from": "x"})").find("found arch \"mudd\""),
            std::string::npos);
  // The families say which settings take a gate mass (TrainFamily::gate_mass_matching): a family
  // without one is refused, naming those that have one.
  EXPECT_NE(error(fg + R"(, {"name": "m", "arch": "mudd", "gate_value_from": "fg"})").find("arch \"mudd\" has none; the variant must be arch \"gated\""),
            std::string::npos);
  EXPECT_NE(error(fg + R"(, {"name": "m", "arch": "gated", "gate": "fixed", "gate_value": 0.5, "gate_value_from": "fg"})")
                .find("give 'gate_value' or 'gate_value_from', not both"),
            std::string::npos);
}

}  // namespace
}  // namespace fca

namespace fca {
namespace {

// A variant's arch is checked against the registry's families (and "external"), not a list of its
// own: an unknown one is refused, naming every family fca knows.
TEST(StudyConfig, ArchIsCheckedAgainstTheRegistry) {
  const auto config = [](const std::string& arch) {
    return nlohmann::json::parse(R"({"out": "x", "variants": [{"name": "a", "arch": ")" + arch + R"("}]})");
  };
  try {
    parse_study_config(config("nosuch"), "study.json");
    ADD_FAILURE() << "an unknown arch was accepted";
  } catch (const Error& e) {
    std::string known;
    for (const auto& family : model_families()) known += family.name + ", ";
    EXPECT_NE(std::string(e.what()).find("is not one of " + known + "external"), std::string::npos) << e.what();
  }
  for (const auto& family : model_families()) EXPECT_NO_THROW(parse_study_config(config(family.name), "study.json")) << family.name;
}

}  // namespace
}  // namespace fca
