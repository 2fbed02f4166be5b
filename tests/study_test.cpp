// fca study end to end on a tiny config: every piece is produced, the report exists, and a second
// run skips everything that is finished.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
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
    EXPECT_NE(std::string(e.what()).find("is not one of gated, mudd, moe, mod, hyper, exit, external"), std::string::npos) << e.what();
  }
  for (const auto& family : model_families()) EXPECT_NO_THROW(parse_study_config(config(family.name), "study.json")) << family.name;
}

}  // namespace
}  // namespace fca
