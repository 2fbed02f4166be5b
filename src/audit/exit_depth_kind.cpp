#include "audit/exit_depth_kind.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "audit/audit_kind.h"
#include "audit/phases.h"
#include "core/error.h"
#include "core/undefined_statistic.h"

namespace fca {
namespace {

constexpr uint64_t kMeanDepthStream = 12;  // structure_removed's position draws (distinct from the routing stream)

class ExitCondition : public Condition {
 public:
  ExitCondition(std::string name, bool randomized, const CoefficientView& A) : name_(std::move(name)), randomized_(randomized), A_(A) {}
  std::string name() const override { return name_; }
  bool randomized() const override { return randomized_; }
  void coefficients(int window, int r, CoefficientTensor& out, int slot) const override {
    write_exit_depths(out, slot, depths(window, r));
  }

 protected:
  virtual std::vector<int> depths(int window, int r) const = 0;
  std::string name_;
  bool randomized_;
  CoefficientView A_;
};

// cross_input, token_shuffle, cross_shuffle: d_{pi_r(i), sigma_{r,i}(t)} with either part the
// identity. One sigma per (r, window), used for every exit point (docs/exit.md: the generic per-layer
// sigma would break monotonicity).
class MovedDepths : public ExitCondition {
 public:
  MovedDepths(std::string name, const CoefficientView& A, const AuditRandomness& rand, bool cross, bool shuffle)
      : ExitCondition(std::move(name), true, A), rand_(rand), cross_(cross), shuffle_(shuffle) {}

 protected:
  std::vector<int> depths(int window, int r) const override {
    const std::vector<int> from = exit_depths(A_, cross_ ? rand_.derangement(r)[size_t(window)] : window);
    if (!shuffle_) return from;
    const std::vector<int> sigma = rand_.token_permutation(r, window, 0, 0);
    std::vector<int> d(from.size());
    for (size_t t = 0; t < d.size(); ++t) d[t] = from[size_t(sigma[t])];
    return d;
  }

 private:
  const AuditRandomness& rand_;
  bool cross_, shuffle_;
};

// A fixed record for every window (PositionDepth, DepthHistogram, FullDepth).
class FixedDepths : public ExitCondition {
 public:
  FixedDepths(std::string name, const CoefficientView& A, std::vector<int> d) : ExitCondition(std::move(name), false, A), d_(std::move(d)) {}

 protected:
  std::vector<int> depths(int, int) const override { return d_; }

 private:
  std::vector<int> d_;
};

// structure_removed (MeanDepth): per (r, window), n_hi = round(T (d-bar - floor d-bar)) uniformly
// drawn positions run ceil(d-bar) blocks, the rest floor(d-bar).
class MeanDepth : public ExitCondition {
 public:
  MeanDepth(const CoefficientView& A, double mean, const AuditRandomness& rand)
      : ExitCondition("structure_removed", true, A), mean_(mean), rand_(rand) {}

 protected:
  std::vector<int> depths(int window, int r) const override {
    const int T = A_.shape.tokens;
    const int lo = int(std::floor(mean_));
    const int n_hi = lo == mean_ ? 0 : int(std::llround(double(T) * (mean_ - lo)));
    Rng rng(rand_.stream_seed(kMeanDepthStream, r, window, 0));
    const std::vector<int> order = uniform_permutation(rng, T);
    std::vector<int> d(size_t(T), lo);
    for (int j = 0; j < n_hi; ++j) d[size_t(order[size_t(j)])] = lo + 1;
    return d;
  }

 private:
  double mean_;
  const AuditRandomness& rand_;
};

// depth_inverted: the window's own multiset in reverse order of (depth, position).
class InvertedDepths : public ExitCondition {
 public:
  explicit InvertedDepths(const CoefficientView& A) : ExitCondition("depth_inverted", false, A) {}

 protected:
  std::vector<int> depths(int window, int) const override {
    const std::vector<int> own = exit_depths(A_, window);
    const int T = int(own.size());
    std::vector<int> rank(static_cast<size_t>(T)), sorted = own;
    std::iota(rank.begin(), rank.end(), 0);
    std::stable_sort(rank.begin(), rank.end(), [&](int a, int b) { return own[size_t(a)] < own[size_t(b)]; });
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> d(static_cast<size_t>(T));
    for (int r = 0; r < T; ++r) d[size_t(rank[size_t(r)])] = sorted[size_t(T - 1 - r)];
    return d;
  }
};

}  // namespace

const std::vector<std::string>& exit_condition_names() {
  static const std::vector<std::string> names{"correct",      "cross_input",         "token_shuffle",
                                              "cross_shuffle", "layer_position_mean", "static_profile",
                                              "structure_removed", "identity",          "depth_inverted"};
  return names;
}

ExitProfiles exit_profiles(const CoefficientView& C) {
  const CoefficientShape& s = C.shape;
  if (C.windows <= 0) throw Error("calibration set is empty");
  const int T = s.tokens, L = s.layers + 1;
  const int64_t W = C.windows;
  std::vector<int64_t> position_sum(size_t(T), 0), count(size_t(L + 1), 0);
  for (int w = 0; w < C.windows; ++w) {
    const std::vector<int> d = exit_depths(C, w);
    for (int t = 0; t < T; ++t) {
      position_sum[size_t(t)] += d[size_t(t)];
      ++count[size_t(d[size_t(t)])];
    }
  }
  ExitProfiles p{CoefficientTensor(1, s), CoefficientTensor(1, s), 0.0};
  // PositionDepth: total round(sum_t m_t) (halves up), base floor(S_t / W), the units left to the
  // largest remainders S_t mod W, ties to the lower position.
  int64_t S = 0;
  for (int64_t v : position_sum) S += v;
  const int64_t total = (2 * S + W) / (2 * W);
  std::vector<int> position(static_cast<size_t>(T));
  int64_t assigned = 0;
  for (int t = 0; t < T; ++t) {
    position[size_t(t)] = int(position_sum[size_t(t)] / W);
    assigned += position[size_t(t)];
  }
  std::vector<int> order(static_cast<size_t>(T));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return position_sum[size_t(a)] % W > position_sum[size_t(b)] % W; });
  for (int64_t j = 0; j < total - assigned; ++j) ++position[size_t(order[size_t(j)])];
  write_exit_depths(p.position_depth, 0, position);
  // DepthHistogram: n_d by largest remainder (count_d T mod (W T)), ties to the deeper class; then
  // position t takes the class with the largest deficit n_d (t+1) - placed_d T, ties to the deeper.
  const int64_t tokens = W * T;
  std::vector<int64_t> n(size_t(L + 1), 0);
  int64_t placed_total = 0;
  for (int d = 1; d <= L; ++d) {
    n[size_t(d)] = count[size_t(d)] * T / tokens;
    placed_total += n[size_t(d)];
  }
  std::vector<int> classes;
  for (int d = L; d >= 1; --d) classes.push_back(d);  // deeper first: a stable sort keeps ties to the deeper
  std::stable_sort(classes.begin(), classes.end(),
                   [&](int a, int b) { return count[size_t(a)] * T % tokens > count[size_t(b)] * T % tokens; });
  for (int64_t j = 0; j < T - placed_total; ++j) ++n[size_t(classes[size_t(j)])];
  std::vector<int64_t> placed(size_t(L + 1), 0);
  std::vector<int> histogram(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) {
    int best = -1;
    int64_t best_deficit = 0;
    for (int d = L; d >= 1; --d) {  // deeper first: strict > keeps ties to the deeper
      const int64_t deficit = n[size_t(d)] * (t + 1) - placed[size_t(d)] * T;
      if (best < 0 || deficit > best_deficit) best = d, best_deficit = deficit;
    }
    histogram[size_t(t)] = best;
    ++placed[size_t(best)];
  }
  write_exit_depths(p.depth_histogram, 0, histogram);
  p.mean_depth = double(S) / double(tokens);
  return p;
}

std::unique_ptr<Condition> make_exit_condition(const std::string& name, const CoefficientView& A, const ExitProfiles& p,
                                               const AuditRandomness& rand) {
  if (name == "correct") return make_condition(name, A, CalibrationProfiles{}, rand);  // keeps no reference to the profiles
  if (name == "cross_input") return std::make_unique<MovedDepths>(name, A, rand, true, false);
  if (name == "token_shuffle") return std::make_unique<MovedDepths>(name, A, rand, false, true);
  if (name == "cross_shuffle") return std::make_unique<MovedDepths>(name, A, rand, true, true);
  if (name == "layer_position_mean") return std::make_unique<FixedDepths>(name, A, exit_depths(p.position_depth.view(), 0));
  if (name == "static_profile") return std::make_unique<FixedDepths>(name, A, exit_depths(p.depth_histogram.view(), 0));
  if (name == "identity") return std::make_unique<FixedDepths>(name, A, std::vector<int>(size_t(A.shape.tokens), A.shape.layers + 1));
  if (name == "structure_removed") return std::make_unique<MeanDepth>(A, p.mean_depth, rand);
  if (name == "depth_inverted") return std::make_unique<InvertedDepths>(A);
  std::string known;
  for (const auto& n : exit_condition_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("condition '" + name + "' does not apply to exit-depth records (known: " + known + ")");
}

namespace {

// The condition that runs every block for every token (FullDepth): exit agreement compares with it.
constexpr const char* kFullDepthCondition = "identity";

class ExitConditions : public KindConditions {
 public:
  explicit ExitConditions(const CoefficientView& C) : profiles_(exit_profiles(C)) {}
  std::unique_ptr<Condition> make(const std::string& name, const CoefficientView& A, const AuditRandomness& rand) const override {
    return make_exit_condition(name, A, profiles_, rand);
  }
  nlohmann::ordered_json profiles_json() const override {
    return {{"layer_position_mean", exit_depths(profiles_.position_depth.view(), 0)},
            {"static_profile", exit_depths(profiles_.depth_histogram.view(), 0)},
            {"structure_removed_mean_depth", profiles_.mean_depth},
            {"note", "depths per position: PositionDepth (layer_position_mean) and DepthHistogram (static_profile), from the "
                     "calibration windows by largest remainder; structure_removed draws MeanDepth's ceil/floor per window"}};
  }

 private:
  ExitProfiles profiles_;
};

// docs/exit.md, exit_agreement: of the evaluation tokens that exit before the last block, the share whose
// argmax equals their argmax in the identity (full depth) replay.
nlohmann::ordered_json exit_agreement_json(const std::vector<ConditionRun>& runs) {
  for (const auto& r : runs) {
    if (r.name != kFullDepthCondition) continue;
    if (r.exited == 0) return {{"estimate", nullptr}, {"note", undefined_note("no evaluation token exits before the last block")}};
    return {{"estimate", double(r.exit_agreeing) / double(r.exited)}, {"agreeing", r.exit_agreeing}, {"exited", r.exited}};
  }
  return {{"estimate", nullptr}, {"note", undefined_note("the identity condition did not run")}};
}

// The evaluation windows' depth histogram [L], mean depth, mean depth by position [T] and
// continuation probability P(d > k) per exit point.
nlohmann::ordered_json exit_routing_json(const CoefficientView& A, const CacheManifest& manifest,
                                         const std::vector<ConditionRun>& runs) {
  const CoefficientShape& sh = A.shape;
  const int T = sh.tokens, L = sh.layers + 1;
  std::vector<double> histogram(size_t(L), 0.0), by_position(size_t(T), 0.0), continuation(size_t(sh.layers), 0.0);
  const double N = double(A.windows) * T;
  double sum = 0;
  for (int w = 0; w < A.windows; ++w) {
    const std::vector<int> d = exit_depths(A, w);
    for (int t = 0; t < T; ++t) {
      histogram[size_t(d[size_t(t)] - 1)] += 1.0 / N;
      by_position[size_t(t)] += double(d[size_t(t)]) / A.windows;
      sum += d[size_t(t)];
      for (int k = 1; k <= sh.layers; ++k) continuation[size_t(k - 1)] += d[size_t(t)] > k ? 1.0 / N : 0.0;
    }
  }
  return {{"exit_histogram", histogram},
          {"mean_depth", sum / N},
          {"mean_depth_by_position", by_position},
          {"continuation", continuation},
          {"controller_setting", manifest.controller_setting},
          {"min_exit", sh.min_exit},
          {"exit_agreement", exit_agreement_json(runs)},
          {"note", "evaluation windows, live pass: exit_histogram[d-1] = share of tokens of depth d; continuation[k-1] = "
                   "P(d > k) at exit point k"}};
}

// The tokens whose depth is below the full L = exit points + 1.
std::vector<bool> exited_tokens(const CoefficientView& records, int window) {
  const std::vector<int> d = exit_depths(records, window);
  std::vector<bool> exited(d.size());
  for (size_t t = 0; t < d.size(); ++t) exited[t] = d[t] < records.shape.layers + 1;
  return exited;
}

}  // namespace

AuditKindRow exit_depth_audit_kind() {
  return {.kind = RecordKind::exit_depth,
          .condition_names = exit_condition_names(),
          .randomized = {"cross_input", "token_shuffle", "cross_shuffle", "structure_removed"},
          .skipped =
              [](const AuditableModel&, const CoefficientView&) -> std::vector<SkippedCondition> {
            return {{"assignment_cross_input", "exit records carry no continuous value that replay reads"},
                    {"assignment_shuffle", "exit records carry no continuous value that replay reads"},
                    {"layer_permutation", "exit points are ordered: a depth record is not permuted across layers"}};
          },
          .model_conditions = nullptr,
          .prepare = [](const AuditableModel&, const CoefficientView& C) -> std::unique_ptr<KindConditions> {
            return std::make_unique<ExitConditions>(C);
          },
          .routing_json = exit_routing_json,
          .shortened_tokens = exited_tokens,
          .full_computation_condition = kFullDepthCondition};
}

}  // namespace fca
