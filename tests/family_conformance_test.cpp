// The conformance suite: what every installed family must satisfy, one parameterised test per
// check, instantiated over model_families() (the test binary's toy family included), so that a
// new family is covered without a line here, in the spirit of llama.cpp's test-backend-ops:
// - recording equals the plain live pass bit for bit (exact replay compares the replay with the
//   recording pass, audit/recorded_live.h), for every choice-valued setting and batches of 1 and 3;
// - replaying the record reproduces both bit for bit, with 0 controller evaluations;
// - the probe is sensitive: the audit's probe perturbation of any one probe group changes the
//   replay's logits (a replay that ignores its coefficients would pass exact replay);
// - exec's counted pass of every mode equals the family's FLOP formulas (exec/counted_pass.h);
// - a checkpoint saved, loaded into another model and saved again is the same checkpoint;
// - a bad shape and a damaged checkpoint are refused with an Error naming them;
// - the audit's row of the family's record kind builds every condition that applies, and refuses
//   the ones it skips; the default list is as committed in tests/data/family_conditions.json;
// - trace names are stable: the same in every pass and batch, and as committed in
//   tests/data/family_trace_names.json;
// - the backward pass matches central finite differences of the family's objective in double
//   (its TrainFamily::gradient_probe, train/gradient_probe.h), for every configuration;
// - train, audit, exec and the report run end to end on a tiny checkpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "audit/audit.h"
#include "audit/audit_kind.h"
#include "audit/phases.h"
#include "audit/replay_probe.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "data/corpus.h"
#include "exec/exec.h"
#include "exec/exec_family.h"
#include "families/families.h"
#include "models/capabilities.h"
#include "models/record_kind.h"
#include "models/registry.h"
#include "report/report.h"
#include "test_util.h"
#include "toy_family/skip_family.h"
#include "toy_family/toy_family.h"
#include "train/train_family.h"
#include "train/trainer.h"

namespace fca {
namespace {

// The names of the installed families. gtest builds the parameter list before the test
// environment's SetUp, so it installs them itself (both calls are idempotent, in the order
// families_environment.cpp uses).
std::vector<std::string> installed_family_names() {
  install_families();
  toy::install_toy_family();
  toy::install_skip_family();
  std::vector<std::string> names;
  for (const auto& f : model_families()) names.push_back(f.name);
  return names;
}

// A shape every family takes: L 2, D 16, H 2, T 16.
constexpr ModelShape kShape{2, 16, 2, 16};

struct Pass {
  std::vector<float> logits;  // [B, T, vocab]
  std::vector<double> nll;    // [B]
};

Pass take(const AuditableModel& m, int B, int T, std::vector<double> nll) {
  return {std::vector<float>(m.last_logits(), m.last_logits() + size_t(B) * T * size_t(m.vocab())), std::move(nll)};
}

// Bitwise equality (a NaN or -0 against +0 differs), and every value finite.
void expect_same_bits(const Pass& a, const Pass& b, const std::string& what) {
  ASSERT_EQ(a.logits.size(), b.logits.size()) << what;
  EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)), 0) << what << ": logits";
  EXPECT_EQ(std::memcmp(a.nll.data(), b.nll.data(), a.nll.size() * sizeof(double)), 0) << what << ": NLL";
  for (double v : a.nll) EXPECT_TRUE(std::isfinite(v)) << what;
}

// Windows [B, T] of random bytes below the model's vocabulary.
std::vector<int32_t> random_tokens(const AuditableModel& m, int B, int T, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> x(size_t(B) * T);
  for (auto& v : x) v = int32_t(rng.below(uint64_t(std::min(m.vocab(), 256))));
  return x;
}

class FamilyConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { set_threads(2); }
  const TrainFamily& family() const { return train_family_named(GetParam()); }
  nlohmann::json defaults() const { return resolve_settings(family(), nlohmann::json::object(), "test"); }
  // The family's defaults, and each further value of its choice-valued settings.
  std::vector<nlohmann::json> configurations() const { return family_configurations(family()); }
  // A freshly initialised checkpoint of the family, saved under `stem`.
  std::string fresh_checkpoint(const nlohmann::json& settings, uint64_t seed, const std::string& stem) {
    const std::string path = checkpoint_path(family(), dir.file(GetParam() + "-" + stem));
    family().make(kShape, settings, TrainableArgs{seed, 2, {}, 1.0}, "test")->save(path, {});
    return path;
  }
  testing::TempDir dir;
};

TEST_P(FamilyConformance, RecordingEqualsLiveAndReplayReproducesItWithoutTheController) {
  const int T = kShape.seq;
  int n = 0;
  for (const auto& settings : configurations()) {
    SCOPED_TRACE(settings.dump());
    const std::string path = fresh_checkpoint(settings, 7, std::to_string(n++));
    for (int B : {1, 3}) {
      const auto model = open_model(path, B, T);
      const auto x = random_tokens(*model, B, T, uint64_t(11 + B)), y = random_tokens(*model, B, T, uint64_t(13 + B));
      std::vector<double> nll(static_cast<size_t>(B));
      CoefficientTensor recorded = model->make_coefficients(B, T);
      model->poison_logits(B, T);
      model->run_live(x.data(), y.data(), B, T, &recorded, 0, nll.data());
      const Pass recording = take(*model, B, T, nll);
      model->poison_logits(B, T);
      model->run_live(x.data(), y.data(), B, T, nullptr, 0, nll.data());
      const Pass plain = take(*model, B, T, nll);
      expect_same_bits(recording, plain, "recording pass against the plain live pass, B " + std::to_string(B));
      const int64_t before = model->replay_controller_evaluations();
      model->poison_logits(B, T);
      model->run_replay(x.data(), y.data(), B, T, recorded, nll.data());
      expect_same_bits(take(*model, B, T, nll), plain, "replay against the plain live pass, B " + std::to_string(B));
      EXPECT_EQ(model->replay_controller_evaluations(), before);
    }
  }
}

TEST_P(FamilyConformance, TheProbeIsSensitive) {
  const int B = 2, T = kShape.seq;
  const auto model = open_model(fresh_checkpoint(defaults(), 7, "probe"), B, T);
  const auto x = random_tokens(*model, B, T, 21), y = random_tokens(*model, B, T, 22);
  std::vector<double> nll(static_cast<size_t>(B));
  CoefficientTensor recorded = model->make_coefficients(B, T);
  model->run_live(x.data(), y.data(), B, T, &recorded, 0, nll.data());
  const Pass replayed = take(*model, B, T, nll);
  const std::vector<ProbeGroup> groups = probe_groups(recorded.view());
  ASSERT_FALSE(groups.empty());
  for (const ProbeGroup& group : groups) {
    CoefficientTensor perturbed = recorded;
    perturb_for_probe(perturbed, group);
    model->run_replay(x.data(), y.data(), B, T, perturbed, nll.data());
    const Pass probe = take(*model, B, T, nll);
    EXPECT_NE(std::memcmp(probe.logits.data(), replayed.logits.data(), probe.logits.size() * sizeof(float)), 0)
        << "the probe's perturbation of " << group.name << " left every logit unchanged";
  }
  EXPECT_EQ(model->replay_controller_evaluations(), 0);
}

TEST_P(FamilyConformance, SaveLoadRoundTripIsTheSameCheckpoint) {
  const std::string saved = fresh_checkpoint(defaults(), 7, "saved");
  const std::string other = fresh_checkpoint(defaults(), 8, "other");
  auto trainable = family().make(kShape, defaults(), TrainableArgs{8, 2, {}, 1.0}, "test");
  trainable->load(saved);
  const std::string again = checkpoint_path(family(), dir.file(GetParam() + "-again"));
  trainable->save(again, {});
  EXPECT_EQ(open_model(again, 1, kShape.seq)->content_hash(), open_model(saved, 1, kShape.seq)->content_hash());
  EXPECT_NE(open_model(other, 1, kShape.seq)->content_hash(), open_model(saved, 1, kShape.seq)->content_hash())
      << "two seeds gave one checkpoint: the round trip compares nothing";
}

TEST_P(FamilyConformance, ABadShapeAndADamagedCheckpointAreRefused) {
  for (const ModelShape bad : {ModelShape{0, 16, 2, 16}, ModelShape{2, 0, 2, 16}, ModelShape{2, 16, 2, 0}, ModelShape{2, 16, 3, 16}}) {
    try {
      family().check(bad, defaults(), "flags");
      ADD_FAILURE() << "shape L " << bad.layers << " D " << bad.dim << " H " << bad.heads << " T " << bad.seq << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("flags"), std::string::npos) << e.what();
    }
  }
  try {
    nlohmann::json unknown = nlohmann::json::object();
    unknown["no_such_setting"] = 1;
    resolve_settings(family(), unknown, "test");
    ADD_FAILURE() << "an unknown setting was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_setting"), std::string::npos) << e.what();
  }
  // The audit interface refuses a record of another shape before a pass copies rows of it.
  const auto opened = open_model(fresh_checkpoint(defaults(), 7, "shape"), 1, kShape.seq);
  CoefficientTensor wrong(1, CoefficientShape{kShape.layers + 5, kShape.seq, 3, 3});
  std::vector<int32_t> tokens(size_t(kShape.seq), 1);
  std::vector<double> nll(1);
  EXPECT_THROW(opened->run_replay(tokens.data(), tokens.data(), 1, kShape.seq, wrong, nll.data()), Error);
  EXPECT_THROW(opened->run_live(tokens.data(), tokens.data(), 1, kShape.seq, &wrong, 0, nll.data()), Error);
  // And one of the right shape whose mask of valid coordinates differs (a packed family takes its
  // row widths from the mask).
  CoefficientTensor masked = opened->make_coefficients(1, kShape.seq);
  masked.set_valid(0, 0, 0, !masked.view().valid(0, 0, 0));
  try {
    opened->run_replay(tokens.data(), tokens.data(), 1, kShape.seq, masked, nll.data());
    ADD_FAILURE() << "a record with another mask was replayed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mask"), std::string::npos) << e.what();
  }
  const std::string path = fresh_checkpoint(defaults(), 7, "damaged");
  const std::string weights = family().files(path).weights;
  std::filesystem::resize_file(weights, std::filesystem::file_size(weights) / 2);
  try {
    open_model(path, 1, kShape.seq);
    ADD_FAILURE() << "a truncated checkpoint was opened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::filesystem::path(weights).filename().string()), std::string::npos) << e.what();
  }
}

TEST_P(FamilyConformance, TraceNamesAreStable) {
  const int T = kShape.seq;
  const std::string path = fresh_checkpoint(defaults(), 7, "trace");
  std::vector<std::string> first;
  for (int B : {1, 2}) {
    const auto model = open_model(path, B, T);
    Traceable* traceable = capability<Traceable>(*model);
    ASSERT_NE(traceable, nullptr) << "every family's auditable is Traceable (models/family_auditable.h)";
    traceable->set_keep_intermediates(true);
    model->set_max_batch(B);
    const auto x = random_tokens(*model, B, T, 31), y = random_tokens(*model, B, T, 32);
    std::vector<double> nll(static_cast<size_t>(B));
    CoefficientTensor recorded = model->make_coefficients(B, T);
    for (bool live : {true, true, false}) {
      if (live) model->run_live(x.data(), y.data(), B, T, &recorded, 0, nll.data());
      else model->run_replay(x.data(), y.data(), B, T, recorded, nll.data());
      std::vector<std::string> names;
      for (const TraceTensor& t : traceable->trace_tensors(B, T, live)) {
        names.push_back(t.name);
        ASSERT_GE(t.shape.size(), 2u) << t.name;
        EXPECT_EQ(t.shape[0], B) << t.name;
        EXPECT_EQ(t.shape[1], T) << t.name;
        EXPECT_NE(t.data, nullptr) << t.name;
      }
      EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size()) << "a trace name is used twice";
      if (live && first.empty()) first = names;
      if (live) {
        EXPECT_EQ(names, first) << "B " << B;
      } else {  // a replay shows the live pass's names less the controller's inputs it does not compute
        for (const auto& name : names)
          EXPECT_NE(std::find(first.begin(), first.end(), name), first.end()) << "replay's " << name << " is not a live name";
      }
    }
  }
  const nlohmann::json committed = nlohmann::json::parse(std::ifstream(std::string(FCA_SOURCE_DIR) + "/tests/data/family_trace_names.json"));
  ASSERT_TRUE(committed.contains(GetParam())) << "tests/data/family_trace_names.json has no entry for " << GetParam()
                                              << "; its live trace names at L 2 are " << nlohmann::json(first).dump();
  EXPECT_EQ(committed[GetParam()].get<std::vector<std::string>>(), first);
}

// The audit's row of the family's record kind (audit/audit_kind.h) prepares profiles from recorded
// calibration records and builds every condition of its table that applies: each says what the row
// says of its randomisation, and writes records of the row's kind that can be executed (the
// models row's check) and replayed with 0 controller evaluations. A condition the row skips for
// the model is refused when asked for by name, naming --conditions and why.
TEST_P(FamilyConformance, TheKindTableBuildsEveryConditionThatApplies) {
  const int T = kShape.seq, W = 4;
  const auto model = open_model(fresh_checkpoint(defaults(), 9, "kinds"), W, T);
  auto record = [&](uint64_t seed) {
    const auto x = random_tokens(*model, W, T, seed), y = random_tokens(*model, W, T, seed + 1);
    std::vector<double> nll(static_cast<size_t>(W));
    CoefficientTensor r = model->make_coefficients(W, T);
    model->run_live(x.data(), y.data(), W, T, &r, 0, nll.data());
    return r;
  };
  const CoefficientTensor calibration = record(21), evaluation = record(23);
  const AuditKindRow& kind = audit_kind_row(evaluation.shape().kind);
  ASSERT_EQ(kind.kind, evaluation.shape().kind);
  const auto skipped = kind.skipped(*model, model->make_coefficients(1, T).view());
  std::vector<std::string> names = kind.condition_names;
  for (const auto& s : skipped) names.erase(std::remove(names.begin(), names.end(), s.name), names.end());
  if (kind.model_conditions != nullptr)
    for (const auto& n : kind.model_conditions(*model)) names.push_back(n);
  const std::unique_ptr<KindConditions> profiles = kind.prepare(*model, calibration.view());
  EXPECT_TRUE(profiles->profiles_json().contains("static_profile"));
  const AuditRandomness randomness(5, W, T, 2);
  const auto x = random_tokens(*model, W, T, 31), y = random_tokens(*model, W, T, 32);
  for (const auto& name : names) {
    const auto c = profiles->make(name, evaluation.view(), randomness);
    EXPECT_EQ(c->name(), name);
    EXPECT_EQ(c->randomized(), kind.is_randomized(name)) << name;
    CoefficientTensor out = model->make_coefficients(W, T);
    for (int r = 0; r < (c->randomized() ? 2 : 1); ++r) {
      for (int w = 0; w < W; ++w) c->coefficients(w, r, out, w);
      if (record_kind_row(kind.kind).check != nullptr) {
        EXPECT_NO_THROW(record_kind_row(kind.kind).check(out.view(), name)) << name;
      }
      std::vector<double> nll(static_cast<size_t>(W));
      const int64_t before = model->replay_controller_evaluations();
      model->run_replay(x.data(), y.data(), W, T, out, nll.data());
      EXPECT_EQ(model->replay_controller_evaluations(), before) << name;
      for (double v : nll) EXPECT_TRUE(std::isfinite(v)) << name;
    }
  }
  EXPECT_THROW(profiles->make("no_such_condition", evaluation.view(), randomness), Error);
  testing::write_corpus(dir.path(), 30000, 6000, 6000);
  const Corpus corpus(dir.path());
  // A plan of 4 + 4 windows: the conditions are selected, nothing runs.
  auto plan = [&](std::vector<std::string> conditions) {
    AuditOptions a;
    a.eval_windows = 4;
    a.calib_windows = 4;
    a.batch = 2;
    a.plan_only = true;
    a.progress = false;
    a.conditions = std::move(conditions);
    return prepare_audit(*model, corpus, a, single_process());
  };
  // The default list, as the audit selects it, against tests/data/family_conditions.json (the lists
  // and reasons audit.json held before the table, issue 44).
  {
    const AuditSetup setup = plan({});
    nlohmann::json selected = {{"conditions", setup.conditions}, {"skipped", setup.skipped},
                               {"skipped_reasons", nlohmann::json::parse(setup.skipped_reasons.dump())}};
    const nlohmann::json committed =
        nlohmann::json::parse(std::ifstream(std::string(FCA_SOURCE_DIR) + "/tests/data/family_conditions.json"));
    ASSERT_TRUE(committed.contains(GetParam())) << "tests/data/family_conditions.json has no entry for " << GetParam()
                                                << "; the audit selects " << selected.dump();
    EXPECT_EQ(committed[GetParam()], selected);
  }
  for (const auto& s : skipped) {
    try {
      plan({s.name});
      ADD_FAILURE() << "--conditions " << s.name << " was not refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--conditions " + s.name + ": " + s.reason), std::string::npos) << e.what();
    }
  }
}

// Train a few steps, audit, exec (every mode's counters checked against the family's formulas),
// and the report over the three documents.
TEST_P(FamilyConformance, TrainAuditExecAndReportRunEndToEnd) {
  testing::write_corpus(dir.path(), 30000, 6000, 6000);
  const Corpus corpus(dir.path());
  TrainOptions t;
  t.arch = GetParam();
  t.shape = kShape;
  t.settings = defaults();
  t.batch = 4;
  t.steps = 3;
  t.warmup = 1;
  t.eval_every = 0;
  t.eval_windows = 4;
  t.seed = 5;
  t.progress = false;
  t.out = checkpoint_path(family(), dir.file(GetParam() + "-trained"));
  const TrainResult trained = train_model(t, corpus);
  EXPECT_EQ(trained.steps_done, 3);
  EXPECT_TRUE(std::isfinite(trained.final_valid_nll));

  AuditOptions a;
  a.model_path = t.out;
  a.eval_windows = 16;
  a.calib_windows = 16;
  a.reps = 2;
  a.batch = 4;
  a.bootstrap_resamples = 200;
  a.seed = 3;
  a.out_dir = dir.file("audit");
  a.progress = false;
  const auto model = open_model(t.out, a.batch, kShape.seq);
  const nlohmann::ordered_json audit = run_audit(*model, corpus, a);
  EXPECT_TRUE(audit["exact_replay"]["passed"].get<bool>());
  EXPECT_TRUE(audit["replay_sensitivity"]["passed"].get<bool>());
  EXPECT_EQ(audit["replay_sensitivity"]["controller_evaluations"], 0);
  ASSERT_FALSE(audit["conditions"].empty());
  for (const auto& c : audit["conditions"]) EXPECT_EQ(c["controller_evaluations"], 0) << c["name"];

  ExecOptions e;
  e.models = {t.out};
  e.batch = 2;
  e.runs = 1;
  e.max_runs = 1;
  e.warmup = 0;
  e.time_budget_s = 0;
  e.calib_windows = 4;
  e.eval_windows = 4;
  e.out_dir = dir.file("exec");
  e.progress = false;
  const nlohmann::ordered_json exec = run_exec(corpus, e);
  ASSERT_EQ(exec["models"].size(), 1u);
  EXPECT_EQ(exec["models"][0]["family"], GetParam());
  EXPECT_EQ(exec["models"][0]["label"], family_named(GetParam()).label(nlohmann::json::parse(model->config_json())));
  ASSERT_FALSE(exec["models"][0]["modes"].empty());
  for (const auto& mode : exec["models"][0]["modes"]) EXPECT_TRUE(mode["counters_match_graph"].get<bool>()) << mode["mode"];

  ReportInputs r;
  r.audits = {a.out_dir + "/audit.json"};
  r.execs = {e.out_dir + "/exec.json"};
  r.train_logs = {family().files(t.out).log};
  const std::string html = report_html(load_report_data(r));
  EXPECT_NE(html.find("<h2 id=\"execution\">"), std::string::npos) << "the report has no execution section";
  // exec names the model by its family's label (exec.md's latency table: "<label> L<layers> D<dim>").
  const std::string label = family_named(GetParam()).label(nlohmann::json::parse(model->config_json()));
  EXPECT_NE(exec_markdown(exec).find(label + " L" + std::to_string(kShape.layers) + " D"), std::string::npos)
      << "exec.md does not name the model " << label;
}

// Every family's backward pass, on a model of every configuration away from its initialisation,
// against central finite differences of the objective it differentiates, in double (step 1e-5,
// tolerance 1e-7 + 1e-5 |g|: test_util.h's check, on up to 12 elements of every tensor). The family
// supplies the objective (TrainFamily::gradient_probe); a family without one fails here.
TEST_P(FamilyConformance, GradientsMatchFiniteDifferences) {
  ASSERT_TRUE(family().gradient_probe) << GetParam() << " supplies no gradient probe (TrainFamily::gradient_probe)";
  set_threads(1);  // thousands of tiny passes: threading overhead would dominate
  for (const auto& settings : configurations()) {
    SCOPED_TRACE(settings.dump());
    GradientProbe probe = family().gradient_probe(kShape, settings, 7);
    probe.backward();
    testing::expect_gradients_match_finite_differences(probe.layout, probe.parameter, probe.gradient, probe.objective, 5,
                                                       probe.unread);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryFamily, FamilyConformance, ::testing::ValuesIn(installed_family_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace fca
