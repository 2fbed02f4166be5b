// The audit on exit-depth records (docs/exit.md, "Exact rules"): every condition writes valid
// monotone records; cross_input keeps each position's multiset of depths over the windows,
// token_shuffle and depth_inverted each window's; the profiles meet their largest-remainder
// targets; MeanDepth's positions are uniform; and an audit of a trained exit model reports each
// condition's mean depth and GEMM FLOPs, counted in its replays and equal to its records' formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "audit/audit.h"
#include "audit/audit_kind.h"
#include "audit/exit_depth_kind.h"
#include "core/error.h"
#include "core/json.h"
#include "core/rng.h"
#include "core/threads.h"
#include "data/corpus.h"
#include "models/exit/model.h"
#include "models/capabilities.h"
#include "models/registry.h"
#include "models/routing_record.h"
#include "test_util.h"
#include "train/trainer.h"

namespace fca {
namespace {

CoefficientShape shape(int L, int T, int m) {
  CoefficientShape s{L - 1, T, 1, 1};
  s.kind = RecordKind::exit_depth;
  s.slots = 1;
  s.min_exit = m;
  return s;
}

// W windows of random depths in [m, L], biased by position so that profiles have structure.
CoefficientTensor random_records(int W, int L, int T, int m, uint64_t seed) {
  CoefficientTensor r(W, shape(L, T, m));
  Rng rng(seed);
  for (int w = 0; w < W; ++w) {
    std::vector<int> d(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) d[size_t(t)] = std::min(L, m + int(rng.below(uint64_t(L - m + 1))) + (t < 3 ? 1 : 0));
    write_exit_depths(r, w, d);
  }
  return r;
}

std::map<int, int> multiset(const std::vector<int>& d) {
  std::map<int, int> m;
  for (int v : d) ++m[v];
  return m;
}

TEST(ExitConditions, RecordsAreValidAndKeepTheirMultisets) {
  const int W = 6, L = 5, T = 20, m = 2, R = 3;
  const CoefficientTensor A = random_records(W, L, T, m, 1);
  const CoefficientTensor C = random_records(9, L, T, m, 2);
  const ExitProfiles p = exit_profiles(C.view());
  const AuditRandomness rand(7, W, T, R);
  for (const auto& name : exit_condition_names()) {
    const auto c = make_exit_condition(name, A.view(), p, rand);
    EXPECT_EQ(c->randomized(), audit_kind_row(RecordKind::exit_depth).is_randomized(name)) << name;
    CoefficientTensor out(W, A.shape());
    for (int r = 0; r < (c->randomized() ? R : 1); ++r) {
      for (int w = 0; w < W; ++w) c->coefficients(w, r, out, w);
      EXPECT_NO_THROW(check_routing_records(out.view(), name)) << name;
      for (int w = 0; w < W; ++w) {
        const auto own = exit_depths(A.view(), w), got = exit_depths(out.view(), w);
        if (name == "token_shuffle" || name == "depth_inverted" || name == "correct") {
          EXPECT_EQ(multiset(got), multiset(own)) << name << " window " << w;
        }
        if (name == "depth_inverted") {
          for (int t = 0; t + 1 < T; ++t)  // deeper own depth, shallower given depth
            for (int u = t + 1; u < T; ++u) {
              if (own[size_t(t)] < own[size_t(u)]) {
                EXPECT_GE(got[size_t(t)], got[size_t(u)]) << t << " " << u;
              }
            }
        }
        for (int t = 0; t < T; ++t) {  // the absorbing fill
          for (int k = 1; k < L; ++k)
            EXPECT_EQ(out.at(w, k - 1, t), got[size_t(t)] > k ? 0.0f : 1.0f) << name;
        }
      }
      if (name == "cross_input")
        for (int t = 0; t < T; ++t) {
          std::vector<int> own_column, got_column;
          for (int w = 0; w < W; ++w) {
            own_column.push_back(exit_depths(A.view(), w)[size_t(t)]);
            got_column.push_back(exit_depths(out.view(), w)[size_t(t)]);
          }
          EXPECT_EQ(multiset(got_column), multiset(own_column)) << "position " << t;
        }
    }
  }
}

TEST(ExitConditions, ProfilesMeetTheirLargestRemainderTargets) {
  const int L = 6, T = 33, m = 1;
  const CoefficientTensor C = random_records(7, L, T, m, 3);
  const ExitProfiles p = exit_profiles(C.view());
  int64_t S = 0;
  std::vector<int64_t> count(size_t(L + 1), 0);
  for (int w = 0; w < C.windows(); ++w)
    for (int d : exit_depths(C.view(), w)) S += d, ++count[size_t(d)];
  const std::vector<int> position = exit_depths(p.position_depth.view(), 0);
  int64_t total = 0;
  for (int d : position) total += d;
  EXPECT_EQ(total, (2 * S + C.windows()) / (2 * C.windows()));  // round(sum_t m_t), halves up
  for (int t = 0; t < T; ++t) {  // each position within one block of its mean
    double mean = 0;
    for (int w = 0; w < C.windows(); ++w) mean += exit_depths(C.view(), w)[size_t(t)] / double(C.windows());
    EXPECT_LT(std::abs(position[size_t(t)] - mean), 1.0) << t;
  }
  const auto histogram = multiset(exit_depths(p.depth_histogram.view(), 0));
  int placed = 0;
  for (int d = 1; d <= L; ++d) {
    const double target = double(count[size_t(d)]) * T / double(C.windows() * T);
    const int n = histogram.count(d) ? histogram.at(d) : 0;
    EXPECT_LT(std::abs(n - target), 1.0) << "depth " << d;
    placed += n;
  }
  EXPECT_EQ(placed, T);
  EXPECT_DOUBLE_EQ(p.mean_depth, double(S) / double(C.windows() * T));
}

TEST(ExitConditions, MeanDepthPositionsAreUniform) {
  const int W = 1, L = 4, T = 10, reps = 4000;
  CoefficientTensor C(1, shape(L, T, 1));
  std::vector<int> d(static_cast<size_t>(T), 2);
  for (int t = 0; t < 3; ++t) d[size_t(t)] = 3;  // d-bar 2.3: three positions per draw run 3 blocks
  write_exit_depths(C, 0, d);
  const ExitProfiles p = exit_profiles(C.view());
  const AuditRandomness rand(5, W + 1, T, reps);
  const auto c = make_exit_condition("structure_removed", C.view(), p, rand);
  CoefficientTensor out(1, C.shape());
  std::vector<double> hits(static_cast<size_t>(T), 0.0);
  for (int r = 0; r < reps; ++r) {
    c->coefficients(0, r, out, 0);
    const auto got = exit_depths(out.view(), 0);
    int hi = 0;
    for (int t = 0; t < T; ++t) hi += got[size_t(t)] == 3, hits[size_t(t)] += got[size_t(t)] == 3;
    ASSERT_EQ(hi, 3);
  }
  // Chi-squared over positions, 9 degrees of freedom: the 99.9% quantile is 27.9.
  const double expected = reps * 3.0 / T;
  double chi2 = 0;
  for (double h : hits) chi2 += (h - expected) * (h - expected) / expected;
  EXPECT_LT(chi2, 27.9);
}

TEST(ExitAudit, EveryConditionReportsItsDepthAndCountedFlopsMatchingItsRecords) {
  set_threads(2);
  testing::TempDir dir;
  testing::write_corpus(dir.path(), 60000, 20000, 20000);
  Corpus corpus(dir.path());
  TrainOptions o;
  o.arch = "exit";
  o.shape = {3, 32, 2, 32};
  o.settings = {{"min_exit", 1}, {"exit_threshold", 0.5}, {"exit_head_steps", 30}};
  o.batch = 8, o.steps = 60, o.warmup = 5, o.lr = 3e-3, o.eval_every = 0, o.eval_windows = 8, o.seed = 1, o.progress = false;
  o.out = dir.file("exit.safetensors");
  train_model(o, corpus);
  // Classifiers that spread the depths (a short phase 2 on a barely trained trunk exits nearly
  // every token at once): random directions, no bias.
  ExitModel<float> trained = ExitModel<float>::load(o.out);
  Rng rng(2);
  for (int i = 0; i < 2 * 32; ++i) trained.weights().exit_weight[i] = float(rng.normal() * 0.5);
  for (int k = 0; k < 2; ++k) trained.weights().exit_bias[k] = 0.0f;
  trained.save(dir.file("spread.safetensors"));
  auto model = open_model(dir.file("spread.safetensors"), 8, 32);
  AuditOptions a;
  a.eval_windows = 24, a.calib_windows = 24, a.reps = 2, a.bootstrap_resamples = 200, a.batch = 8, a.seed = 1;
  a.out_dir = dir.file("audit"), a.progress = false;
  const auto j = run_audit(*model, corpus, a);
  EXPECT_TRUE(j["exact_replay"]["passed"].get<bool>());
  std::vector<std::string> names;
  for (const auto& c : j["conditions"]) {
    names.push_back(c["name"]);
    EXPECT_EQ(c["controller_evaluations"], 0) << c["name"];
    ASSERT_TRUE(c.contains("compute")) << c["name"];
    if (c["name"] != "correct") {
      EXPECT_TRUE(c["compute"]["counted_matches_record"].get<bool>()) << c["name"];
    }
  }
  EXPECT_EQ(names, exit_condition_names());
  for (const auto& c : j["conditions"])
    if (c["name"] == "identity") {
      EXPECT_EQ(c["compute"]["mean_depth"].get<double>(), 3.0);
    }
  const double mean_depth = j["routing"]["mean_depth"].get<double>();
  EXPECT_GT(mean_depth, 1.0);
  EXPECT_LT(mean_depth, 3.0);
  EXPECT_EQ(j["settings"]["skipped_conditions"].size(), 3u);
  const auto& agreement = j["routing"]["exit_agreement"];
  EXPECT_GT(agreement["exited"].get<int64_t>(), 0);
  EXPECT_GE(agreement["estimate"].get<double>(), 0.0);
  EXPECT_LE(agreement["estimate"].get<double>(), 1.0);
  // Prefix reuse (docs/exit.md): replays started after block m, and the results are bitwise those of
  // an audit that recomputes it (the compute check adds what the reused prefix did not run).
  EXPECT_GT(j["provenance"]["run"]["prefix_reuse"]["replays_reusing_block_0"].get<int64_t>(), 0);
  AuditOptions no_reuse = a;
  no_reuse.prefix_reuse = false;
  no_reuse.out_dir = dir.file("audit-no-reuse");
  no_reuse.cache_path = dir.file("audit") + "/cache.safetensors";
  const auto k = run_audit(*model, corpus, no_reuse);
  EXPECT_EQ(k["provenance"]["run"]["prefix_reuse"]["replays_reusing_block_0"].get<int64_t>(), 0);
  ASSERT_EQ(k["conditions"].size(), j["conditions"].size());
  for (size_t i = 0; i < j["conditions"].size(); ++i) {
    EXPECT_EQ(k["conditions"][i]["delta_nll"], j["conditions"][i]["delta_nll"]) << j["conditions"][i]["name"];
    EXPECT_EQ(k["conditions"][i]["compute"]["gemm_gflop_per_token_of_record"], j["conditions"][i]["compute"]["gemm_gflop_per_token_of_record"]);
  }
  // One audit per threshold: the cache written at 0.5 is refused at 0.7.
  set_controller_setting(*model, "exit_threshold", 0.7);
  a.out_dir = dir.file("audit07");
  a.cache_path = dir.file("audit") + "/cache.safetensors";
  try {
    run_audit(*model, corpus, a);
    ADD_FAILURE() << "a cache of another threshold was used";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("controller_setting"), std::string::npos) << e.what();
  }
  EXPECT_THROW(set_controller_setting(*model, "gate_value", 0.5), Error);
  // A value just below the range is named as it is, not as std::to_string's "-0.000000".
  try {
    set_controller_setting(*model, "exit_threshold", -1e-9);
    ADD_FAILURE() << "exit_threshold -1e-9 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("found -1e-09"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fca
