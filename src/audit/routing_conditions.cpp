#include "audit/routing_conditions.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace fca {
namespace {

// Randomisation streams of the routing conditions (the shared ones, pi_r and sigma, live in
// AuditRandomness and are reused, so that assignment_* pair with cross_input / token_shuffle).
constexpr uint64_t kStructureRemovedStream = 11;

// Indices of the k largest values, ties to the lower index, in descending value.
std::vector<int> top_indices(const std::vector<double>& v, int k) {
  std::vector<int> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return v[size_t(a)] > v[size_t(b)]; });
  order.resize(size_t(k));
  return order;
}

// Writes one expert record: experts `top` with weights from `mean` (renormalised when k > 1).
void write_expert_record(CoefficientTensor& out, int window, int layer, int token, const std::vector<int>& top,
                         const std::vector<double>& mean) {
  const int k = int(top.size());
  double sum = 0;
  for (int e : top) sum += mean[size_t(e)];
  for (int j = 0; j < k; ++j) {
    out.discrete_at(window, layer, token, j) = top[size_t(j)];
    const double w = mean[size_t(top[size_t(j)])];
    out.at(window, layer, token, 0, j) = float(k > 1 ? (sum > 0 ? w / sum : 1.0 / k) : w);
  }
}

// The selection of window `slot` of `out` in layer l: `positions` selected, the rest not; selected
// tokens take weight(t).
template <typename Weight>
void write_selection(CoefficientTensor& out, int slot, int layer, const std::vector<int>& positions, Weight weight) {
  const int T = out.shape().tokens;
  for (int t = 0; t < T; ++t) out.discrete_at(slot, layer, t, 0) = 0;
  for (int t : positions) {
    out.discrete_at(slot, layer, t, 0) = 1;
    out.at(slot, layer, t) = weight(t);
  }
}

// assignment_cross_input / assignment_shuffle: the assignment comes from another window (pi_r) or
// from the own window with tokens permuted (sigma); the weights stay the token's own (MoE), or, for
// MoD, a token selected in both keeps its own weight and a newly selected one takes the layer's
// mean calibration weight.
class AssignmentCondition : public Condition {
 public:
  AssignmentCondition(std::string name, const CoefficientView& A, const RoutingProfiles& p, const AuditRandomness& rand,
                      bool cross)
      : name_(std::move(name)), A_(A), p_(p), rand_(rand), cross_(cross) {}
  std::string name() const override { return name_; }
  bool randomized() const override { return true; }
  void coefficients(int window, int r, CoefficientTensor& out, int slot) const override {
    const CoefficientShape& s = A_.shape;
    out.copy_window(slot, A_, window);  // own weights (and own record as the starting point)
    const int from = cross_ ? rand_.derangement(r)[size_t(window)] : window;
    const int32_t* src = A_.window_discrete(from);
    for (int l = 0; l < s.layers; ++l) {
      std::vector<int> sigma(size_t(s.tokens));
      if (cross_) std::iota(sigma.begin(), sigma.end(), 0);
      else sigma = rand_.token_permutation(r, window, l, 0);
      if (s.kind == RecordKind::expert_routing) {
        for (int t = 0; t < s.tokens; ++t)
          for (int j = 0; j < s.slots; ++j)
            out.discrete_at(slot, l, t, j) = src[(int64_t(l) * s.tokens + sigma[size_t(t)]) * s.slots + j];
      } else {
        std::vector<int> positions;
        for (int t = 0; t < s.tokens; ++t)
          if (src[int64_t(l) * s.tokens + sigma[size_t(t)]] == 1) positions.push_back(t);
        const int32_t* own = A_.window_discrete(window);
        const float* own_w = A_.window_data(window);
        write_selection(out, slot, l, positions, [&](int t) {
          return own[int64_t(l) * s.tokens + t] == 1 ? own_w[int64_t(l) * s.tokens + t] : p_.mean_selected_weight[size_t(l)];
        });
      }
    }
  }

 private:
  std::string name_;
  CoefficientView A_;
  const RoutingProfiles& p_;
  const AuditRandomness& rand_;
  bool cross_;
};

// structure_removed on routing: MoE, k distinct experts drawn uniformly per token, weights kept;
// MoD, K positions drawn uniformly per (window, layer), weights mean_selected_weight.
class RandomRoutingCondition : public Condition {
 public:
  RandomRoutingCondition(const CoefficientView& A, const RoutingProfiles& p, const AuditRandomness& rand)
      : A_(A), p_(p), rand_(rand) {}
  std::string name() const override { return "structure_removed"; }
  bool randomized() const override { return true; }
  void coefficients(int window, int r, CoefficientTensor& out, int slot) const override {
    const CoefficientShape& s = A_.shape;
    out.copy_window(slot, A_, window);
    for (int l = 0; l < s.layers; ++l) {
      Rng rng(rand_.stream_seed(kStructureRemovedStream, r, window, l));
      if (s.kind == RecordKind::expert_routing) {
        for (int t = 0; t < s.tokens; ++t) {
          const std::vector<int> perm = uniform_permutation(rng, s.categories);  // its first k: k distinct experts
          for (int j = 0; j < s.slots; ++j) out.discrete_at(slot, l, t, j) = perm[size_t(j)];
        }
      } else {
        std::vector<int> perm = uniform_permutation(rng, s.tokens);
        perm.resize(size_t(s.selected));
        write_selection(out, slot, l, perm, [&](int) { return p_.mean_selected_weight[size_t(l)]; });
      }
    }
  }

 private:
  CoefficientView A_;
  const RoutingProfiles& p_;
  const AuditRandomness& rand_;
};

class FixedRecordCondition : public Condition {
 public:
  FixedRecordCondition(std::string name, const CoefficientTensor& record) : name_(std::move(name)), record_(record) {}
  std::string name() const override { return name_; }
  bool randomized() const override { return false; }
  void coefficients(int, int, CoefficientTensor& out, int slot) const override { out.copy_window(slot, record_.view(), 0); }

 private:
  std::string name_;
  const CoefficientTensor& record_;
};

}  // namespace

const std::vector<std::string>& routing_condition_names() {
  static const std::vector<std::string> names{"correct",           "cross_input",        "token_shuffle",
                                              "cross_shuffle",     "assignment_cross_input", "assignment_shuffle",
                                              "layer_position_mean", "static_profile",    "structure_removed"};
  return names;
}

RoutingProfiles routing_profiles(const CoefficientView& C) {
  const CoefficientShape& s = C.shape;
  if (C.windows <= 0) throw Error("calibration set is empty");
  RoutingProfiles p{CoefficientTensor(1, s), CoefficientTensor(1, s), {}};
  if (s.kind == RecordKind::expert_routing) {
    const int E = s.categories, k = s.slots;
    for (int l = 0; l < s.layers; ++l) {
      std::vector<double> layer_mean(size_t(E), 0.0);
      for (int t = 0; t < s.tokens; ++t) {
        std::vector<double> mean(size_t(E), 0.0);  // dense weights, unselected = 0, mean over C
        for (int w = 0; w < C.windows; ++w) {
          const int64_t rec = int64_t(l) * s.tokens + t;
          for (int j = 0; j < k; ++j)
            mean[size_t(C.window_discrete(w)[rec * k + j])] += C.window_data(w)[rec * s.sources + j] / double(C.windows);
        }
        for (int e = 0; e < E; ++e) layer_mean[size_t(e)] += mean[size_t(e)] / s.tokens;
        write_expert_record(p.layer_position_mean, 0, l, t, top_indices(mean, k), mean);
      }
      const std::vector<int> top = top_indices(layer_mean, k);
      for (int t = 0; t < s.tokens; ++t) write_expert_record(p.static_profile, 0, l, t, top, layer_mean);
    }
    return p;
  }
  if (s.kind != RecordKind::token_selection) throw Error("routing profiles need routing records, found " + s.to_string());
  const int K = s.selected, T = s.tokens;
  p.mean_selected_weight.assign(size_t(s.layers), 0.0f);
  for (int l = 0; l < s.layers; ++l) {
    std::vector<double> frequency(size_t(T), 0.0), mean_weight(size_t(T), 0.0);
    double selected_sum = 0;
    int64_t selected_count = 0;
    for (int w = 0; w < C.windows; ++w)
      for (int t = 0; t < T; ++t) {
        const int64_t rec = int64_t(l) * T + t;
        const double weight = C.window_data(w)[rec];
        mean_weight[size_t(t)] += weight / C.windows;
        if (C.window_discrete(w)[rec] == 1) {
          frequency[size_t(t)] += 1;
          selected_sum += weight;
          ++selected_count;
        }
      }
    p.mean_selected_weight[size_t(l)] = float(selected_count > 0 ? selected_sum / double(selected_count) : 0.0);
    for (int t = 0; t < T; ++t) {  // unselected tokens' weights are never read; keep the means there
      p.layer_position_mean.at(0, l, t) = float(mean_weight[size_t(t)]);
      p.static_profile.at(0, l, t) = p.mean_selected_weight[size_t(l)];
    }
    std::vector<int> most = top_indices(frequency, K);
    std::sort(most.begin(), most.end());
    write_selection(p.layer_position_mean, 0, l, most, [&](int t) { return float(mean_weight[size_t(t)]); });
    std::vector<int> even;
    for (int j = 0; j < K; ++j) even.push_back(int(int64_t(j) * T / K));
    write_selection(p.static_profile, 0, l, even, [&](int) { return p.mean_selected_weight[size_t(l)]; });
  }
  return p;
}

std::unique_ptr<Condition> make_routing_condition(const std::string& name, const CoefficientView& A,
                                                  const RoutingProfiles& p, const AuditRandomness& rand) {
  CalibrationProfiles unused;
  if (name == "correct" || name == "cross_input" || name == "token_shuffle" || name == "cross_shuffle")
    return make_condition(name, A, unused, rand);  // whole records move: the generic conditions apply
  if (name == "assignment_cross_input") return std::make_unique<AssignmentCondition>(name, A, p, rand, true);
  if (name == "assignment_shuffle") return std::make_unique<AssignmentCondition>(name, A, p, rand, false);
  if (name == "layer_position_mean") return std::make_unique<FixedRecordCondition>(name, p.layer_position_mean);
  if (name == "static_profile") return std::make_unique<FixedRecordCondition>(name, p.static_profile);
  if (name == "structure_removed") return std::make_unique<RandomRoutingCondition>(A, p, rand);
  std::string known;
  for (const auto& n : routing_condition_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("condition '" + name + "' does not apply to routing records (known: " + known + ")");
}

}  // namespace fca
