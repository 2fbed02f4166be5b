// The audit's interventions keep what docs/audit.md says they keep, and the audit end to end: exact
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
#include "audit/plan.h"
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

// disabled_<group>: the cached window with the group's entries at their disabled values (constant
// over tokens), every other entry as cached; one condition per group, named after it.
TEST(Interventions, DisabledGroupReplacesOnlyItsEntries) {
  const int W = 3;
  CoefficientTensor A = synthetic(W);
  CalibrationProfiles p{A, A, A, A};
  AuditRandomness rand(5, W, A.shape().tokens, 2);
  const CoefficientShape& s = A.shape();
  DisableGroups groups;
  groups.names = {"first", "second"};
  groups.disabled = CoefficientTensor(1, s);
  for (size_t i = 0; i < groups.disabled.values().size(); ++i) groups.disabled.values()[i] = -1.0f - float(i);
  for (int l = 0; l < s.layers; ++l)
    for (int st = 0; st < s.streams; ++st)
      for (int k = 0; k < s.sources; ++k) groups.group_of.push_back(k == 0 ? 0 : (st == 1 && k == 1) ? 1 : -1);
  EXPECT_EQ(groups.condition_names(), (std::vector<std::string>{"disabled_first", "disabled_second"}));
  for (int g = 0; g < 2; ++g) {
    auto cond = make_condition(groups.condition_names()[size_t(g)], A.view(), p, rand, groups);
    EXPECT_FALSE(cond->randomized());
    for (int w = 0; w < W; ++w) {
      CoefficientTensor out(1, s);
      cond->coefficients(w, 0, out, 0);
      for (int l = 0; l < s.layers; ++l)
        for (int t = 0; t < s.tokens; ++t)
          for (int st = 0; st < s.streams; ++st)
            for (int k = 0; k < s.sources; ++k) {
              const bool in_group = groups.group_of[(size_t(l) * s.streams + st) * s.sources + k] == g;
              ASSERT_EQ(out.at(0, l, t, st, k), in_group ? groups.disabled.at(0, l, t, st, k) : A.at(w, l, t, st, k))
                  << "group " << g << " window " << w << " (" << l << ", " << t << ", " << st << ", " << k << ")";
            }
    }
  }
  EXPECT_THROW(make_condition("disabled_third", A.view(), p, rand, groups), Error);
  EXPECT_THROW(make_condition("disabled_first", A.view(), p, rand), Error);  // a model without groups
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
  // The protocol's settings: the token shuffle, the exit threshold and the replay tolerance. The
  // error names both files and says what was expected and what was found.
  auto with = [&](const std::string& from, const std::string& name, const std::string& pointer, const nlohmann::json& value) {
    nlohmann::json j = nlohmann::json::parse(testing::read_bytes(from));
    j[nlohmann::json::json_pointer(pointer)] = value;
    testing::write_text(dir.file(name), j.dump());
    return dir.file(name);
  };
  const std::string joint = "site-joint: one permutation per window and layer, shared by every stream";  // --joint-token-shuffle
  refused({a1, with(a2, "a2-shuffle.json", "/settings/token_shuffle", joint)},
          dir.file("a2-shuffle.json") + " and " + a1 + " differ in /settings/token_shuffle (expected \"per stream: one "
              "permutation per window, layer and stream\" as in " + a1 + ", found \"" + joint + "\")");
  refused({with(a1, "a1-exit.json", "/routing/controller_setting", "exit_threshold 0.5"),
           with(a2, "a2-exit.json", "/routing/controller_setting", "exit_threshold 0.9")},
          "differ in /routing/controller_setting (expected \"exit_threshold 0.5\"");
  refused({a1, with(a2, "a2-tolerance.json", "/exact_replay/tolerance", 1e-6)}, "differ in /exact_replay/tolerance (expected 0.0");
  // The interventions' definitions (an adapter names its own) and the fca that measured them.
  refused({a1, with(a2, "a2-static.json", "/model/static_profile", "TokenMean")}, "differ in /model/static_profile");
  refused({a1, with(a2, "a2-removed.json", "/model/structure_removed", "LayerMean")}, "differ in /model/structure_removed");
  refused({a1, with(a2, "a2-version.json", "/provenance/fca_version", "0.0.1")}, "differ in /provenance/fca_version");
  // Every audit says what it audited: a missing hash is refused in the first audit too (two audits
  // both lacking one would otherwise compare equal).
  nlohmann::json unhashed = nlohmann::json::parse(testing::read_bytes(a1));
  unhashed["provenance"].erase("model_sha256");
  testing::write_text(dir.file("a1-unhashed.json"), unhashed.dump());
  refused({dir.file("a1-unhashed.json"), a2}, dir.file("a1-unhashed.json") + ": field '/provenance/model_sha256' is missing");
  refused({a1, with(a2, "a2-nodata.json", "/provenance/data/eval_split_sha256", nullptr)},
          "field '/provenance/data/eval_split_sha256' is null");
}

TEST_F(AuditEndToEnd, ThePlanCountsEveryPassAndIsRecordedBesideTheMeasuredTime) {
  const std::string m = model_of(GateKind::featuregate, 0);
  const auto j = audit(m, "plan");
  // 24 + 16 windows: the cache pass (40 live, also exact replay's live half), the plain live pass
  // of one batch of 8 that checks the recording pass, exact replay (24 replayed), the replay
  // sensitivity probe (2 calibration windows replayed as cached and once per probe group: 2 layers
  // x 2 token subsets), four randomized conditions x 3 reps and four profile conditions x 1, over
  // 24 windows each.
  const auto& plan = j["provenance"]["run"]["plan"];
  EXPECT_EQ(plan["live_windows"], 40 + 8);
  EXPECT_EQ(plan["replay_windows"], 24 + 5 * 2 + 24 * (4 * 3 + 4));
  EXPECT_EQ(plan["tokens"], (40 + 8 + 24 + 5 * 2 + 24 * 16) * 16);
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
    EXPECT_EQ(choice["reason"], "probed: least time per window, fastest of its passes");
    EXPECT_EQ(result[2]["settings"]["batch"], choice["batch"]);
    EXPECT_GE(choice["probe"].size(), 1u);
    EXPECT_GE(choice["timed_passes_per_candidate"].get<int>(), choice["probe"].size() > 1 ? kBatchProbeSamples : 1);
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
  // 24 evaluation windows: the cache pass over 24 + 16 (also exact replay's live half) and the plain
  // live pass of one batch of 8 that checks the recording pass; replayed: exact replay, the
  // sensitivity probe's replays of 2 calibration windows (as cached, and once per probe group: 2
  // layers x 2 token subsets), 3 randomised conditions x 3 reps, 4 fixed profiles, layer_permutation x 3.
  EXPECT_EQ(plan["plan"]["live_windows"], 24 + 16 + 8);
  EXPECT_EQ(plan["plan"]["replay_windows"], 24 * (1 + 3 * 3 + 4 + 3) + 5 * 2);
  EXPECT_GT(plan["plan"]["estimated_s"].get<double>(), 0.0);
  const auto& memory = plan["plan"]["memory_bytes"];
  // The weights and their packed copy for the GEMM (the rank-2 tensors: most of a small model).
  EXPECT_GT(model.packed_weights_bytes(), 0u);
  EXPECT_LT(model.packed_weights_bytes(), model.parameter_count() * sizeof(float));
  EXPECT_EQ(memory["weights"], model.parameter_count() * sizeof(float) + model.packed_weights_bytes());
  EXPECT_EQ(memory["run_state"], model.run_state_bytes());
  EXPECT_EQ(memory["kept_live_logits"], size_t(24) * 16 * model.vocab() * sizeof(float));  // for exact replay
  EXPECT_EQ(memory["total"].get<size_t>(), memory["weights"].get<size_t>() + memory["run_state"].get<size_t>() +
                                               memory["cache"].get<size_t>() + memory["kept_live_logits"].get<size_t>());
}


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
