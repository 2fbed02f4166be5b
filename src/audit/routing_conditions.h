// What the two routing record kinds share in the audit (docs/routed.md, "Routing records and the
// audit"): expert_routing (experts I and weights w per token; expert_routing_kind.cpp) and
// token_selection (a 0/1 selection and weights sigmoid(s) per token; token_selection_kind.cpp) have
// the same condition names and skeletons; each kind writes its own routes. Every condition yields
// an executable routing (k distinct experts per token; exactly K selected tokens per window and
// layer) and is applied only in replay.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "audit/audit_kind.h"
#include "core/rng.h"

namespace fca {

// structure_removed's randomisation stream (distinct from conditions.h's; pi_r and sigma are
// AuditRandomness's, so that assignment_* pair with cross_input / token_shuffle).
constexpr uint64_t kStructureRemovedStream = 11;

// The routing conditions in report order (correct first), and those that draw per repetition.
const std::vector<std::string>& routing_condition_names();
const std::vector<std::string>& routing_randomized_conditions();

// Indices of the k largest values, ties to the lower index, in descending value.
std::vector<int> top_indices(const std::vector<double>& values, int k);

// assignment_cross_input / assignment_shuffle: the assignment comes from another window (pi_r) or
// from the own window with tokens permuted (sigma, one per window and layer); the kind decides what
// the token's weight becomes.
class AssignmentCondition : public Condition {
 public:
  AssignmentCondition(std::string name, const CoefficientView& evaluation, const AuditRandomness& randomness, bool cross)
      : name_(std::move(name)), A_(evaluation), rand_(randomness), cross_(cross) {}
  std::string name() const override { return name_; }
  bool randomized() const override { return true; }
  void coefficients(int window, int r, CoefficientTensor& out, int slot) const override;

 protected:
  // Window `slot` of `out` holds window `window`'s own record; token t of layer l takes the route of
  // token sigma[t] in `from`'s discrete field [layer][token][slot].
  virtual void move_layer(CoefficientTensor& out, int slot, int layer, int window, const int32_t* from,
                          const std::vector<int>& sigma) const = 0;
  std::string name_;
  CoefficientView A_;
  const AuditRandomness& rand_;
  bool cross_;
};

// structure_removed: random routes, drawn per (randomisation, window, layer) from
// kStructureRemovedStream; the kind draws a layer.
class RandomRoutingCondition : public Condition {
 public:
  RandomRoutingCondition(const CoefficientView& evaluation, const AuditRandomness& randomness)
      : A_(evaluation), rand_(randomness) {}
  std::string name() const override { return "structure_removed"; }
  bool randomized() const override { return true; }
  void coefficients(int window, int r, CoefficientTensor& out, int slot) const override;

 protected:
  // Window `slot` of `out` holds the window's own record; overwrite layer l's routes.
  virtual void draw_layer(CoefficientTensor& out, int slot, int layer, Rng& rng) const = 0;
  CoefficientView A_;
  const AuditRandomness& rand_;
};

// A routing kind's calibration profiles (one window each) and its condition table: the whole-record
// conditions of conditions.h, the two profiles, and the kind's assignment and random routes.
class RoutingConditions : public KindConditions {
 public:
  explicit RoutingConditions(const CoefficientShape& shape) : layer_position_mean_(1, shape), static_profile_(1, shape) {}
  std::unique_ptr<Condition> make(const std::string& name, const CoefficientView& evaluation,
                                  const AuditRandomness& randomness) const override;
  nlohmann::ordered_json profiles_json() const override;

 protected:
  virtual std::unique_ptr<Condition> assignment(const std::string& name, const CoefficientView& evaluation,
                                                const AuditRandomness& randomness, bool cross) const = 0;
  virtual std::unique_ptr<Condition> random_routes(const CoefficientView& evaluation, const AuditRandomness& randomness) const = 0;
  CoefficientTensor layer_position_mean_, static_profile_;
};

// audit.json's "routing" of a routing kind: kind, sizes and the load table under `load_key`.
nlohmann::ordered_json routing_load_json(const CoefficientView& evaluation, int top_k, const char* load_key, const char* note);

}  // namespace fca
