// The audit's conditions (docs/audit.md, "Stage 2"), written once over the coefficient
// tensor's named axes [layer, token, stream, source]: each condition writes the coefficients that
// window i receives in randomisation r. Nothing here knows which model the tensor came from.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "models/coefficient_tensor.h"

namespace fca {

// Calibration-set summaries, each stored as a one-window tensor.
struct CalibrationProfiles {
  CoefficientTensor layer_position_mean;  // mean over C of A_c[l, t, s, k]
  CoefficientTensor static_profile;       // mean over C and tokens: S[l, s, k], repeated over tokens
  CoefficientTensor structure_removed;    // model-specific (GlobalMean / SourceUniformMean)
  CoefficientTensor identity;             // the controller as a no-op
};

// The model's switchable groups (AblationGroups, models/capabilities.h): names, the disabled value of every
// grouped entry (window 0, constant over tokens), and each (layer, stream, source) entry's group.
struct DisableGroups {
  std::vector<std::string> names;
  CoefficientTensor disabled;
  std::vector<int> group_of;  // [layer][stream][source], -1: no group
  // "disabled_<name>" per group, in the model's order.
  std::vector<std::string> condition_names() const;
};
// No groups (a model without any, and routing records).
const DisableGroups& no_disable_groups();

// Layer means and position means over all windows of a view (in double, rounded once to float).
void compute_means(const CoefficientView& calibration, CoefficientTensor& layer_position_mean,
                   CoefficientTensor& static_profile);

// The paired randomness of the audit: pi_r (a derangement of the evaluation windows) and
// sigma_{r,i,l,s} (a permutation of the token axis), both pure functions of (seed, r, ...), so
// cross_input, token_shuffle and cross_shuffle share them in randomisation r.
class AuditRandomness {
 public:
  // Draws the derangements of randomisations 0 .. reps-1.
  // joint_streams: every stream of a (window, layer) shares one token permutation.
  AuditRandomness(uint64_t seed, int windows, int tokens, int reps, bool joint_streams = false);
  // pi_r: uniform over derangements (rejection sampling of uniform permutations).
  const std::vector<int>& derangement(int r) const;
  // sigma_{r,i,l,s}: uniform permutation of 0..tokens-1 (Fisher-Yates); sigma_{r,i,l,0} for every
  // stream s when the streams are joint.
  std::vector<int> token_permutation(int r, int window, int layer, int stream) const;
  // A uniform permutation of 0..n-1 for randomisation r of the layer_permutation condition.
  std::vector<int> layer_permutation(int r, int layers) const;
  // A generator for condition `stream` (distinct per condition), randomisation r, window, layer.
  uint64_t stream_seed(uint64_t stream, int r, int window, int layer) const;

 private:
  uint64_t seed_;
  int windows_, tokens_;
  bool joint_streams_;
  std::vector<std::vector<int>> derangements_;  // [reps][windows], fixed at construction
};

class Condition {
 public:
  virtual ~Condition() = default;
  virtual std::string name() const = 0;
  virtual bool randomized() const = 0;
  // Writes window i's coefficients under randomisation r (ignored when not randomized) into window
  // `slot` of `out` (shape of the evaluation tensor; both fields of routing records).
  virtual void coefficients(int window, int r, CoefficientTensor& out, int slot) const = 0;
};

// A uniform permutation of 0..n-1 from rng (Fisher-Yates).
std::vector<int> uniform_permutation(Rng& rng, int n);

// The continuous coefficients' conditions, in report order (other record kinds have their own
// tables: audit_kind.h).
const std::vector<std::string>& all_condition_names();

// A condition that hands every window window 0 of `profile` (kept by reference).
std::unique_ptr<Condition> make_profile_condition(std::string name, const CoefficientTensor& profile);

// Builds the named condition over the evaluation coefficients and calibration profiles. Throws
// Error for an unknown name, or for layer_permutation where layers differ in their valid sources.
// "disabled_<group>" names a group of `groups`.
std::unique_ptr<Condition> make_condition(const std::string& name, const CoefficientView& evaluation,
                                          const CalibrationProfiles& profiles, const AuditRandomness& randomness,
                                          const DisableGroups& groups = no_disable_groups());

// Whether layer_permutation applies: every layer has the same validity pattern over (stream, source).
bool layers_are_permutable(const CoefficientView& view);

}  // namespace fca
