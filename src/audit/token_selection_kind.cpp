// The audit's row for token_selection records (a MoD block's 0/1 selection of K tokens and weights
// sigmoid(s) per token; docs/routed.md's table): assignments move the selection, a token selected in
// both keeping its own weight and a newly selected one taking the layer's mean calibration weight;
// structure_removed selects K uniformly drawn positions; the profiles select the K positions
// selected most often, or evenly spaced ones.
#include <algorithm>

#include "audit/routing_conditions.h"
#include "core/error.h"

namespace fca {
namespace {

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

class SelectionAssignment : public AssignmentCondition {
 public:
  SelectionAssignment(std::string name, const CoefficientView& A, const AuditRandomness& rand, bool cross,
                      const std::vector<float>& mean_selected_weight)
      : AssignmentCondition(std::move(name), A, rand, cross), mean_selected_weight_(mean_selected_weight) {}

 protected:
  void move_layer(CoefficientTensor& out, int slot, int l, int window, const int32_t* from,
                  const std::vector<int>& sigma) const override {
    const int T = A_.shape.tokens;
    std::vector<int> positions;
    for (int t = 0; t < T; ++t)
      if (from[int64_t(l) * T + sigma[size_t(t)]] == 1) positions.push_back(t);
    const int32_t* own = A_.window_discrete(window);
    const float* own_w = A_.window_data(window);
    write_selection(out, slot, l, positions, [&](int t) {
      return own[int64_t(l) * T + t] == 1 ? own_w[int64_t(l) * T + t] : mean_selected_weight_[size_t(l)];
    });
  }

 private:
  const std::vector<float>& mean_selected_weight_;
};

// K positions drawn uniformly per (window, layer), weights mean_selected_weight.
class RandomSelection : public RandomRoutingCondition {
 public:
  RandomSelection(const CoefficientView& A, const AuditRandomness& rand, const std::vector<float>& mean_selected_weight)
      : RandomRoutingCondition(A, rand), mean_selected_weight_(mean_selected_weight) {}

 protected:
  void draw_layer(CoefficientTensor& out, int slot, int l, Rng& rng) const override {
    std::vector<int> perm = uniform_permutation(rng, A_.shape.tokens);
    perm.resize(size_t(A_.shape.selected));
    write_selection(out, slot, l, perm, [&](int) { return mean_selected_weight_[size_t(l)]; });
  }

 private:
  const std::vector<float>& mean_selected_weight_;
};

// layer_position_mean selects per layer the K positions selected most often over C (ties to the
// lower position) with weight = mean over C of sigmoid(s) at the position; static_profile selects
// the evenly spaced positions floor(j T / K) with mean_selected_weight, per layer the mean over C
// of the selected tokens' weights (the weight a token that becomes selected takes).
class SelectionConditions : public RoutingConditions {
 public:
  explicit SelectionConditions(const CoefficientView& C) : RoutingConditions(C.shape) {
    const CoefficientShape& s = C.shape;
    if (C.windows <= 0) throw Error("calibration set is empty");
    const int K = s.selected, T = s.tokens;
    mean_selected_weight_.assign(size_t(s.layers), 0.0f);
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
      mean_selected_weight_[size_t(l)] = float(selected_count > 0 ? selected_sum / double(selected_count) : 0.0);
      for (int t = 0; t < T; ++t) {  // unselected tokens' weights are never read; keep the means there
        layer_position_mean_.at(0, l, t) = float(mean_weight[size_t(t)]);
        static_profile_.at(0, l, t) = mean_selected_weight_[size_t(l)];
      }
      std::vector<int> most = top_indices(frequency, K);
      std::sort(most.begin(), most.end());
      write_selection(layer_position_mean_, 0, l, most, [&](int t) { return float(mean_weight[size_t(t)]); });
      std::vector<int> even;
      for (int j = 0; j < K; ++j) even.push_back(int(int64_t(j) * T / K));
      write_selection(static_profile_, 0, l, even, [&](int) { return mean_selected_weight_[size_t(l)]; });
    }
  }

 protected:
  std::unique_ptr<Condition> assignment(const std::string& name, const CoefficientView& A, const AuditRandomness& rand,
                                        bool cross) const override {
    return std::make_unique<SelectionAssignment>(name, A, rand, cross, mean_selected_weight_);
  }
  std::unique_ptr<Condition> random_routes(const CoefficientView& A, const AuditRandomness& rand) const override {
    return std::make_unique<RandomSelection>(A, rand, mean_selected_weight_);
  }

 private:
  std::vector<float> mean_selected_weight_;
};

}  // namespace

AuditKindRow token_selection_audit_kind() {
  return {.kind = RecordKind::token_selection,
          .condition_names = routing_condition_names(),
          .randomized = routing_randomized_conditions(),
          .skipped = routing_skipped_conditions,
          .model_conditions = nullptr,
          .prepare = [](const AuditableModel&, const CoefficientView& C) -> std::unique_ptr<KindConditions> {
            return std::make_unique<SelectionConditions>(C);
          },
          .routing_json = [](const CoefficientView& A, const CacheManifest&, const std::vector<ConditionRun>&) {
            return routing_load_json(A, 0, "selection_frequency",
                                     "share of the evaluation windows selecting each position, per routed block");
          },
          .shortened_tokens = nullptr,
          .full_computation_condition = nullptr};
}

}  // namespace fca
