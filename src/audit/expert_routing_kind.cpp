// The audit's row for expert_routing records (a MoE layer's k experts I and weights w per token;
// docs/routed.md's table): assignments move the experts and keep the token's own weights;
// structure_removed draws k distinct experts per token; the profiles take the k experts of largest
// mean weight.
#include "audit/routing_conditions.h"
#include "core/error.h"

namespace fca {
namespace {

// Writes one expert record: experts `top` with weights from `mean` (renormalised over the k slots
// when k > 1, as the model's own routing is; for k = 1 the mean weight itself).
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

class ExpertAssignment : public AssignmentCondition {
 public:
  using AssignmentCondition::AssignmentCondition;

 protected:
  void move_layer(CoefficientTensor& out, int slot, int l, int, const int32_t* from, const std::vector<int>& sigma) const override {
    const CoefficientShape& s = A_.shape;
    for (int t = 0; t < s.tokens; ++t)
      for (int j = 0; j < s.slots; ++j)
        out.discrete_at(slot, l, t, j) = from[(int64_t(l) * s.tokens + sigma[size_t(t)]) * s.slots + j];
  }
};

// k distinct experts drawn uniformly per token (the first k of a uniform permutation), weights kept.
class RandomExperts : public RandomRoutingCondition {
 public:
  using RandomRoutingCondition::RandomRoutingCondition;

 protected:
  void draw_layer(CoefficientTensor& out, int slot, int l, Rng& rng) const override {
    const CoefficientShape& s = A_.shape;
    for (int t = 0; t < s.tokens; ++t) {
      const std::vector<int> perm = uniform_permutation(rng, s.categories);
      for (int j = 0; j < s.slots; ++j) out.discrete_at(slot, l, t, j) = perm[size_t(j)];
    }
  }
};

// layer_position_mean takes per (layer, position) the k experts with the largest mean weight over C
// (unselected = 0), static_profile per layer over C and tokens.
class ExpertConditions : public RoutingConditions {
 public:
  explicit ExpertConditions(const CoefficientView& C) : RoutingConditions(C.shape) {
    const CoefficientShape& s = C.shape;
    if (C.windows <= 0) throw Error("calibration set is empty");
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
        write_expert_record(layer_position_mean_, 0, l, t, top_indices(mean, k), mean);
      }
      const std::vector<int> top = top_indices(layer_mean, k);
      for (int t = 0; t < s.tokens; ++t) write_expert_record(static_profile_, 0, l, t, top, layer_mean);
    }
  }

 protected:
  std::unique_ptr<Condition> assignment(const std::string& name, const CoefficientView& A, const AuditRandomness& rand,
                                        bool cross) const override {
    return std::make_unique<ExpertAssignment>(name, A, rand, cross);
  }
  std::unique_ptr<Condition> random_routes(const CoefficientView& A, const AuditRandomness& rand) const override {
    return std::make_unique<RandomExperts>(A, rand);
  }
};

}  // namespace

AuditKindRow expert_routing_audit_kind() {
  return {.kind = RecordKind::expert_routing,
          .condition_names = routing_condition_names(),
          .randomized = routing_randomized_conditions(),
          .skipped = routing_skipped_conditions,
          .model_conditions = nullptr,
          .prepare = [](const AuditableModel&, const CoefficientView& C) -> std::unique_ptr<KindConditions> {
            return std::make_unique<ExpertConditions>(C);
          },
          .routing_json = [](const CoefficientView& A, const CacheManifest&, const std::vector<ConditionRun>&) {
            return routing_load_json(A, A.shape.slots, "expert_load",
                                     "share of the evaluation windows' (token, slot) assignments per layer and expert");
          },
          .shortened_tokens = nullptr,
          .full_computation_condition = nullptr};
}

}  // namespace fca
