// The audit refuses what it cannot trust, and resumes exactly: exact replay compares logits the
// compared pass wrote, refuses a replay that ignores its coefficients, is off by one ulp, yields NaN
// or reaches the controller; a stopped audit resumes to the same results; caches are reused only
// when they match (or replay exactly, from another build).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "audit/aggregate.h"
#include "audit/cache.h"
#include "audit/audit.h"
#include "report/audit_markdown.h"
#include "audit/conditions.h"
#include "audit/exact_replay.h"
#include "core/rng.h"
#include "core/undefined_statistic.h"
#include "core/safetensors.h"
#include "core/threads.h"
#include "models/gated/auditable.h"
#include "models/mudd/auditable.h"
#include "report/report.h"
#include "test_util.h"
#include "train/trainer.h"
#include "audit_fixture.h"

namespace fca {
namespace {

// Forwards to a model and counts the windows it runs, to see what a resumed audit recomputes.
class CountingModel : public AuditableModel {
 public:
  explicit CountingModel(AuditableModel& inner) : m_(inner) {}
  int64_t live_windows = 0, replay_windows = 0;
  // The broken adapter of the issue: replay runs the model's own controller (uncounted) instead of
  // using the coefficients it is handed. Exact replay cannot see it; the sensitivity probe must.
  bool ignore_replayed_coefficients = false;
  // A replay that writes no logits: it hands back the NLLs of the last live run and leaves the
  // logits buffer as it was. Without poisoning, exact replay would compare the live logits with
  // themselves and pass.
  bool replay_writes_no_logits = false;
  // A recording pass that writes no logits: the buffer keeps what it held before the pass. Unless
  // the cache phase poisons it first, exact replay would compare a replay with a stale buffer, which
  // for the first batch holds the plan probe's replay of the same windows.
  bool recording_writes_no_logits = false;
  // Uses the handed coefficients in layer 0 only; every other layer gets what the model's own
  // controller computes (a hidden live pass). A probe that perturbs every layer at once passes it.
  bool only_layer_0_replayed = false;
  // Uses the handed coefficients for stream 0 only, in every layer; the other streams get the
  // model's own controller's. A probe that perturbs a whole layer at once passes it.
  bool only_stream_0_replayed = false;
  std::string family() const override { return m_.family(); }
  std::string description() const override { return m_.description(); }
  std::string content_hash() const override { return m_.content_hash(); }
  std::string config_json() const override { return m_.config_json(); }
  size_t parameter_count() const override { return m_.parameter_count(); }
  int max_tokens() const override { return m_.max_tokens(); }
  int vocab() const override { return m_.vocab(); }
  std::vector<int32_t> tokenize(const std::string& split, std::span<const unsigned char> text) const override {
    return m_.tokenize(split, text);
  }
  CoefficientTensor make_coefficients(int windows, int tokens) const override { return m_.make_coefficients(windows, tokens); }
  void run_live(const int32_t* x, const int32_t* y, int B, int T, CoefficientTensor* record, int first, double* nll) override {
    live_windows += B;
    stale_logits_.clear();
    if (recording_writes_no_logits && record != nullptr)
      stale_logits_.assign(m_.last_logits(), m_.last_logits() + size_t(B) * T * size_t(m_.vocab()));
    m_.run_live(x, y, B, T, record, first, nll);
    last_live_nll_.assign(nll, nll + B);
  }
  void run_replay(const int32_t* x, const int32_t* y, int B, int T, const CoefficientTensor& c, double* nll) override {
    stale_logits_.clear();
    replay_windows += B;
    if (replay_writes_no_logits) std::copy(last_live_nll_.begin(), last_live_nll_.end(), nll);
    else if (ignore_replayed_coefficients) m_.run_live(x, y, B, T, nullptr, 0, nll);
    else if (only_layer_0_replayed || only_stream_0_replayed) m_.run_replay(x, y, B, T, own_controller_except_honoured(x, y, B, T, c), nll);
    else m_.run_replay(x, y, B, T, c, nll);
  }
  size_t run_state_bytes() const override { return m_.run_state_bytes(); }
  bool batch_invariant() const override { return m_.batch_invariant(); }
  void set_max_batch(int b) override { m_.set_max_batch(b); }
  int max_batch() const override { return m_.max_batch(); }
  const float* last_logits() const override { return stale_logits_.empty() ? m_.last_logits() : stale_logits_.data(); }
  void poison_logits(int B, int T) override { m_.poison_logits(B, T); }
  int64_t replay_controller_evaluations() const override { return m_.replay_controller_evaluations(); }
  void set_prefix_reuse(bool on) override { m_.set_prefix_reuse(on); }
  int64_t prefix_reuses() const override { return m_.prefix_reuses(); }
  void identity_profile(CoefficientTensor& out) const override { m_.identity_profile(out); }
  void structure_removed_profile(const CoefficientTensor& s, CoefficientTensor& out) const override {
    m_.structure_removed_profile(s, out);
  }
  std::string static_profile_name() const override { return m_.static_profile_name(); }
  std::string structure_removed_name() const override { return m_.structure_removed_name(); }

 private:
  // The model's own controller's coefficients, with the handed ones where this broken replay honours
  // them (layer 0, or stream 0 of every layer).
  CoefficientTensor own_controller_except_honoured(const int32_t* x, const int32_t* y, int B, int T, const CoefficientTensor& c) {
    CoefficientTensor own = m_.make_coefficients(B, T);
    std::vector<double> scratch(static_cast<size_t>(B));
    m_.run_live(x, y, B, T, &own, 0, scratch.data());
    const CoefficientShape& s = c.shape();
    for (int w = 0; w < B; ++w)
      for (int l = 0; l < s.layers; ++l)
        for (int t = 0; t < T; ++t)
          for (int st = 0; st < s.streams; ++st)
            if (only_layer_0_replayed ? l == 0 : st == 0)
              for (int k = 0; k < s.sources; ++k) own.at(w, l, t, st, k) = c.at(w, l, t, st, k);
    return own;
  }
  AuditableModel& m_;
  std::vector<double> last_live_nll_;
  std::vector<float> stale_logits_;  // what last_logits() shows after a recording pass that wrote none
};

// Exact replay compares logits that the compared pass wrote: the buffer is NaN before each pass, so
// a replay that writes no logits (but hands back the right NLLs) fails instead of comparing the live
// logits with themselves.
TEST_F(AuditEndToEnd, AReplayThatWritesNoLogitsFailsExactReplay) {
  const std::string m = model_of(GateKind::featuregate, 20);
  GatedAuditable inner(m, 8, 1 << 20);
  CountingModel broken(inner);
  broken.replay_writes_no_logits = true;
  try {
    run_audit(broken, Corpus(dir.path()), options(m, "no_logits"));
    ADD_FAILURE() << "an audit whose replay writes no logits was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exact replay failed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(" logits differ in bits"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("(0 logits differ"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(file_exists(dir.file("no_logits/audit.json")));
  // The same through the live pass exact replay runs itself (a reused cache): without the poison
  // before the replay, it would compare that pass's logits with themselves.
  audit(m, "good");
  AuditOptions o = options(m, "no_logits_reused");
  o.cache_path = dir.file("good/cache.safetensors");
  try {
    run_audit(broken, Corpus(dir.path()), o);
    ADD_FAILURE() << "an audit whose replay writes no logits was accepted with a reused cache";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(" logits differ in bits"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("(0 logits differ"), std::string::npos) << e.what();
  }
}

// A recording pass that writes no logits leaves exact replay nothing of its own to compare with:
// every logit of every batch differs (NaN against the replay's), the first batch included, whose
// stale buffer would otherwise hold the plan probe's replay of the same windows.
TEST_F(AuditEndToEnd, ARecordingPassThatWritesNoLogitsFailsExactReplay) {
  const std::string m = model_of(GateKind::featuregate, 20);
  GatedAuditable inner(m, 8, 1 << 20);
  CountingModel broken(inner);
  broken.recording_writes_no_logits = true;
  try {
    run_audit(broken, Corpus(dir.path()), options(m, "no_recorded_logits"));
    ADD_FAILURE() << "an audit whose recording pass writes no logits was accepted";
  } catch (const Error& e) {
    const std::string all = std::to_string(24 * 16 * inner.vocab());  // 24 windows x T 16 x vocab
    EXPECT_NE(std::string(e.what()).find("(" + all + " logits differ in bits"), std::string::npos) << e.what();
  }
}

// A replay that uses the handed coefficients in one layer and its own controller in the others:
// perturbing every layer at once changes the logits (through layer 0), so only a probe per layer
// finds the others.
TEST_F(AuditEndToEnd, AReplayThatUsesItsCoefficientsInOneLayerOnlyIsRefused) {
  const std::string m = model_of(GateKind::featuregate, 20);
  GatedAuditable inner(m, 8, 1 << 20);
  CountingModel broken(inner);
  broken.only_layer_0_replayed = true;
  try {
    run_audit(broken, Corpus(dir.path()), options(m, "one_layer"));
    ADD_FAILURE() << "an audit whose replay uses its coefficients in layer 0 only was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("replay sensitivity probe failed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("for 2 of 4 probe groups (layer 1 tokens A, layer 1 tokens B)"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(file_exists(dir.file("one_layer/audit.json")));
}

// The same within a layer: a MUDD replay that honours the handed coefficients of stream 0 only (its
// own controller's for the other streams) is exact, and a probe that perturbed whole layers would
// pass it; the probe's groups per (layer, stream) find the others.
TEST_F(AuditEndToEnd, AReplayThatUsesItsCoefficientsForOneStreamOnlyIsRefused) {
  const TrainOptions t = testing::tiny_mudd_training(dir.file("mudd-one-stream"), 2);
  train_model(t, Corpus(dir.path()));
  MuddAuditable inner(t.out, 8, 1 << 20);
  CountingModel broken(inner);
  broken.only_stream_0_replayed = true;
  try {
    run_audit(broken, Corpus(dir.path()), options(t.out, "one_stream"));
    ADD_FAILURE() << "an audit whose replay uses its coefficients for stream 0 only was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("replay sensitivity probe failed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layer 0 stream 1 tokens A"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("stream 0 tokens"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(file_exists(dir.file("one_stream/audit.json")));
}

// A replay that ignores the coefficients it is handed passes exact replay and reports 0 controller
// evaluations, so without the sensitivity probe every penalty would be exactly 0 and the verdict
// "no functional dependence". The probe refuses it; with --allow-insensitive-replay the audit runs
// and says so, and the report does not read its zeros as a finding.
TEST_F(AuditEndToEnd, AReplayThatIgnoresItsCoefficientsIsRefused) {
  const std::string m = model_of(GateKind::featuregate, 20);
  GatedAuditable inner(m, 8, 1 << 20);
  CountingModel broken(inner);
  broken.ignore_replayed_coefficients = true;
  AuditOptions o = options(m, "ignoring");
  try {
    run_audit(broken, Corpus(dir.path()), o);
    ADD_FAILURE() << "an audit whose replay ignores its coefficients was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("replay sensitivity probe failed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ignores the handed coefficients"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(file_exists(dir.file("ignoring/audit.json")));
  o.allow_insensitive_replay = true;
  const auto j = run_audit(broken, Corpus(dir.path()), o);
  EXPECT_FALSE(j["replay_sensitivity"]["passed"].get<bool>());
  EXPECT_EQ(j["replay_sensitivity"]["differing_logits"], 0);
  EXPECT_NE(j["replay_sensitivity"]["warning"].get<std::string>().find("0 by construction"), std::string::npos);
  for (const auto& c : j["conditions"]) EXPECT_EQ(c["delta_nll"].get<double>(), 0.0) << c["name"];
  ReportInputs in;
  in.audits = {dir.file("ignoring/audit.json")};
  const ReportData data = load_report_data(in);
  const auto verdicts = compute_verdicts(data);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].dependence.rfind("Not assessed: the replay did not depend on the coefficients it was handed", 0), 0u)
      << verdicts[0].dependence;
  EXPECT_NE(report_html(data).find("class=\"warn\""), std::string::npos);
  // The native model's own replay does depend on them.
  const auto good = audit(m, "good");
  EXPECT_TRUE(good["replay_sensitivity"]["passed"].get<bool>());
  EXPECT_GT(good["replay_sensitivity"]["differing_logits"].get<int64_t>(), 0);
  ASSERT_EQ(good["replay_sensitivity"]["groups"].size(), 4u) << "two probe groups (token subsets) per layer";
  for (const auto& g : good["replay_sensitivity"]["groups"]) EXPECT_GT(g["differing_logits"].get<int64_t>(), 0) << g["group"];
  EXPECT_EQ(good["replay_sensitivity"]["controller_evaluations"], 0);
  // Audited anyway, it does not pool: its zero penalties would count as evidence in an aggregate.
  try {
    aggregate_audits({dir.file("good/audit.json"), dir.file("ignoring/audit.json")}, 100, 1);
    ADD_FAILURE() << "aggregate pooled an audit run with --allow-insensitive-replay";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("ignoring/audit.json") + " was audited with --allow-insensitive-replay"),
              std::string::npos) << e.what();
  }
}

// An audit stopped after one and then after two more window batches (as a kill would leave it:
// the cache and the journal's records on disk), then run to the end, gives bitwise the results of
// an uninterrupted one, and the resumed runs replay only what the journal lacks.
TEST_F(AuditEndToEnd, AStoppedAuditResumesToTheSameResults) {
  const TrainOptions t = testing::tiny_mudd_training(dir.file("mudd"), 3);
  train_model(t, Corpus(dir.path()));
  for (const std::string family : {"gated", "mudd"}) {
    SCOPED_TRACE(family);
    const std::string m = family == "gated" ? model_of(GateKind::featuregate, 30) : t.out;
    auto open = [&](int batch) -> std::unique_ptr<AuditableModel> {
      if (family == "gated") return std::make_unique<GatedAuditable>(m, batch, 1 << 20);
      return std::make_unique<MuddAuditable>(m, batch, 1 << 20);
    };
    const AuditOptions whole = options(m, family + "-whole");
    const auto expected = run_audit(*open(whole.batch), Corpus(dir.path()), whole);
    const int per_window = family == "gated" ? 16 : 13;  // replays per window after exact replay (3 batches of 8)
    const int groups = int(expected["replay_sensitivity"]["groups"].size());  // per (layer, stream): two token subsets
    int64_t replayed = 0, live = 0;
    for (int stop : {1, 1, 0}) {
      AuditOptions o = options(m, family + "-resumed");
      o.stop_after_batches = stop;
      auto inner = open(o.batch);
      CountingModel counting(*inner);
      const auto j = run_audit(counting, Corpus(dir.path()), o);
      replayed += counting.replay_windows;
      live += counting.live_windows;
      if (stop > 0) {
        EXPECT_EQ(j["stopped_after_batches"], 1);
        EXPECT_TRUE(file_exists(dir.file(family + "-resumed/journal.jsonl")));
      } else {
        for (const char* section : {"conditions", "factor_effects", "retention", "criteria", "variance", "baseline", "exact_replay"})
          EXPECT_EQ(expected[section], j[section]) << section;
        EXPECT_EQ(expected["provenance"]["run"]["prefix_reuse"], j["provenance"]["run"]["prefix_reuse"]);
        EXPECT_FALSE(file_exists(dir.file(family + "-resumed/journal.jsonl"))) << "removed once the results are written";
      }
    }
    // 24 windows: exact replay once, then each batch of 8 windows' condition replays once, plus the
    // plan's one-batch probe in each of the three runs (8 windows replayed each) and the replay
    // sensitivity probe's replays of 2 calibration windows in each run (as cached, once per group).
    EXPECT_EQ(replayed, 24 + 24 * per_window + 3 * 8 + 3 * (1 + groups) * 2);
    // Live: the cache pass over 24 + 16 windows, which is also exact replay's live half (the resumed
    // runs read the cache and the journal), the plain live pass of one batch of 8 that checks the
    // recording pass (first run), plus the probe's warm-up window and live batch in each run.
    EXPECT_EQ(live, 24 + 16 + 8 + 3 * (1 + 8));
    EXPECT_EQ(testing::read_bytes(dir.file(family + "-whole/windows.csv")),
              testing::read_bytes(dir.file(family + "-resumed/windows.csv")));
  }
}

// The kept prefix is only used for the windows it was computed from: a replay of other windows
// recomputes it, and a replay of the same windows reuses it with bitwise the same NLL.
TEST_F(AuditEndToEnd, PrefixReuseNeedsTheSameWindows) {
  const std::string m = model_of(GateKind::featuregate, 0);
  GatedAuditable model(m, 4, 1 << 20), fresh(m, 4, 1 << 20);
  const int B = 2, T = 16;
  std::vector<int32_t> x(size_t(B) * T), y(size_t(B) * T), targets(size_t(B) * T, 7);
  for (size_t i = 0; i < x.size(); ++i) x[i] = int32_t(i % 251), y[i] = int32_t((i * 7 + 3) % 256);
  CoefficientTensor g = model.make_coefficients(B, T);
  std::fill(g.values().begin(), g.values().end(), 0.5f);
  double first[2], second[2], expected[2];
  model.set_prefix_reuse(true);
  model.run_replay(x.data(), targets.data(), B, T, g, first);
  model.run_replay(y.data(), targets.data(), B, T, g, second);
  EXPECT_EQ(model.prefix_reuses(), 0) << "other windows must not reuse the kept prefix";
  fresh.run_replay(y.data(), targets.data(), B, T, g, expected);
  EXPECT_EQ(second[0], expected[0]);
  EXPECT_EQ(second[1], expected[1]);
  std::fill(g.values().begin(), g.values().end(), 0.9f);
  model.run_replay(y.data(), targets.data(), B, T, g, second);
  EXPECT_EQ(model.prefix_reuses(), 1);
  fresh.run_replay(y.data(), targets.data(), B, T, g, expected);
  EXPECT_EQ(second[0], expected[0]);
  EXPECT_EQ(second[1], expected[1]);
  // Disabled (live passes, exec, training), nothing is reused.
  model.set_prefix_reuse(false);
  model.run_replay(y.data(), targets.data(), B, T, g, second);
  EXPECT_EQ(model.prefix_reuses(), 1);
}

TEST_F(AuditEndToEnd, CacheIsReusedAndMismatchesAreRefused) {
  const std::string m1 = model_of(GateKind::featuregate, 0, 1), m2 = model_of(GateKind::featuregate, 0, 2);
  const auto first = audit(m1, "a");
  EXPECT_FALSE(first["settings"]["cache_reused"].get<bool>());
  AuditOptions o;
  o.model_path = m2;
  o.eval_windows = 24;
  o.calib_windows = 16;
  o.reps = 3;
  o.bootstrap_resamples = 100;
  o.out_dir = dir.file("b");
  o.cache_path = dir.file("a/cache.safetensors");
  o.progress = false;
  GatedAuditable other(m2, o.batch, 1 << 20);
  try {
    run_audit(other, Corpus(dir.path()), o);
    ADD_FAILURE() << "a cache of another model was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model_sha256"), std::string::npos) << e.what();
  }
  // A truncated cache is refused too.
  const std::string bytes = testing::read_bytes(dir.file("a/cache.safetensors"));
  testing::write_text(dir.file("cut.safetensors"), bytes.substr(0, bytes.size() - 100));
  o.model_path = m1;
  o.cache_path = dir.file("cut.safetensors");
  GatedAuditable same(m1, o.batch, 1 << 20);
  EXPECT_THROW(run_audit(same, Corpus(dir.path()), o), Error);
  // The matching cache is reused. Exact replay compared the first audit's replays with the pass that
  // wrote the cache; with a reused cache it runs the live passes itself.
  const auto& first_live = first["provenance"]["run"]["exact_replay_live_pass"];
  EXPECT_EQ(first_live["recording_pass"], first["exact_replay"]["batches"]);
  EXPECT_EQ(first_live["rerun"], 0);
  EXPECT_EQ(first_live["recording_pass_checked_against_plain_live"], 1) << "one rank, one batch";
  o.cache_path = dir.file("a/cache.safetensors");
  o.batch = 8;  // no batch probe: its live passes are not the audit's
  GatedAuditable again(m1, o.batch, 1 << 20);
  CountingModel counting(again);
  const auto reused = run_audit(counting, Corpus(dir.path()), o);
  EXPECT_TRUE(reused["settings"]["cache_reused"].get<bool>());
  EXPECT_EQ(reused["provenance"]["run"]["exact_replay_live_pass"]["recording_pass"], 0);
  EXPECT_EQ(reused["provenance"]["run"]["exact_replay_live_pass"]["rerun"], reused["exact_replay"]["batches"]);
  EXPECT_EQ(reused["provenance"]["run"]["exact_replay_live_pass"]["recording_pass_checked_against_plain_live"], 0);
  EXPECT_EQ(first["exact_replay"], reused["exact_replay"]) << "the result does not say which live run it compared with";
  EXPECT_EQ(counting.live_windows, 24 + 1 + 8) << "exact replay's live passes, the plan probe's window and batch";
}

// A cache written by another build (its manifest says so) is used only when exact replay
// reproduces its NLLs bit for bit; otherwise the refusal says where the cache came from.
TEST_F(AuditEndToEnd, CacheFromAnotherBuildIsUsedOnlyWhenReplayIsExact) {
  const std::string m = model_of(GateKind::featuregate, 0);
  audit(m, "b");
  auto rewrite = [&](const std::string& out, bool perturb_nll) {
    const SafetensorsReader r(dir.file("b/cache.safetensors"));
    std::map<std::string, std::string> meta = r.metadata();
    nlohmann::json manifest = nlohmann::json::parse(meta.at("manifest"));
    manifest["build"] = "g++ 99.0; x86-64 sse4.2; -O2";
    meta["manifest"] = manifest.dump();
    std::vector<double> nll = r.read_as_double("eval.nll");
    if (perturb_nll) nll[0] = std::nextafter(nll[0], 1e9);  // another build's rounding
    std::vector<TensorToWrite> tensors;
    for (const auto& [name, t] : r.tensors())
      tensors.push_back({name, t.shape, name == "eval.nll" ? static_cast<const void*>(nll.data()) : t.data, t.dtype});
    write_safetensors(dir.file(out), tensors, meta);
  };
  AuditOptions o = options(m, "b-same");
  rewrite("same-bits.safetensors", false);
  o.cache_path = dir.file("same-bits.safetensors");
  GatedAuditable model(m, o.batch, 1 << 20);
  const auto j = run_audit(model, Corpus(dir.path()), o);
  EXPECT_TRUE(j["settings"]["cache_from_other_build"].get<bool>());
  EXPECT_EQ(j["settings"]["cache_build"], "g++ 99.0; x86-64 sse4.2; -O2");
  rewrite("other-bits.safetensors", true);
  o.cache_path = dir.file("other-bits.safetensors");
  o.out_dir = dir.file("b-other");
  try {
    run_audit(model, Corpus(dir.path()), o);
    ADD_FAILURE() << "another build's cache with other NLL bits was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("was written by another build (g++ 99.0"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("b-other/audit.json")));
}

// A model whose replay is off by one ulp somewhere: the audit must stop before any condition.
class InexactReplay : public GatedAuditable {
 public:
  using GatedAuditable::GatedAuditable;
  void run_replay(const int32_t* inputs, const int32_t* targets, int B, int T, const CoefficientTensor& c,
                  double* window_nll) override {
    GatedAuditable::run_replay(inputs, targets, B, T, c, window_nll);
    window_nll[0] = std::nextafter(window_nll[0], 1e9);
  }
};

// A replay whose NLL, or one of whose logits, is NaN: std::max(0, NaN) is 0, so a comparison of
// differences would call it exact; the comparison of bit patterns must not.
class NanNllReplay : public GatedAuditable {
 public:
  using GatedAuditable::GatedAuditable;
  void run_replay(const int32_t* inputs, const int32_t* targets, int B, int T, const CoefficientTensor& c,
                  double* window_nll) override {
    GatedAuditable::run_replay(inputs, targets, B, T, c, window_nll);
    window_nll[0] = std::nan("");
  }
};

// A model whose logits after one kind of pass differ in one element from what the pass computed
// (a copy that last_logits() hands out until the next pass):
// - replay: a NaN after every replay (see NanNllReplay);
// - recording: one ulp after the pass that records the cache, while a live pass without recording
//   and the replay agree. Exact replay must compare the replay with the run the coefficients came
//   from (recorded_live.h), and fail; comparing with a fresh live pass would not.
// - plain_live: one ulp after every live pass without recording, while the recording pass and the
//   replay agree (a recording source that changes the run, so that replay reproduces the recording
//   and not the model). Comparing with the recording pass alone would pass; the plain live pass
//   that checks it must fail the audit.
enum class ChangedPass { replay, recording, plain_live };
template <ChangedPass kPass>
class OneLogitChanged : public GatedAuditable {
 public:
  using GatedAuditable::GatedAuditable;
  void run_live(const int32_t* inputs, const int32_t* targets, int B, int T, CoefficientTensor* record, int first,
                double* window_nll) override {
    GatedAuditable::run_live(inputs, targets, B, T, record, first, window_nll);
    change_logit(record != nullptr ? kPass == ChangedPass::recording : kPass == ChangedPass::plain_live, B, T);
  }
  void run_replay(const int32_t* inputs, const int32_t* targets, int B, int T, const CoefficientTensor& c,
                  double* window_nll) override {
    GatedAuditable::run_replay(inputs, targets, B, T, c, window_nll);
    change_logit(kPass == ChangedPass::replay, B, T);
  }
  const float* last_logits() const override { return changed_ ? logits_.data() : GatedAuditable::last_logits(); }

 private:
  void change_logit(bool change, int B, int T) {
    changed_ = change;
    if (!change) return;
    logits_.assign(GatedAuditable::last_logits(), GatedAuditable::last_logits() + size_t(B) * T * vocab());
    if (kPass == ChangedPass::replay) logits_[5] = std::nanf("");
    else logits_[7] = std::nextafter(logits_[7], 1e9f);
  }
  std::vector<float> logits_;
  bool changed_ = false;
};
using NanLogitReplay = OneLogitChanged<ChangedPass::replay>;
using RecordingPassDiffers = OneLogitChanged<ChangedPass::recording>;
using PlainLivePassDiffers = OneLogitChanged<ChangedPass::plain_live>;

// A replayed source that reaches the controller: it hands back the cached gates, but evaluates the
// gate function on the way (as a source that "just checks" the live value would). The count is
// kept by the controller code in the run state, so the audit must see it and refuse.
class ControllerReachingReplay : public CoefficientSource<float> {
 public:
  ControllerReachingReplay(const GatedModel<float>& model, const CoefficientTensor& c) : controller_(model.config(), model.weights()), replayed_(c) {}
  bool evaluates_controller() const override { return false; }  // what it declares; the count says otherwise
  void coefficients(int layer, const BatchPosition& batch, const float* phi, float* g) override {
    if (controller_.needs_features()) {
      std::vector<float> zeros(size_t(batch.batch) * batch.tokens * 4, 0.0f);
      controller_.evaluate(layer, batch, zeros.data(), g);
    } else {
      controller_.evaluate(layer, batch, phi, g);
    }
    replayed_.coefficients(layer, batch, phi, g);
  }

 private:
  GateController<float> controller_;
  ReplayedCoefficients<float> replayed_;
};

struct LeakyTraits : GatedAuditTraits {
  using Replayed = ControllerReachingReplay;
  static Replayed replayed(const Model& m, const CoefficientTensor& c) { return Replayed(m, c); }
};

class LeakyAuditable : public FamilyAuditable<LeakyTraits> {
 public:
  LeakyAuditable(const std::string& path, int batch, int tokens)
      : FamilyAuditable(GatedModel<float>::load(path), batch, tokens), reference_(path, batch, tokens) {}
  std::string family() const override { return "gated"; }
  std::string description() const override { return reference_.description(); }
  std::string content_hash() const override { return reference_.content_hash(); }
  std::string config_json() const override { return reference_.config_json(); }
  size_t parameter_count() const override { return reference_.parameter_count(); }
  int max_tokens() const override { return reference_.max_tokens(); }
  int vocab() const override { return reference_.vocab(); }
  std::vector<int32_t> tokenize(const std::string& split, std::span<const unsigned char> text) const override {
    return reference_.tokenize(split, text);
  }
  CoefficientTensor make_coefficients(int w, int t) const override { return reference_.make_coefficients(w, t); }
  void identity_profile(CoefficientTensor& out) const override { reference_.identity_profile(out); }
  void structure_removed_profile(const CoefficientTensor& s, CoefficientTensor& out) const override {
    reference_.structure_removed_profile(s, out);
  }
  std::string static_profile_name() const override { return reference_.static_profile_name(); }
  std::string structure_removed_name() const override { return reference_.structure_removed_name(); }

 private:
  GatedAuditable reference_;  // the names and profiles of the same checkpoint
};

TEST_F(AuditEndToEnd, ReplayThatReachesTheControllerIsRefused) {
  const std::string m = model_of(GateKind::featuregate, 0);
  const AuditOptions o = options(m, "leaky");
  LeakyAuditable model(m, o.batch, 1 << 20);
  try {
    run_audit(model, Corpus(dir.path()), o);
    ADD_FAILURE() << "a replay that evaluates the controller was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the controller was evaluated"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("leaky/audit.json")));
}

class ReplayCheck : public AuditEndToEnd {
 protected:
  template <typename Model>
  void expect_refused(const std::string& name, const std::string& message) {
    const std::string m = model_of(GateKind::featuregate, 0);
    const AuditOptions o = options(m, name);
    Model model(m, o.batch, 1 << 20);
    try {
      run_audit(model, Corpus(dir.path()), o);
      ADD_FAILURE() << name << " was accepted as exact replay";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("exact replay failed"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(dir.file(name + "/audit.json")));
  }
};

// The recording pass's logits are kept while they fit the budget, for the batch shape they came
// from; exact replay compares with them where kept and runs the live pass where not, both exact.
TEST_F(AuditEndToEnd, TheRecordingPassIsKeptWithinItsBudget) {
  const std::string m = model_of(GateKind::featuregate, 20);
  GatedAuditable model(m, 8, 1 << 20);
  const int W = 16, B = 8, T = 16;
  WindowSet eval;
  eval.tokens = T;
  Rng rng(4);
  for (int w = 0; w < W; ++w) eval.indices.push_back(w);
  for (int i = 0; i < W * T; ++i) eval.inputs.push_back(int32_t(rng.below(256))), eval.targets.push_back(int32_t(rng.below(256)));
  const size_t batch_bytes = size_t(B) * T * model.vocab() * sizeof(float);
  // The plan's estimate: both batches within a budget of two, one below it; per rank on 2 ranks.
  EXPECT_EQ(RecordedLiveRun::estimate(model, W, T, B, 1, 2 * batch_bytes).windows, W);
  EXPECT_EQ(RecordedLiveRun::estimate(model, W, T, B, 1, 2 * batch_bytes).bytes_per_rank, 2 * batch_bytes);
  EXPECT_EQ(RecordedLiveRun::estimate(model, W, T, B, 1, 2 * batch_bytes - 1).windows, B);
  EXPECT_EQ(RecordedLiveRun::estimate(model, W, T, B, 2, batch_bytes).windows, W);
  EXPECT_EQ(RecordedLiveRun::estimate(model, W, T, B, 2, batch_bytes).bytes_per_rank, batch_bytes);
  RecordedLiveRun kept(batch_bytes + batch_bytes / 2);  // room for one batch
  CoefficientTensor A = model.make_coefficients(W, T);
  std::vector<double> nll(static_cast<size_t>(W));
  for (int w0 = 0; w0 < W; w0 += B) {
    model.poison_logits(B, T);
    model.run_live(eval.inputs.data() + w0 * T, eval.targets.data() + w0 * T, B, T, &A, w0, nll.data() + w0);
    kept.keep(model, w0, B, T, nll.data() + w0);
  }
  ASSERT_NE(kept.find(0, B), nullptr);
  EXPECT_EQ(kept.find(0, B)->nll, std::vector<double>(nll.begin(), nll.begin() + B));
  EXPECT_EQ(kept.find(0, B - 1), nullptr) << "another batch shape";
  EXPECT_EQ(kept.find(B, B), nullptr) << "beyond the budget";
  std::vector<double> replayed(static_cast<size_t>(B));
  const ExactReplay from_recording = exact_replay_batch(model, eval, A.view(), nll, 0, B, replayed.data(), kept.find(0, B));
  const ExactReplay rerun = exact_replay_batch(model, eval, A.view(), nll, B, B, replayed.data(), kept.find(B, B));
  EXPECT_EQ(from_recording.live_from_recording, 1);
  EXPECT_EQ(rerun.live_from_recording, 0);
  EXPECT_TRUE(from_recording.passed(0)) << from_recording.failure(0);
  EXPECT_TRUE(rerun.passed(0)) << rerun.failure(0);
}

TEST_F(ReplayCheck, InexactReplayStopsTheAudit) { expect_refused<InexactReplay>("inexact", "3 windows' NLL differ in bits"); }
TEST_F(ReplayCheck, NanNllStopsTheAudit) { expect_refused<NanNllReplay>("nan-nll", "6 non-finite values"); }
TEST_F(ReplayCheck, NanLogitStopsTheAudit) { expect_refused<NanLogitReplay>("nan-logit", "3 logits differ in bits"); }
TEST_F(ReplayCheck, AReplayUnlikeTheRecordingPassStopsTheAudit) {
  expect_refused<RecordingPassDiffers>("recording-differs", "3 logits differ in bits");
}
// Every batch's recording pass is kept here, so only the check of the recording pass against a plain
// live pass (one batch) sees the difference: one logit of that batch.
TEST_F(ReplayCheck, ARecordingPassUnlikeThePlainLivePassStopsTheAudit) {
  expect_refused<PlainLivePassDiffers>("plain-live-differs",
                                       "the pass that recorded the cache differs from the plain live pass (1 logits differ in bits");
}


// audit.json's exact_replay "passed" is the verdict its own figures give at its tolerance, not a
// constant: the document says what ran, whichever path wrote it.
TEST(ExactReplayDocument, PassedIsTheVerdictOfTheFiguresBesideIt) {
  ExactReplay r;
  r.batches = 3;
  EXPECT_TRUE(r.to_json(0)["passed"].get<bool>());
  r.differing_logits = 5;
  r.max_abs_delta_logit = 1e-6;
  EXPECT_FALSE(r.to_json(0)["passed"].get<bool>()) << "bitwise replay with differing logits";
  EXPECT_FALSE(r.to_json(1e-7)["passed"].get<bool>()) << "a difference above the tolerance";
  EXPECT_TRUE(r.to_json(1e-5)["passed"].get<bool>()) << "a difference within the tolerance";
  r.non_finite = 1;
  EXPECT_FALSE(r.to_json(1e-5)["passed"].get<bool>()) << "a non-finite value fails at any tolerance";
  ExactReplay digest;
  digest.by_digest = true;
  digest.batches = 2;
  digest.digest_mismatches = 1;
  EXPECT_FALSE(digest.to_json(0)["passed"].get<bool>());
  EXPECT_EQ(digest.to_json(0)["logits_compared"], "sha256");
}

}  // namespace
}  // namespace fca
