// The audit's interventions keep what the spec says they keep, and the audit end to end: exact
// zero penalties where the coefficients are constant, identity = correct for a dense model,
// nonzero penalties for a trained featuregate model, determinism, and cache refusal.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "audit/aggregate.h"
#include "audit/cache.h"
#include "audit/audit.h"
#include "report/audit_markdown.h"
#include "audit/conditions.h"
#include "core/rng.h"
#include "core/undefined_statistic.h"
#include "core/safetensors.h"
#include "core/threads.h"
#include "models/gated/auditable.h"
#include "models/mudd/auditable.h"
#include "report/report.h"
#include "test_util.h"
#include "train/trainer.h"

namespace fca {
namespace {

// A synthetic MUDD-shaped tensor: 3 layers, 5 tokens, 2 streams, 4 sources, source k valid iff
// k <= layer + 1; every entry distinct.
CoefficientTensor synthetic(int windows) {
  CoefficientTensor A(windows, CoefficientShape{3, 5, 2, 4});
  for (int l = 0; l < 3; ++l)
    for (int s = 0; s < 2; ++s)
      for (int k = 0; k < 4; ++k) A.set_valid(l, s, k, k <= l + 1);
  for (size_t i = 0; i < A.values().size(); ++i) A.values()[i] = float(i) * 0.001f + 0.5f;
  return A;
}

std::vector<float> window_values(const CoefficientTensor& A, int w) {
  return std::vector<float>(A.window_data(w), A.window_data(w) + A.shape().per_window());
}

TEST(Interventions, CrossInputIsADerangementAndKeepsTheMultiset) {
  const int W = 7;
  CoefficientTensor A = synthetic(W);
  CalibrationProfiles p{A, A, A, A};
  AuditRandomness rand(5, W, A.shape().tokens, 4);
  auto cond = make_condition("cross_input", A.view(), p, rand);
  for (int r = 0; r < 4; ++r) {
    const auto& pi = rand.derangement(r);
    std::multiset<std::vector<float>> before, after;
    for (int i = 0; i < W; ++i) {
      EXPECT_NE(pi[size_t(i)], i) << "fixed point in the derangement";
      CoefficientTensor batch(1, A.shape());
      cond->coefficients(i, r, batch, 0);
      const std::vector<float> out = batch.values();
      EXPECT_EQ(out, window_values(A, pi[size_t(i)]));
      before.insert(window_values(A, i));
      after.insert(out);
    }
    EXPECT_EQ(before, after);
  }
}

TEST(Interventions, TokenShuffleMovesWholeSourceVectorsAndKeepsTheMultiset) {
  const int W = 3;
  CoefficientTensor A = synthetic(W);
  CalibrationProfiles p{A, A, A, A};
  AuditRandomness rand(9, W, A.shape().tokens, 2);
  auto shuffle = make_condition("token_shuffle", A.view(), p, rand);
  auto cross_shuffle = make_condition("cross_shuffle", A.view(), p, rand);
  const auto& s = A.shape();
  for (int i = 0; i < W; ++i) {
    CoefficientTensor got(1, s), got_cross(1, s);
    shuffle->coefficients(i, 1, got, 0);
    cross_shuffle->coefficients(i, 1, got_cross, 0);
    const int source_window = rand.derangement(1)[size_t(i)];
    for (int l = 0; l < s.layers; ++l)
      for (int st = 0; st < s.streams; ++st) {
        const auto sigma = rand.token_permutation(1, i, l, st);
        std::multiset<float> before, after;
        for (int t = 0; t < s.tokens; ++t)
          for (int k = 0; k < s.sources; ++k) {
            // The source vector of token sigma(t) arrives intact at t; cross_shuffle uses the same sigma.
            EXPECT_EQ(got.at(0, l, t, st, k), A.at(i, l, sigma[size_t(t)], st, k));
            EXPECT_EQ(got_cross.at(0, l, t, st, k), A.at(source_window, l, sigma[size_t(t)], st, k));
            before.insert(A.at(i, l, t, st, k));
            after.insert(got.at(0, l, t, st, k));
          }
        EXPECT_EQ(before, after);
      }
  }
}

TEST(Interventions, SourceUniformMeanKeepsSignedSums) {
  CoefficientTensor S = synthetic(1), U = synthetic(1);
  Rng rng(2);
  for (auto& v : S.values()) v = float(rng.normal());  // signed values
  source_uniform_mean(S, U);
  const auto& s = S.shape();
  for (int l = 0; l < s.layers; ++l)
    for (int st = 0; st < s.streams; ++st) {
      double sum_s = 0, sum_u = 0;
      for (int k = 0; k < s.sources; ++k)
        if (S.valid(l, st, k)) sum_s += S.at(0, l, 0, st, k), sum_u += U.at(0, l, 0, st, k);
      EXPECT_NEAR(sum_s, sum_u, 1e-5);
      for (int k = 1; k < s.sources; ++k) {
        if (S.valid(l, st, k)) {
          EXPECT_EQ(U.at(0, l, 0, st, k), U.at(0, l, 0, st, 0));
        }
      }
    }
}

TEST(Interventions, LayerPermutationNeedsEqualLayerShapes) {
  CoefficientTensor A = synthetic(2);
  CalibrationProfiles p{A, A, A, A};
  AuditRandomness rand(1, 2, A.shape().tokens, 2);
  EXPECT_FALSE(layers_are_permutable(A.view()));
  EXPECT_THROW(make_condition("layer_permutation", A.view(), p, rand), Error);
  EXPECT_THROW(make_condition("no_such_condition", A.view(), p, rand), Error);
}

class AuditEndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    set_threads(2);
    testing::write_corpus(dir.path(), 30000, 6000, 6000);
  }
  // Trains (or just initialises, steps = 0) a small model of the given gate kind.
  std::string model_of(GateKind kind, int steps, uint64_t seed = 1) {
    const std::string path = dir.file(std::string(gate_kind_name(kind)) + std::to_string(seed) + ".safetensors");
    if (steps == 0) {
      GatedModel<float>::initialized(testing::tiny_config(kind), seed).save(path);
      return path;
    }
    TrainOptions o;
    testing::train_gated(o, testing::tiny_config(kind));
    o.batch = 8;
    o.steps = steps;
    o.lr = 1e-2;
    o.warmup = 5;
    o.eval_every = 0;
    o.seed = seed;
    o.out = path;
    o.progress = false;
    train_model(o, Corpus(dir.path()));
    return path;
  }
  // The small audit every test here runs: 24 + 16 windows, 3 randomisations, batch 8.
  AuditOptions options(const std::string& model_path, const std::string& out, uint64_t seed = 3) {
    AuditOptions o;
    o.model_path = model_path;
    o.eval_windows = 24;
    o.calib_windows = 16;
    o.reps = 3;
    o.batch = 8;
    o.bootstrap_resamples = 500;
    o.seed = seed;
    o.out_dir = dir.file(out);
    o.progress = false;
    return o;
  }
  nlohmann::ordered_json audit(const std::string& model_path, const std::string& out, uint64_t seed = 3) {
    const AuditOptions o = options(model_path, out, seed);
    GatedAuditable model(model_path, o.batch, 1 << 20);
    return run_audit(model, Corpus(dir.path()), o);
  }
  static double delta(const nlohmann::ordered_json& j, const std::string& name) {
    for (const auto& c : j["conditions"])
      if (c["name"] == name) return c["delta_nll"];
    ADD_FAILURE() << "no condition " << name;
    return 0;
  }
  testing::TempDir dir;
};

TEST_F(AuditEndToEnd, UniformGateGivesExactlyZeroPenalties) {
  const auto j = audit(model_of(GateKind::uniform, 20), "uniform");
  for (const char* c : {"cross_input", "token_shuffle", "cross_shuffle", "layer_position_mean", "static_profile",
                        "structure_removed", "layer_permutation"})
    EXPECT_EQ(delta(j, c), 0.0) << c;
  EXPECT_NE(delta(j, "identity"), 0.0);  // g = 1 instead of sigmoid(logit)
  // structure_removed changes nothing either, so retention is 0/0: recorded as undefined, not NaN.
  EXPECT_TRUE(j["retention"]["static_profile"]["estimate"].is_null());
  EXPECT_FALSE(j["criteria"]["retention_high"]["holds"].get<bool>());
  const auto again = audit(model_of(GateKind::uniform, 20, 2), "uniform2");
  const auto agg = aggregate_audits({dir.file("uniform/audit.json"), dir.file("uniform2/audit.json")}, 100, 1);
  EXPECT_TRUE(is_undefined_statistic(agg["figures"]["retention.static_profile"]));
  // A uniform gate's coefficients are constant: the variance shares are 0/0, null with the reason.
  EXPECT_TRUE(j["variance"]["shares"]["coordinate"].is_null());
  EXPECT_FALSE(undefined_reason(j["variance"]).empty());
  EXPECT_EQ(agg["figures"]["delta_nll.identity"]["values"].size(), 2u);
  EXPECT_EQ(j["exact_replay"]["max_abs_delta_logit"], 0.0);
  for (const auto& c : j["conditions"]) EXPECT_EQ(c["controller_evaluations"], 0);
  EXPECT_TRUE(std::filesystem::exists(dir.file("uniform/windows.csv")));
  // audit.md is rendered by report/ (fca audit and fca study call it), not by the audit.
  EXPECT_FALSE(std::filesystem::exists(dir.file("uniform/audit.md")));
  write_audit_markdown(dir.file("uniform"), j);
  EXPECT_TRUE(std::filesystem::exists(dir.file("uniform/audit.md")));
}

TEST_F(AuditEndToEnd, AggregateAppliesCriteriaAndRefusesWhatDoesNotCombine) {
  const std::string m1 = model_of(GateKind::featuregate, 20, 1), m2 = model_of(GateKind::featuregate, 20, 2);
  audit(m1, "a1");
  audit(m2, "a2");
  const std::string a1 = dir.file("a1/audit.json"), a2 = dir.file("a2/audit.json");
  const auto agg = aggregate_audits({a1, a2}, 200, 1);
  // The criteria on the checkpoint-level CIs.
  ASSERT_TRUE(agg["criteria"].contains("static_penalty_small"));
  EXPECT_EQ(agg["criteria"]["static_penalty_small"]["value"], agg["figures"]["delta_nll.static_profile"]["ci95"][1]);
  EXPECT_EQ(agg["criteria"]["static_penalty_small"]["holds"].get<bool>(),
            agg["figures"]["delta_nll.static_profile"]["ci95"][1].get<double>() < 0.002);
  ASSERT_TRUE(agg["criteria"].contains("retention_high"));
  auto refused = [&](const std::vector<std::string>& paths, const std::string& message) {
    try {
      aggregate_audits(paths, 200, 1);
      ADD_FAILURE() << "aggregate accepted what should not combine: " << message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  audit(m1, "a1-again");  // the same checkpoint, audited twice
  refused({a1, a2, dir.file("a1-again/audit.json")}, "audit the same checkpoint");
  audit(m2, "a2-seed9", 9);  // another audit seed
  refused({a1, dir.file("a2-seed9/audit.json")}, "differ in /settings/seed");
  nlohmann::json other = nlohmann::json::parse(testing::read_bytes(a2));
  other["settings"]["eval_windows"] = 48;
  testing::write_text(dir.file("a2-windows.json"), other.dump());
  refused({a1, dir.file("a2-windows.json")}, "differ in /settings/eval_windows");
  other = nlohmann::json::parse(testing::read_bytes(a2));
  other["model"]["description"] = "featuregate L 3, D 16, H 2, T 16";
  testing::write_text(dir.file("a2-config.json"), other.dump());
  refused({a1, dir.file("a2-config.json")}, "differ in /model/description");
}

TEST_F(AuditEndToEnd, ThePlanCountsEveryPassAndIsRecordedBesideTheMeasuredTime) {
  const std::string m = model_of(GateKind::featuregate, 0);
  const auto j = audit(m, "plan");
  // 24 + 16 windows: the cache pass (40 live), exact replay (24 live + 24 replayed), the replay
  // sensitivity probe (a calibration batch of 8, replayed twice), four randomized conditions x 3 reps and
  // four profile conditions x 1, over 24 windows each.
  const auto& plan = j["provenance"]["run"]["plan"];
  EXPECT_EQ(plan["live_windows"], 40 + 24);
  EXPECT_EQ(plan["replay_windows"], 24 + 2 * 8 + 24 * (4 * 3 + 4));
  EXPECT_EQ(plan["tokens"], (40 + 24 + 24 + 2 * 8 + 24 * 16) * 16);
  EXPECT_GT(plan["gflop"].get<double>(), 0);
  EXPECT_GT(plan["estimated_s"].get<double>(), 0);
  const auto& measured = j["provenance"]["run"]["measured"];
  EXPECT_GT(measured["seconds"].get<double>(), 0);
  EXPECT_GT(measured["gflop_per_s"].get<double>(), 0);
  // The settings list the conditions the plan counted.
  EXPECT_EQ(j["settings"]["conditions"].size(), 8u);
  // A reused cache has no live cache pass to plan.
  const auto again = run_audit(*std::make_unique<GatedAuditable>(m, 8, 1 << 20), Corpus(dir.path()), options(m, "plan"));
  EXPECT_EQ(again["provenance"]["run"]["plan"]["live_windows"], 24);
}

TEST_F(AuditEndToEnd, DenseIdentityEqualsCorrect) {
  const auto j = audit(model_of(GateKind::dense, 0), "dense");
  EXPECT_EQ(delta(j, "identity"), 0.0);
  EXPECT_EQ(delta(j, "static_profile"), 0.0);
}

TEST_F(AuditEndToEnd, TrainedFeatureGateHasPenaltiesAndIsDeterministic) {
  const std::string m = model_of(GateKind::featuregate, 60);
  const auto a = audit(m, "fg1"), b = audit(m, "fg2");
  for (const char* c : {"cross_input", "token_shuffle", "cross_shuffle", "static_profile", "structure_removed", "identity"})
    EXPECT_NE(delta(a, c), 0.0) << c;
  // Forcing every gate to 1 moves the model far from its trained operating point (g near 0.5).
  EXPECT_GT(delta(a, "identity"), 0.0);
  EXPECT_GT(delta(a, "identity"), std::abs(delta(a, "static_profile")));
  for (const char* section : {"conditions", "factor_effects", "retention", "criteria", "variance", "baseline"})
    EXPECT_EQ(a[section], b[section]) << section;
  // Variance shares add up to one.
  double total = 0;
  for (auto& [k, v] : a["variance"]["shares"].items()) total += v.get<double>();
  EXPECT_NEAR(total, 1.0, 1e-9);
}

// Condition replays of one window batch share the embedding and block 0 (prefix reuse); the audit
// must come out bitwise the same as one that recomputes every block, for the gated family and MUDD.
TEST_F(AuditEndToEnd, PrefixReuseGivesBitwiseTheSameAudit) {
  const TrainOptions t = testing::tiny_mudd_training(dir.file("mudd"), 3);
  train_model(t, Corpus(dir.path()));
  for (const std::string family : {"gated", "mudd"}) {
    SCOPED_TRACE(family);
    const std::string m = family == "gated" ? model_of(GateKind::featuregate, 30) : t.out;
    nlohmann::ordered_json result[2];
    for (int reuse = 0; reuse < 2; ++reuse) {
      AuditOptions o = options(m, family + (reuse ? "-reuse" : "-full"));
      o.prefix_reuse = reuse == 1;
      std::unique_ptr<AuditableModel> model;
      if (family == "gated") model = std::make_unique<GatedAuditable>(m, o.batch, 1 << 20);
      else model = std::make_unique<MuddAuditable>(m, o.batch, 1 << 20);
      result[reuse] = run_audit(*model, Corpus(dir.path()), o);
    }
    for (const char* section : {"conditions", "factor_effects", "retention", "criteria", "variance", "baseline", "exact_replay"})
      EXPECT_EQ(result[0][section], result[1][section]) << section;
    EXPECT_EQ(testing::read_bytes(dir.file(family + "-full/windows.csv")), testing::read_bytes(dir.file(family + "-reuse/windows.csv")));
    // 24 windows in 3 batches of 8. Per batch, 3 randomisations of cross_input, token_shuffle and
    // cross_shuffle, the 4 fixed profiles and (gated) 3 layer permutations: every replay but the
    // batch's first follows a pass over the same windows.
    const int replays_per_batch = 9 + 4 + (family == "gated" ? 3 : 0);
    EXPECT_EQ(result[1]["provenance"]["run"]["prefix_reuse"]["replays_reusing_block_0"], 3 * (replays_per_batch - 1));
    EXPECT_EQ(result[0]["provenance"]["run"]["prefix_reuse"]["replays_reusing_block_0"], 0);
  }
}

// Every GEMM and attention product computes a row from that row alone (ops/gemm.cpp,
// ops/attention.cpp), so the batch size decides only how the windows are grouped: audits in batches
// of 8, of 5 (the last one partial) and of the probe's choice (batch 0) give bitwise the same
// results, and a cache written at one batch serves an audit at another.
TEST_F(AuditEndToEnd, ResultsDoNotDependOnTheBatchSize) {
  const TrainOptions t = testing::tiny_mudd_training(dir.file("mudd"), 3);
  train_model(t, Corpus(dir.path()));
  for (const std::string family : {"gated", "mudd"}) {
    SCOPED_TRACE(family);
    const std::string m = family == "gated" ? model_of(GateKind::featuregate, 30) : t.out;
    const int batches[3] = {8, 5, 0};
    nlohmann::ordered_json result[3];
    for (int k = 0; k < 3; ++k) {
      AuditOptions o = options(m, family + "-batch" + std::to_string(batches[k]));
      o.batch = batches[k];
      std::unique_ptr<AuditableModel> model;
      if (family == "gated") model = std::make_unique<GatedAuditable>(m, std::max(1, o.batch), 1 << 20);
      else model = std::make_unique<MuddAuditable>(m, std::max(1, o.batch), 1 << 20);
      result[k] = run_audit(*model, Corpus(dir.path()), o);
    }
    const auto& choice = result[2]["provenance"]["run"]["batch_choice"];
    EXPECT_EQ(choice["reason"], "probed: least time per window");
    EXPECT_EQ(result[2]["settings"]["batch"], choice["batch"]);
    EXPECT_GE(choice["probe"].size(), 1u);
    for (int k = 1; k < 3; ++k) {
      for (const char* section : {"conditions", "factor_effects", "retention", "criteria", "variance", "baseline"})
        EXPECT_EQ(result[0][section], result[k][section]) << section << " at batch " << batches[k];
      for (auto* r : {&result[0], &result[k]}) (*r)["exact_replay"].erase("batches");  // how the windows were grouped
      EXPECT_EQ(result[0]["exact_replay"], result[k]["exact_replay"]);
      EXPECT_EQ(testing::read_bytes(dir.file(family + "-batch8/windows.csv")),
                testing::read_bytes(dir.file(family + "-batch" + std::to_string(batches[k]) + "/windows.csv")));
    }
    // The batch-8 cache, reused at batch 5: exact replay passes and the results are the same.
    AuditOptions o = options(m, family + "-reuse5");
    o.batch = 5;
    o.cache_path = dir.file(family + "-batch8/cache.safetensors");
    std::unique_ptr<AuditableModel> model;
    if (family == "gated") model = std::make_unique<GatedAuditable>(m, o.batch, 1 << 20);
    else model = std::make_unique<MuddAuditable>(m, o.batch, 1 << 20);
    const auto reused = run_audit(*model, Corpus(dir.path()), o);
    EXPECT_TRUE(reused["settings"]["cache_reused"].get<bool>());
    EXPECT_EQ(result[0]["conditions"], reused["conditions"]);
  }
}

// Nor on the thread count: an audit on 1 thread and one on 3 give bitwise the same results.
TEST_F(AuditEndToEnd, ResultsDoNotDependOnTheThreadCount) {
  const std::string m = model_of(GateKind::featuregate, 30);
  nlohmann::ordered_json result[2];
  const int threads[2] = {1, 3};
  for (int k = 0; k < 2; ++k) {
    set_threads(threads[k]);
    AuditOptions o = options(m, "threads" + std::to_string(threads[k]));
    GatedAuditable model(m, o.batch, 1 << 20);
    result[k] = run_audit(model, Corpus(dir.path()), o);
  }
  set_threads(2);
  for (const char* section : {"conditions", "factor_effects", "retention", "criteria", "variance", "baseline", "exact_replay"})
    EXPECT_EQ(result[0][section], result[1][section]) << section;
  EXPECT_EQ(testing::read_bytes(dir.file("threads1/windows.csv")), testing::read_bytes(dir.file("threads3/windows.csv")));
}

// --plan: the plan alone, from a probe on this machine; nothing is written.
TEST_F(AuditEndToEnd, PlanOnlyWritesNothing) {
  const std::string m = model_of(GateKind::featuregate, 30);
  AuditOptions o = options(m, "planned");
  o.plan_only = true;
  GatedAuditable model(m, o.batch, 1 << 20);
  const auto plan = run_audit(model, Corpus(dir.path()), o);
  EXPECT_FALSE(std::filesystem::exists(dir.file("planned")));
  // 24 evaluation windows: the cache pass over 24 + 16, exact replay's live half; replayed: exact
  // replay, the sensitivity probe's two replays of a calibration batch of 8, 3 randomised conditions x 3
  // reps, 4 fixed profiles, layer_permutation x 3.
  EXPECT_EQ(plan["plan"]["live_windows"], 24 + 16 + 24);
  EXPECT_EQ(plan["plan"]["replay_windows"], 24 * (1 + 3 * 3 + 4 + 3) + 2 * 8);
  EXPECT_GT(plan["plan"]["estimated_s"].get<double>(), 0.0);
  const auto& memory = plan["plan"]["memory_bytes"];
  EXPECT_EQ(memory["weights"], model.parameter_count() * sizeof(float));
  EXPECT_EQ(memory["run_state"], model.run_state_bytes());
  EXPECT_EQ(memory["total"].get<size_t>(), memory["weights"].get<size_t>() + memory["run_state"].get<size_t>() +
                                               memory["cache"].get<size_t>());
}

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
    m_.run_live(x, y, B, T, record, first, nll);
    last_live_nll_.assign(nll, nll + B);
  }
  void run_replay(const int32_t* x, const int32_t* y, int B, int T, const CoefficientTensor& c, double* nll) override {
    replay_windows += B;
    if (replay_writes_no_logits) std::copy(last_live_nll_.begin(), last_live_nll_.end(), nll);
    else if (ignore_replayed_coefficients) m_.run_live(x, y, B, T, nullptr, 0, nll);
    else m_.run_replay(x, y, B, T, c, nll);
  }
  size_t run_state_bytes() const override { return m_.run_state_bytes(); }
  bool batch_invariant() const override { return m_.batch_invariant(); }
  void set_max_batch(int b) override { m_.set_max_batch(b); }
  int max_batch() const override { return m_.max_batch(); }
  const float* last_logits() const override { return m_.last_logits(); }
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
  AuditableModel& m_;
  std::vector<double> last_live_nll_;
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
  EXPECT_EQ(good["replay_sensitivity"]["controller_evaluations"], 0);
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
    // sensitivity probe's two replays of a calibration batch of 8 in each run.
    EXPECT_EQ(replayed, 24 + 24 * per_window + 3 * 8 + 3 * 2 * 8);
    // Live: the cache pass over 24 + 16 windows and exact replay's live half once (the resumed runs
    // read the cache and the journal), plus the probe's warm-up window and live batch in each run.
    EXPECT_EQ(live, 24 + 16 + 24 + 3 * (1 + 8));
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
  // The matching cache is reused.
  o.cache_path = dir.file("a/cache.safetensors");
  GatedAuditable again(m1, o.batch, 1 << 20);
  EXPECT_TRUE(run_audit(again, Corpus(dir.path()), o)["settings"]["cache_reused"].get<bool>());
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

class NanLogitReplay : public GatedAuditable {
 public:
  using GatedAuditable::GatedAuditable;
  void run_live(const int32_t* inputs, const int32_t* targets, int B, int T, CoefficientTensor* record, int first,
                double* window_nll) override {
    GatedAuditable::run_live(inputs, targets, B, T, record, first, window_nll);
    poisoned_ = false;
  }
  void run_replay(const int32_t* inputs, const int32_t* targets, int B, int T, const CoefficientTensor& c,
                  double* window_nll) override {
    GatedAuditable::run_replay(inputs, targets, B, T, c, window_nll);
    logits_.assign(GatedAuditable::last_logits(), GatedAuditable::last_logits() + size_t(B) * T * vocab());
    logits_[5] = std::nanf("");
    poisoned_ = true;
  }
  const float* last_logits() const override { return poisoned_ ? logits_.data() : GatedAuditable::last_logits(); }

 private:
  std::vector<float> logits_;
  bool poisoned_ = false;
};

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

TEST_F(ReplayCheck, InexactReplayStopsTheAudit) { expect_refused<InexactReplay>("inexact", "3 windows' NLL differ in bits"); }
TEST_F(ReplayCheck, NanNllStopsTheAudit) { expect_refused<NanNllReplay>("nan-nll", "6 non-finite values"); }
TEST_F(ReplayCheck, NanLogitStopsTheAudit) { expect_refused<NanLogitReplay>("nan-logit", "3 logits differ in bits"); }

}  // namespace
}  // namespace fca

namespace fca {
namespace {

// Found by fuzz_cache_manifest: a window index of 4.4e94 was converted to int64 (undefined
// behaviour). Every field of a manifest is now checked for type and range before it is narrowed.
TEST(CacheManifest, FieldsAreCheckedBeforeNarrowing) {
  CacheManifest m;
  m.family = "gated";
  m.eval_windows = {0, 5};
  m.calib_windows = {0, 7};
  m.tokens = 8;
  m.batch = 8;
  m.shape = CoefficientShape{2, 8, 1, 1};
  const nlohmann::json good = nlohmann::json::parse(m.to_json().dump());
  EXPECT_EQ(CacheManifest::from_json(good, "m").calib_windows, m.calib_windows);
  auto refused = [&](auto mutate, const std::string& part) {
    nlohmann::json j = good;
    mutate(j);
    try {
      CacheManifest::from_json(j, "m");
      ADD_FAILURE() << "accepted: " << j.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  refused([](nlohmann::json& j) { j["calib_windows"][1] = 4.4e94; }, "'calib_windows'[1] must be an integer");
  refused([](nlohmann::json& j) { j["tokens"] = 1e12; }, "'tokens' must be an integer");
  refused([](nlohmann::json& j) { j["shape"]["layer"] = -3; }, "'layer' must be in 1 ..");
  refused([](nlohmann::json& j) { j["seed"] = -1; }, "'seed' must be an integer in 0 .. 2^64-1");
  refused([](nlohmann::json& j) { j["extra"] = 1; }, "unknown key 'extra'");
  refused([](nlohmann::json& j) { j.erase("batch"); }, "'batch' is missing");
}

}  // namespace
}  // namespace fca
