// The test binary's second family, skip (tests/toy_family/skip_*), brings what no family of fca's
// own declares: a record kind (block_skip), an audit setting (skip_gate_threshold), an exec sweep
// (skip_gate_thresholds) and an execution counter (skipped_rows), all from its folder, none named
// in src/ (issue 56). The conformance suite trains, audits, measures and reports it like every
// family; these tests hold what that suite does not look at: the flags `fca audit` and `fca exec`
// build from the declarations, the sweep and the counter in exec.json and exec.md, the setting in
// the audit and its cache, the report's figure of its kind, the study keys, and the refusals of a
// second declaration and of a family whose entries name different families.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>

#include "audit/audit.h"
#include "audit/audit_kind.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/exec_counters.h"
#include "data/corpus.h"
#include "exec/exec.h"
#include "exec/exec_family.h"
#include "families/families.h"
#include "models/capabilities.h"
#include "models/record_kind.h"
#include "models/registry.h"
#include "report/report.h"
#include "report/report_kind.h"
#include "study/study.h"
#include "test_util.h"
#include "train/train_family.h"

namespace fca {
namespace {

constexpr ModelShape kShape{2, 16, 2, 16};

std::string fresh_skip_checkpoint(const testing::TempDir& dir, const std::string& stem) {
  const TrainFamily& family = train_family_named("skip");
  const std::string path = checkpoint_path(family, dir.file(stem));
  family.make(kShape, resolve_settings(family, nlohmann::json::object(), "test"), TrainableArgs{3, 2, {}, 1.0}, "test")->save(path, {});
  return path;
}

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The flags come from the declarations: the skip family's and the exit family's, each once, with
// the declaration's help.
TEST(SkipFamily, ItsSettingsAreFlagsOfAuditAndExecBuiltFromItsDeclaration) {
  CLI::App app;
  cli::add_audit_command(app);
  cli::add_exec_command(app);
  const std::string audit = app.get_subcommand("audit")->help(), exec = app.get_subcommand("exec")->help();
  EXPECT_NE(audit.find("--skip-gate-threshold"), std::string::npos) << audit;
  EXPECT_NE(audit.find("Skip models (the test binary's family): the gate threshold tau"), std::string::npos) << audit;
  EXPECT_NE(audit.find("--exit-threshold"), std::string::npos) << audit;
  EXPECT_NE(exec.find("--skip-gate-thresholds"), std::string::npos) << exec;
  EXPECT_NE(exec.find("--exit-thresholds"), std::string::npos) << exec;
  EXPECT_EQ(exec.find("--skip-gate-threshold "), std::string::npos) << "an audit setting became an exec flag";
  // A value outside the declared range is refused by the flag.
  CLI::App parse;
  cli::add_audit_command(parse);
  EXPECT_THROW(parse.parse(std::vector<std::string>{"--skip-gate-threshold", "1.5", "audit"}), CLI::ParseError);
}

// exec: the sweep from ExecOptions::family_settings, the counter in every mode that skipped rows,
// checked against the family's formula, and exec.md's line of it.
TEST(SkipFamily, ExecRunsItsSweepAndPrintsItsCounter) {
  testing::TempDir dir;
  testing::write_corpus(dir.path(), 20000, 4000, 4000);
  const Corpus corpus(dir.path());
  ExecOptions e;
  e.models = {fresh_skip_checkpoint(dir, "m")};
  e.batch = 2;
  e.runs = 1;
  e.max_runs = 1;
  e.warmup = 0;
  e.time_budget_s = 0;
  e.eval_windows = 4;
  e.calib_windows = 4;
  e.out_dir = dir.file("exec");
  e.progress = false;
  e.family_settings = {{"skip_gate_thresholds", {0.0, 1.0}}};
  const nlohmann::ordered_json exec = run_exec(corpus, e);
  std::map<std::string, nlohmann::ordered_json> modes;
  for (const auto& m : exec["models"][0]["modes"]) modes[m["mode"].get<std::string>()] = m;
  ASSERT_TRUE(modes.count("skip_gate_0") && modes.count("skip_gate_1")) << exec["models"][0]["modes"].dump();
  EXPECT_FALSE(modes.count("skip_gate_0.3")) << "the declared default ran though the options gave the sweep";
  for (const auto& [name, m] : modes) EXPECT_TRUE(m["counters_match_graph"].get<bool>()) << name;
  EXPECT_FALSE(modes["skip_gate_0"].contains("skipped_rows_per_pass")) << "tau = 0 runs every block on every row";
  const int64_t rows = int64_t(kShape.layers) * e.batch * kShape.seq;
  EXPECT_EQ(modes["skip_gate_1"]["skipped_rows_per_pass"], rows) << "tau = 1 skips every row (g < 1)";
  EXPECT_EQ(exec["settings"]["family_settings"]["skip_gate_thresholds"], nlohmann::json({0.0, 1.0}));
  const std::string md = exec_markdown(exec);
  EXPECT_NE(md.find("skipped_rows per pass (rows whose block the skip gate left out"), std::string::npos) << md;
  EXPECT_NE(md.find("skip_gate_1 " + std::to_string(rows)), std::string::npos) << md;
  EXPECT_NE(md.find("Skip models (the test binary's family): every_block replays"), std::string::npos) << "no legend of its modes";
  EXPECT_EQ(md.find("Early-exit models:"), std::string::npos) << "the legend explains a family that was not measured";
  // The sweep given for models of no family that takes it would change nothing: refused by name.
  const TrainFamily& toy = train_family_named("toy");
  e.models = {checkpoint_path(toy, dir.file("toy"))};
  toy.make(kShape, resolve_settings(toy, nlohmann::json::object(), "test"), TrainableArgs{3, 2, {}, 1.0}, "test")->save(e.models[0], {});
  EXPECT_NE(what_of([&] { check_exec_options(e); }).find("--skip-gate-thresholds applies to models of the skip family, and none of the models is one"),
            std::string::npos);
  e.family_settings = {{"no_such_setting", {1.0}}};
  EXPECT_NE(what_of([&] { check_exec_options(e); }).find("no installed family takes the setting --no-such-setting"), std::string::npos);
}

// The audit hands the setting to the model (its ControllerSetting), the cache records it, and a
// cache written at another threshold is refused; a setting the model's family lacks is an Error
// naming the family and the key.
TEST(SkipFamily, TheAuditTakesItsSettingAndItsCacheRecordsIt) {
  testing::TempDir dir;
  testing::write_corpus(dir.path(), 20000, 4000, 4000);
  const Corpus corpus(dir.path());
  const std::string path = fresh_skip_checkpoint(dir, "m");
  AuditOptions a;
  a.eval_windows = 4;
  a.calib_windows = 4;
  a.reps = 2;
  a.batch = 2;
  a.bootstrap_resamples = 50;
  a.progress = false;
  a.model_path = path;
  a.out_dir = dir.file("audit");
  a.cache_path = dir.file("cache.safetensors");
  a.family_settings = {{"skip_gate_threshold", 0.25}};
  auto model = open_model(path, 2, kShape.seq);
  const nlohmann::ordered_json audit = run_audit(*model, corpus, a);
  EXPECT_EQ(controller_setting_of(*model), "skip_gate_threshold 0.25");
  EXPECT_EQ(audit["model"]["record_kind"], "block_skip");
  EXPECT_TRUE(audit["exact_replay"]["passed"].get<bool>());
  // The report draws the audit from its kind's row (the family's run-frequency figure); an audit of
  // a kind no installed family draws says so instead.
  ReportInputs r;
  r.audits = {a.out_dir + "/audit.json"};
  EXPECT_NE(report_html(load_report_data(r)).find("Block runs: "), std::string::npos);
  nlohmann::json unknown = nlohmann::json::parse(std::ifstream(a.out_dir + "/audit.json"));
  unknown["model"]["record_kind"] = "no_such_kind";
  std::ofstream(dir.file("unknown.json")) << unknown.dump();
  r.audits = {dir.file("unknown.json")};
  const std::string html = report_html(load_report_data(r));
  EXPECT_NE(html.find("no figure for its record kind &quot;no_such_kind&quot;"), std::string::npos);
  EXPECT_EQ(html.find("Block runs: "), std::string::npos);
  a.family_settings = {{"skip_gate_threshold", 0.75}};
  a.out_dir = dir.file("audit2");
  auto other = open_model(path, 2, kShape.seq);
  EXPECT_NE(what_of([&] { run_audit(*other, corpus, a); }).find("controller_setting"), std::string::npos);
  a.family_settings = {{"exit_threshold", 0.5}};
  EXPECT_NE(what_of([&] { run_audit(*open_model(path, 2, kShape.seq), corpus, a); })
                .find("skip models have no controller setting \"exit_threshold\""),
            std::string::npos);
}

// A study takes the settings as keys of its "audit" and "exec" sections, checked against the
// declared range; an undeclared key is refused.
TEST(SkipFamily, AStudyTakesItsSettingsAsKeysOfItsSections) {
  const auto config = [](const std::string& audit, const std::string& exec) {
    return nlohmann::json::parse(R"({"out": "x", "variants": [{"name": "s", "arch": "skip"}], "audit": )" + audit +
                                 R"(, "exec": )" + exec + "}");
  };
  const StudyConfig c = parse_study_config(config(R"({"skip_gate_threshold": 0.4})", R"({"skip_gate_thresholds": [0.2, 0.6]})"),
                                           "study.json");
  EXPECT_EQ(c.audit_family_settings.at("skip_gate_threshold"), 0.4);
  EXPECT_EQ(c.exec_family_settings.at("skip_gate_thresholds"), (std::vector<double>{0.2, 0.6}));
  EXPECT_NE(what_of([&] { parse_study_config(config(R"({"skip_gate_threshold": 2})", "{}"), "study.json"); })
                .find("skip_gate_threshold"),
            std::string::npos);
  EXPECT_NE(what_of([&] { parse_study_config(config(R"({"skip_gate_thresholds": [0.5]})", "{}"), "study.json"); })
                .find("skip_gate_thresholds"),
            std::string::npos)
      << "an exec setting was accepted in the audit section";
}

// Each table refuses a second declaration of a name that is taken, so that two families cannot
// silently share (and mix up) a counter, a kind or its rows.
TEST(SkipFamily, ASecondDeclarationOfItsCounterOrKindIsRefused) {
  EXPECT_NO_THROW(add_family_counter(family_counters()[size_t(family_counter_index("skipped_rows"))]));  // the same, again
  EXPECT_THROW(add_family_counter({"skipped_rows", "another meaning"}), Error);
  EXPECT_THROW(family_counter_index("no_such_counter"), Error);
  RecordKindRow again = *record_kind_named("block_skip");
  EXPECT_THROW(add_record_kind(again), Error);
  EXPECT_THROW(add_audit_kind(audit_kind_row(record_kind_named("block_skip")->kind)), Error);
  EXPECT_THROW(add_report_kind({"block_skip", [](const ReportData&, const ReportData::Named&) { return std::string(); }}), Error);
  ASSERT_NE(report_kind_row("block_skip"), nullptr);
  const std::string mixed = what_of([] { install_family({family_named("skip"), train_family_named("toy"), exec_family_named("skip")}); });
  EXPECT_NE(mixed.find("\"skip\" (model), \"toy\" (train), \"skip\" (exec)"), std::string::npos) << mixed;
  EXPECT_EQ(report_kind_row("no_such_kind"), nullptr);
}

}  // namespace
}  // namespace fca
