#include "audit/routing_conditions.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "models/routing_record.h"

namespace fca {

const std::vector<std::string>& routing_condition_names() {
  static const std::vector<std::string> names{"correct",           "cross_input",        "token_shuffle",
                                              "cross_shuffle",     "assignment_cross_input", "assignment_shuffle",
                                              "layer_position_mean", "static_profile",    "structure_removed"};
  return names;
}

const std::vector<std::string>& routing_randomized_conditions() {
  static const std::vector<std::string> names{"cross_input",        "token_shuffle",      "cross_shuffle",
                                              "assignment_cross_input", "assignment_shuffle", "structure_removed"};
  return names;
}

std::vector<SkippedCondition> routing_skipped_conditions(const AuditableModel&, const CoefficientView&) {
  return {{"identity", "routing records have no identity coefficients"},
          {"layer_permutation", "routing records are not permuted across layers"}};
}

std::vector<int> top_indices(const std::vector<double>& v, int k) {
  std::vector<int> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return v[size_t(a)] > v[size_t(b)]; });
  order.resize(size_t(k));
  return order;
}

void AssignmentCondition::coefficients(int window, int r, CoefficientTensor& out, int slot) const {
  const CoefficientShape& s = A_.shape;
  out.copy_window(slot, A_, window);  // own weights (and own record as the starting point)
  const int32_t* from = A_.window_discrete(cross_ ? rand_.derangement(r)[size_t(window)] : window);
  for (int l = 0; l < s.layers; ++l) {
    std::vector<int> sigma(size_t(s.tokens));
    if (cross_) std::iota(sigma.begin(), sigma.end(), 0);
    else sigma = rand_.token_permutation(r, window, l, 0);
    move_layer(out, slot, l, window, from, sigma);
  }
}

void RandomRoutingCondition::coefficients(int window, int r, CoefficientTensor& out, int slot) const {
  out.copy_window(slot, A_, window);
  for (int l = 0; l < A_.shape.layers; ++l) {
    Rng rng(rand_.stream_seed(kStructureRemovedStream, r, window, l));
    draw_layer(out, slot, l, rng);
  }
}

std::unique_ptr<Condition> RoutingConditions::make(const std::string& name, const CoefficientView& A,
                                                   const AuditRandomness& rand) const {
  if (name == "correct" || name == "cross_input" || name == "token_shuffle" || name == "cross_shuffle")
    // Whole records move: the generic conditions apply (they keep no reference to the profiles).
    return make_condition(name, A, CalibrationProfiles{}, rand);
  if (name == "assignment_cross_input") return assignment(name, A, rand, true);
  if (name == "assignment_shuffle") return assignment(name, A, rand, false);
  if (name == "layer_position_mean") return make_profile_condition(name, layer_position_mean_);
  if (name == "static_profile") return make_profile_condition(name, static_profile_);
  if (name == "structure_removed") return random_routes(A, rand);
  std::string known;
  for (const auto& n : routing_condition_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("condition '" + name + "' does not apply to routing records (known: " + known + ")");
}

nlohmann::ordered_json RoutingConditions::profiles_json() const {
  nlohmann::ordered_json out;
  out["static_profile"] = static_profile_json(static_profile_);
  return out;
}

nlohmann::ordered_json routing_load_json(const CoefficientView& A, int top_k, const char* load_key, const char* note) {
  const CoefficientShape& sh = A.shape;
  return {{"kind", record_kind_name(sh.kind)},
          {"top_k", top_k},
          {"experts", sh.categories},
          {"selected_per_window", sh.selected},
          {load_key, routing_load(A)},
          {"note", note}};
}

}  // namespace fca
