// The report: renders for gated-only, MUDD-only and mixed inputs; the HTML is well-formed and holds
// every figure; a headless-Chromium screenshot where Chromium exists; wrong or incomplete inputs
// get errors naming the file and field.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "audit/aggregate.h"
#include "audit/audit.h"
#include "core/undefined_statistic.h"
#include "core/threads.h"
#include "exec/exec.h"
#include "models/gated/auditable.h"
#include "models/gated/model.h"
#include "models/mudd/auditable.h"
#include "report/audit_markdown.h"
#include "models/registry.h"
#include "report/report.h"
#include "test_util.h"
#include "train/trainer.h"

namespace fca {
namespace {

// Every element closed in order (the report is written XHTML-compatible); void elements self-close.
::testing::AssertionResult well_formed(const std::string& html) {
  std::vector<std::string> stack;
  const std::regex tag(R"(<(/?)([a-zA-Z][a-zA-Z0-9]*)([^>]*?)(/?)>)");
  const std::string body = html.substr(html.find("<html"));
  for (auto it = std::sregex_iterator(body.begin(), body.end(), tag); it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    const std::string name = m[2];
    if (m[4] == "/") continue;  // self-closing
    if (m[1] == "/") {
      if (stack.empty() || stack.back() != name)
        return ::testing::AssertionFailure() << "closing </" << name << "> but open is <" << (stack.empty() ? "" : stack.back()) << ">";
      stack.pop_back();
    } else {
      stack.push_back(name);
    }
  }
  if (!stack.empty()) return ::testing::AssertionFailure() << "unclosed <" << stack.back() << ">";
  return ::testing::AssertionSuccess();
}

// A small audit's options: few windows and resamples, two randomisations, no progress bar.
AuditOptions small_audit(const std::string& model, const std::string& out, int eval_windows, int calib_windows, int resamples) {
  AuditOptions a;
  a.model_path = model;
  a.eval_windows = eval_windows;
  a.calib_windows = calib_windows;
  a.reps = 2;
  a.bootstrap_resamples = resamples;
  a.out_dir = out;
  a.progress = false;
  return a;
}

class Report : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    set_threads(2);
    dir = new testing::TempDir();
    testing::write_corpus(dir->path(), 30000, 6000, 6000);
    const Corpus corpus(dir->path());
    for (const std::string arch : {"gated", "mudd"}) {
      // The same tiny training run for both: the MUDD shape, or the gated featuregate config.
      TrainOptions o = testing::tiny_mudd_training(arch == "gated" ? dir->file("fg.safetensors") : dir->file("mudd"));
      if (arch == "gated") testing::train_gated(o, testing::tiny_config(GateKind::featuregate));
      train_model(o, corpus);
      const AuditOptions a = small_audit(o.out, dir->file(arch + "-audit"), 12, 8, 200);
      std::unique_ptr<AuditableModel> m;
      if (arch == "gated") m = std::make_unique<GatedAuditable>(o.out, a.batch, 1 << 20);
      else m = std::make_unique<MuddAuditable>(o.out, a.batch, 1 << 20);
      write_audit_markdown(a.out_dir, run_audit(*m, corpus, a));
    }
    ExecOptions e;
    e.models = {dir->file("fg.safetensors"), dir->file("mudd")};
    e.runs = e.max_runs = 2;
    e.warmup = 0;
    e.eval_windows = 4;
    e.calib_windows = 4;
    e.skip_thresholds = {0.5};
    e.out_dir = dir->file("exec");
    e.progress = false;
    run_exec(corpus, e);
  }
  static void TearDownTestSuite() { delete dir; }
  static testing::TempDir* dir;
};
testing::TempDir* Report::dir = nullptr;

TEST_F(Report, RendersGatedMuddAndMixed) {
  const std::string gated = dir->file("gated-audit/audit.json"), mudd = dir->file("mudd-audit/audit.json");
  for (const auto& audits : {std::vector<std::string>{gated}, std::vector<std::string>{mudd}, std::vector<std::string>{gated, mudd}}) {
    ReportInputs in;
    in.audits = audits;
    in.execs = {dir->file("exec/exec.json")};
    in.train_logs = {dir->file("fg.safetensors.log.jsonl"), dir->file("mudd/train.log.jsonl")};
    const ReportData data = load_report_data(in);
    const std::string html = report_html(data);
    EXPECT_TRUE(well_formed(html));
    for (const char* id : {"verdicts", "fig-penalties", "fig-retention", "fig-variance", "fig-profiles", "fig-latency",
                           "fig-training", "provenance"})
      EXPECT_NE(html.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
    EXPECT_EQ(html.find("<script"), std::string::npos);  // readable without JavaScript
    EXPECT_EQ(html.find("http://", html.find("<body")), html.find("http://www.w3.org/2000/svg", html.find("<body")));
    const std::string md = report_markdown(data);
    EXPECT_NE(md.find("Coefficient variation"), std::string::npos);
    EXPECT_EQ(compute_verdicts(data).size(), audits.size());
  }
}

TEST_F(Report, WrongSchemaAndMissingFieldsAreErrors) {
  nlohmann::json j;
  std::ifstream(dir->file("gated-audit/audit.json")) >> j;
  j["schema"] = "fca-audit-v0";
  std::ofstream(dir->file("old.json")) << j.dump();
  ReportInputs in;
  in.audits = {dir->file("old.json")};
  try {
    load_report_data(in);
    ADD_FAILURE() << "accepted another schema";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("old.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("fca-audit-v1"), std::string::npos);
  }
  j["schema"] = "fca-audit-v1";
  j.erase("variance");
  std::ofstream(dir->file("partial.json")) << j.dump();
  in.audits = {dir->file("partial.json")};
  try {
    load_report_data(in);
    ADD_FAILURE() << "accepted an audit without its variance figures";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("partial.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("/variance/shares"), std::string::npos) << e.what();
  }
}

// Fields of the wrong type or missing below the top-level checks (found by fuzz_report_inputs: a
// string where exec.json has a number ended the program with an uncaught type_error) are errors naming the file.
TEST_F(Report, WrongTypesDeepInsideAreErrors) {
  auto refused = [&](const std::string& source, const std::string& name, auto mutate, bool exec,
                     const std::string& part = "a field the report reads") {
    nlohmann::json j;
    std::ifstream(dir->file(source)) >> j;
    mutate(j);
    std::ofstream(dir->file(name)) << j.dump();
    ReportInputs in;
    (exec ? in.execs : in.audits).push_back(dir->file(name));
    try {
      load_report_data(in);
      ADD_FAILURE() << name << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  refused("exec/exec.json", "string-blocks.json", [](nlohmann::json& j) { j["models"][0]["modes"][0]["executed_blocks"] = "two"; }, true);
  // A latency ratio is an object with its interval and the words exec chose (fca-exec-v2).
  refused("exec/exec.json", "bare-ratio.json", [](nlohmann::json& j) { j["models"][0]["skip_sweep"][1]["latency_ratio_to_unskipped"] = 0.9; },
          true, "skip_sweep[1]/latency_ratio_to_unskipped must be null or a ratio object");
  refused("exec/exec.json", "wordless-ratio.json",
          [](nlohmann::json& j) { j["models"][0]["skip_sweep"][1]["latency_ratio_to_unskipped"].erase("difference"); }, true,
          "has an estimate but no \"difference\"");
  refused("exec/exec.json", "v1.json", [](nlohmann::json& j) { j["schema"] = "fca-exec-v1"; }, true, "fca-exec-v2");
  refused("gated-audit/audit.json", "string-share.json", [](nlohmann::json& j) { j["variance"]["shares"]["input"] = "big"; }, false,
          "'/variance/shares/input' must be a number");
  refused("gated-audit/audit.json", "no-ci.json", [](nlohmann::json& j) { j["conditions"][1].erase("mc_se"); j["factor_effects"]["input"].erase("ci95"); }, false);
  // Found by fuzz_report_inputs: a ragged profile was indexed out of bounds (heap-buffer-overflow).
  refused("mudd-audit/audit.json", "ragged-profile.json", [](nlohmann::json& j) { j["profiles"]["static_profile"][1][0].erase(0); }, false,
          "profiles.static_profile is not a rectangular");
  refused("gated-audit/audit.json", "ragged-gates.json", [](nlohmann::json& j) { j["profiles"]["layer_position_mean"][1] = nlohmann::json::array(); }, false,
          "profiles.layer_position_mean is not a non-empty rectangular array");
  // Found by fuzz_report_inputs: a one-element ci95 was read at index 1 (heap-buffer-overflow).
  refused("gated-audit/audit.json", "short-ci.json", [](nlohmann::json& j) { j["conditions"][1]["ci95"] = {0.5}; }, false,
          "'/conditions/1/ci95' must be an interval [lower, upper] of two numbers");
  refused("gated-audit/audit.json", "text-ci.json", [](nlohmann::json& j) { j["retention"]["ci95"] = {"a", 1}; }, false,
          "'/retention/ci95' must be an interval");
}

// exec.json files written before issue 44 call a model's label "gate": the report reads them as it
// reads "label", and an entry with neither is refused naming the field.
TEST_F(Report, AnExecFileFromBeforeTheLabelKeyReadsTheSame) {
  nlohmann::json j;
  std::ifstream(dir->file("exec/exec.json")) >> j;
  for (auto& m : j["models"]) {
    ASSERT_TRUE(m.contains("label"));
    m["gate"] = m["label"];
    m.erase("label");
  }
  std::ofstream(dir->file("old-exec.json")) << j.dump();
  ReportInputs now, old;
  now.execs = {dir->file("exec/exec.json")};
  old.execs = {dir->file("old-exec.json")};
  const ReportData a = load_report_data(now), b = load_report_data(old);
  for (size_t i = 0; i < a.execs[0].doc["models"].size(); ++i)
    EXPECT_EQ(b.execs[0].doc["models"][i]["label"], a.execs[0].doc["models"][i]["label"]);
  EXPECT_EQ(report_markdown(b), report_markdown(a));
  for (auto& m : j["models"]) m.erase("gate");
  std::ofstream(dir->file("unlabelled-exec.json")) << j.dump();
  ReportInputs unlabelled;
  unlabelled.execs = {dir->file("unlabelled-exec.json")};
  try {
    load_report_data(unlabelled);
    ADD_FAILURE() << "an exec entry without a label was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/label"), std::string::npos) << e.what();
  }
}

// What a reader sees matches the audit.json it came from: every condition's DeltaNLL and CI in the
// HTML table and the Markdown, and the dependence verdict's wording follows the criteria.
TEST_F(Report, NumbersAndVerdictsMatchTheAudits) {
  ReportInputs in;
  in.audits = {dir->file("gated-audit/audit.json"), dir->file("mudd-audit/audit.json")};
  in.execs = {dir->file("exec/exec.json")};
  const ReportData data = load_report_data(in);
  const std::string html = report_html(data), md = report_markdown(data);
  auto text = [](const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return std::string(buf);
  };
  const std::vector<Verdicts> verdicts = compute_verdicts(data);
  ASSERT_EQ(verdicts.size(), data.audits.size());
  for (size_t i = 0; i < data.audits.size(); ++i) {
    const auto& j = data.audits[i].doc;
    for (const auto& c : j["conditions"]) {
      const std::string row = "<td class=\"l\">" + c["name"].get<std::string>() + "</td><td>" + text("%+.5f", c["delta_nll"].get<double>()) +
                              "</td><td class=\"l\">[" + text("%+.5f", c["ci95"][0].get<double>()) + ", " +
                              text("%+.5f", c["ci95"][1].get<double>()) + "]";
      EXPECT_NE(html.find(row), std::string::npos) << "HTML lacks " << row;
      const std::string md_row = "| " + c["name"].get<std::string>() + " | " + text("%+.5f", c["delta_nll"].get<double>()) + " | [";
      EXPECT_NE(md.find(md_row), std::string::npos) << "Markdown lacks " << md_row;
    }
    // The dependence verdict: the criterion's outcome decides the wording.
    const bool small = j["criteria"]["static_penalty_small"]["holds"].get<bool>();
    double lower = 0;
    for (const auto& c : j["conditions"])
      if (c["name"] == "static_profile") lower = c["ci95"][0];
    const double threshold = j["criteria"]["static_penalty_small"]["threshold"];
    const std::string expected = small ? "The frozen model does not need its dynamic coefficients"
                                 : lower > threshold ? "The frozen model depends on its dynamic coefficients"
                                                     : "Not established either way";
    EXPECT_EQ(verdicts[i].dependence.rfind(expected, 0), 0u) << verdicts[i].dependence;
    EXPECT_NE(html.find(expected), std::string::npos);
    EXPECT_NE(md.find(verdicts[i].dependence), std::string::npos);
  }
}

TEST_F(Report, HeadlessChromiumScreenshot) {
  // `make test` installs Debian's chromium, so a missing browser is a broken set-up, not a skip.
  ASSERT_TRUE(std::filesystem::exists("/usr/bin/chromium"))
      << "Chromium is not installed: `make test` installs it (FCA_WITH_CHROMIUM=1 scripts/install_deps.sh)";
  ReportInputs in;
  in.audits = {dir->file("gated-audit/audit.json"), dir->file("mudd-audit/audit.json")};
  in.execs = {dir->file("exec/exec.json")};
  const std::string html_path = dir->file("report.html"), png = dir->file("report.png");
  std::ofstream(html_path) << report_html(load_report_data(in));
  const std::string cmd = "timeout 120 /usr/bin/chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
                          "--disable-background-networking --disable-component-update --disable-sync --user-data-dir=" +
                          dir->file("chromium-profile") + " --window-size=1200,2400 --screenshot=" + png + " file://" +
                          html_path + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ASSERT_TRUE(std::filesystem::exists(png));
  EXPECT_GT(std::filesystem::file_size(png), 20000u);  // a rendered page, not a blank one
  std::printf("screenshot: %s, %ju bytes\n", png.c_str(), std::uintmax_t(std::filesystem::file_size(png)));
}

}  // namespace
}  // namespace fca

namespace fca {
namespace {

// Each family names its models (models/registry.h); the report takes the name from the result
// documents and never guesses a family from a config's fields.
TEST(ReportLabels, EveryFamilyNamesItsModelsAndTheReportDoesNotGuess) {
  EXPECT_EQ(family_named("gated").label(nlohmann::json::parse(R"({"gate":"featuregate","n_layer":2})")), "featuregate");
  EXPECT_EQ(family_named("moe").label(nlohmann::json::parse(R"({"n_expert":8,"top_k":2,"n_layer":2})")), "moe E8 k2");
  EXPECT_EQ(family_named("mod").label(nlohmann::json::parse(R"({"capacity":0.125,"routed_every":2})")), "mod c0.125");
  EXPECT_EQ(family_named("mudd").label(nlohmann::json::parse(R"({"dim":64,"n_layer":2})")), "mudd");
  EXPECT_EQ(family_named("hyper").label(nlohmann::json::parse(R"({"hc_variant":"mhc","hc_streams":4})")), "mhc n4");
  EXPECT_THROW(family_named("nosuch"), Error);
  // A training log whose start record carries no label is refused, not labelled "mudd".
  testing::TempDir dir;
  const std::string log = dir.file("old.log.jsonl");
  std::ofstream(log) << R"({"type":"start","step":0,"options":{"config":{"dim":64,"n_layer":2},"seed":0}})" << "\n"
                     << R"({"type":"step","step":1,"loss":5.0})" << "\n";
  try {
    read_train_log(log);
    ADD_FAILURE() << "a log without a label was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no 'label'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fca

namespace fca {
namespace {

// Models with no coefficient variation at all (Uniform, Dense, Fixed): their audits hold undefined
// statistics (retention 0/0, the variance shares of a constant tensor) in the one shape of
// core/undefined_statistic.h, and the report renders each as "undefined" with its reason. Two
// Uniform checkpoints aggregate into one card.
class DegenerateReport : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    set_threads(2);
    dir = new testing::TempDir();
    testing::write_corpus(dir->path(), 20000, 4000, 4000);
    const Corpus corpus(dir->path());
    for (const auto& [gate, seed] : std::vector<std::pair<GateKind, int>>{
             {GateKind::uniform, 1}, {GateKind::uniform, 2}, {GateKind::dense, 1}, {GateKind::fixed, 1}}) {
      const std::string name = std::string(gate_kind_name(gate)) + "-s" + std::to_string(seed);
      GatedModel<float>::initialized(testing::tiny_config(gate), uint64_t(seed)).save(dir->file(name + ".safetensors"));
      const AuditOptions a = small_audit(dir->file(name + ".safetensors"), dir->file(name + "-audit"), 8, 4, 100);
      GatedAuditable m(a.model_path, 8, 1 << 20);
      write_audit_markdown(a.out_dir, run_audit(m, corpus, a));
    }
    const auto agg = aggregate_audits({dir->file("uniform-s1-audit/audit.json"), dir->file("uniform-s2-audit/audit.json")}, 100, 1);
    std::ofstream(dir->file("uniform-aggregate.json")) << agg.dump(2);
  }
  static void TearDownTestSuite() { delete dir; }
  static ReportInputs inputs() {
    ReportInputs in;
    for (const char* name : {"uniform-s1", "uniform-s2", "dense-s1", "fixed-s1"}) in.audits.push_back(dir->file(std::string(name) + "-audit/audit.json"));
    in.aggregates = {dir->file("uniform-aggregate.json")};
    return in;
  }
  static nlohmann::json audit(const std::string& name) {
    nlohmann::json j;
    std::ifstream(dir->file(name + "-audit/audit.json")) >> j;
    return j;
  }
  static testing::TempDir* dir;
};
testing::TempDir* DegenerateReport::dir = nullptr;

TEST_F(DegenerateReport, AuditsWriteUndefinedStatisticsWithTheirReason) {
  for (const char* name : {"uniform-s1", "dense-s1", "fixed-s1"}) {
    const nlohmann::json j = audit(name);
    const auto& r = j["retention"]["static_profile"];
    EXPECT_TRUE(r["estimate"].is_null()) << name;
    EXPECT_TRUE(r["ci95"].is_null()) << name;
    EXPECT_NE(r["note"].get<std::string>().find("undefined: structure_removed leaves the NLL unchanged"), std::string::npos) << r;
    EXPECT_EQ(j["variance"]["total_variance"].get<double>(), 0.0) << name;
    for (const auto& [key, share] : j["variance"]["shares"].items()) EXPECT_TRUE(share.is_null()) << name << " " << key;
    EXPECT_EQ(undefined_reason(j["variance"]).find("the coefficients are constant"), 0u) << j["variance"];
    EXPECT_TRUE(j["criteria"]["retention_high"]["value"].is_null());
    EXPECT_FALSE(j["criteria"]["retention_high"]["holds"].get<bool>());
    // The audit's own Markdown says why too.
    const std::string md = testing::read_bytes(dir->file(std::string(name) + "-audit/audit.md"));
    EXPECT_NE(md.find("undefined: structure_removed leaves the NLL unchanged"), std::string::npos) << name;
    EXPECT_NE(md.find("The shares are undefined: the coefficients are constant"), std::string::npos) << name;
  }
  nlohmann::json agg;
  std::ifstream(dir->file("uniform-aggregate.json")) >> agg;
  const auto& f = agg["figures"]["retention.static_profile"];
  EXPECT_TRUE(is_undefined_statistic(f)) << f;
  EXPECT_TRUE(f["mean"].is_null());
  EXPECT_EQ(undefined_reason(f).rfind("in every checkpoint, structure_removed leaves the NLL unchanged", 0), 0u) << f;
  EXPECT_TRUE(is_undefined_statistic(agg["figures"]["variance_share.input"]));
  EXPECT_NO_THROW(check_statistics(agg, "uniform-aggregate.json"));
}

TEST_F(DegenerateReport, TheReportRendersUndefinedAndOneCardPerVariant) {
  const ReportData data = load_report_data(inputs());
  const std::string html = report_html(data), md = report_markdown(data);
  EXPECT_TRUE(well_formed(html));
  // One card per variant: the two Uniform checkpoints share their aggregate's card.
  const std::vector<Verdicts> verdicts = compute_verdicts(data);
  ASSERT_EQ(verdicts.size(), 3u);
  std::set<std::string> titles;
  for (const auto& v : verdicts) {
    EXPECT_TRUE(titles.insert(v.model).second) << "two cards titled " << v.model;
    EXPECT_NE(v.dependence.find("retention undefined: "), std::string::npos) << v.dependence;
    EXPECT_NE(v.dependence.find("structure_removed leaves the NLL unchanged"), std::string::npos) << v.dependence;
    EXPECT_EQ(v.variation.rfind("Coefficients do not vary; the variance shares are undefined: ", 0), 0u) << v.variation;
    EXPECT_EQ(v.variation.find("nan"), std::string::npos) << v.variation;
    EXPECT_FALSE(v.varies);
    EXPECT_NE(md.find(v.dependence), std::string::npos);
  }
  EXPECT_EQ(verdicts[0].checkpoints.size(), 2u);
  // The HTML tables: the retention rows say "undefined" with the reason; no number stands for it.
  EXPECT_NE(html.find("<td colspan=\"2\" class=\"l\">undefined: structure_removed leaves the NLL unchanged"), std::string::npos);
  EXPECT_NE(html.find("undefined: in every checkpoint, structure_removed leaves the NLL unchanged"), std::string::npos);
  EXPECT_EQ(html.find(">nan"), std::string::npos);  // no NaN printed where a number was undefined
  EXPECT_EQ(html.find("nan%"), std::string::npos);
  EXPECT_NE(md.find("Retention of static_profile: undefined: structure_removed leaves the NLL unchanged"), std::string::npos);
  EXPECT_NE(md.find("Variance shares undefined: the coefficients are constant"), std::string::npos);
  // Every checkpoint under its own label, never two under one.
  for (const char* label : {"uniform-s1: uniform L 2", "uniform-s2: uniform L 2", "dense-s1: dense L 2", "fixed-s1: fixed L 2"})
    EXPECT_NE(html.find(label), std::string::npos) << label;
  for (const std::string id : {"fig-penalties", "fig-retention", "fig-variance"})
    EXPECT_NE(html.find("id=\"" + id + "\""), std::string::npos) << id;
}

// The shape is checked both ways: null needs its reason, and a malformed interval is still an error.
TEST_F(DegenerateReport, UndefinedNeedsItsReasonAndMalformedIntervalsStayErrors) {
  auto refused = [&](const std::string& name, auto mutate, const std::string& part) {
    nlohmann::json j = audit("uniform-s1");
    mutate(j);
    std::ofstream(dir->file(name)) << j.dump();
    ReportInputs in;
    in.audits = {dir->file(name)};
    try {
      load_report_data(in);
      ADD_FAILURE() << name << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  refused("no-reason.json", [](nlohmann::json& j) { j["retention"]["static_profile"].erase("note"); },
          "'/retention/static_profile/ci95' is null (an undefined statistic) but '/retention/static_profile/note' does not say why");
  refused("number-without-interval.json", [](nlohmann::json& j) { j["retention"]["static_profile"]["estimate"] = 0.5; },
          "'/retention/static_profile/estimate' is a number but its interval");
  refused("one-element.json", [](nlohmann::json& j) { j["retention"]["static_profile"]["ci95"] = {0.5}; }, "must be an interval");
  refused("strings.json", [](nlohmann::json& j) { j["conditions"][1]["ci95"] = {"0", "1"}; }, "must be an interval");
  refused("reversed.json", [](nlohmann::json& j) { j["conditions"][1]["ci95"] = {1.0, 0.0}; }, "lower bound above its upper bound");
  refused("share-without-reason.json", [](nlohmann::json& j) { j["variance"].erase("note"); }, "'/variance/note' does not say why");
  refused("share-string.json", [](nlohmann::json& j) { j["variance"]["shares"]["input"] = "none"; }, "must be a number, or null");
  EXPECT_TRUE(ratio_or_null(1.0, 0.0).is_null());
  EXPECT_TRUE(ratio_or_null(std::nan(""), 1.0).is_null());
  EXPECT_EQ(ratio_or_null(1.0, 4.0).get<double>(), 0.25);
}

TEST(ReportLabels, CheckpointsAreLabelledByTheShortestDistinctPath) {
  EXPECT_EQ(path_labels({"build/demo/featuregate-s1.safetensors", "build/demo/featuregate-s2.safetensors", "build/demo/mudd-s1"}),
            (std::vector<std::string>{"featuregate-s1", "featuregate-s2", "mudd-s1"}));
  EXPECT_EQ(path_labels({"runs/a/model.safetensors", "runs/b/model.safetensors", "runs/a/model.safetensors"}),
            (std::vector<std::string>{"a/model", "b/model", "a/model"}));
  EXPECT_EQ(path_labels({"x/mudd/", "./y.safetensors"}), (std::vector<std::string>{"mudd", "y"}));
}

}  // namespace
}  // namespace fca
