// Optional capabilities of an AuditableModel: what one or a few families offer beyond the core
// interface (models/auditable.h). A family's auditable offers a capability by inheriting its
// interface beside AuditableModel; the audit, fca trace and the CLI ask for it by type
// (capability<C>(model), a cross-cast) and do without it where the model lacks it. So a family with
// a need of its own adds a capability here or in its folder, and the core does not grow
// (AddingAFamily.TheAuditInterfaceDoesNotGrow holds its size).
#pragma once
#include <string>
#include <vector>

#include "core/json.h"
#include "models/auditable.h"
#include "models/coefficient_tensor.h"

namespace fca {

// A named intermediate of the last pass for `fca trace`: [B, T, ...] float values under the stable
// name the family's docs give it ("hidden.3"), viewed in place in the model's run state.
struct TraceTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data;
};

// What a replay of some records runs, by the family's own formulas (never by counting): GEMM
// FLOPs, and blocks run summed over the tokens (an exit model's depth sum).
struct RecordCompute {
  double gemm_flops = 0;
  int64_t token_blocks = 0;
  int64_t tokens = 0;
  double prefix_gemm_flops = 0;  // of gemm_flops, what a replay reusing the kept prefix does not run
};

// The capability C of `model`, or null where its family does not offer it.
template <typename C>
C* capability(AuditableModel& model) {
  return dynamic_cast<C*>(&model);
}
template <typename C>
const C* capability(const AuditableModel& model) {
  return dynamic_cast<const C*>(&model);
}

// A run-time setting of the controller that its records depend on (exit: the threshold lambda). A
// coefficient cache records it and is refused for another value.
class ControllerSetting {
 public:
  virtual ~ControllerSetting() = default;
  // The setting as the cache records it, e.g. "exit_threshold 0.9".
  virtual std::string controller_setting() const = 0;
  // Sets the setting `key` for the live runs from now on; throws Error for a key the model lacks or
  // a value out of its range.
  virtual void set_controller_setting(const std::string& key, double value) = 0;
};
// Sets `key` on a model that offers a controller setting; throws Error naming the family where it
// offers none.
void set_controller_setting(AuditableModel& model, const std::string& key, double value);
// The model's controller setting, or "" where it offers none.
std::string controller_setting_of(const AuditableModel& model);

// Records that change how much a replay runs (early exit): what a replay of `records` (windows 0 ..
// windows-1, replayed as one batch) runs, by the family's own formulas. The audit reports it beside
// each condition's DeltaNLL and checks it against what the replays counted.
class RecordDependentCompute {
 public:
  virtual ~RecordDependentCompute() = default;
  virtual RecordCompute record_compute(const CoefficientView& records, int windows) const = 0;
};

// A constraint the live coefficients satisfy by construction (mHC: doubly stochastic mixing) that an
// intervention may break. The audit reports, per condition, the largest violation of what it
// replayed.
class CoefficientConstraint {
 public:
  virtual ~CoefficientConstraint() = default;
  // What the constraint is, in words; empty where this model's configuration has none.
  virtual std::string coefficient_constraint() const = 0;
  // One window's largest violation.
  virtual double constraint_violation(const CoefficientView& coefficients, int window) const = 0;
};

// Diagnostics computable from the cached evaluation coefficients alone (hyper: composite gain,
// unfolded connection matrix, distance of the mixing from the identity), written into audit.json as
// "diagnostics".
class CacheDiagnostics {
 public:
  virtual ~CacheDiagnostics() = default;
  virtual nlohmann::ordered_json cache_diagnostics(const CoefficientView& evaluation) const = 0;
};

// Groups of coefficient entries that can be switched off one at a time: the audit's
// "disabled_<group>" conditions replay the cached coefficients with one group's entries replaced by
// their disabled values, every other entry as cached (hyper, docs/hyper.md: [mHC]'s ablation with
// the read 1/n, the writes 1, the mixing I).
class AblationGroups {
 public:
  virtual ~AblationGroups() = default;
  virtual std::vector<std::string> disable_groups() const = 0;
  // Writes window 0 of `values` (constant over tokens) with every grouped entry's disabled value.
  virtual void disabled_profile(CoefficientTensor& values) const = 0;
  // An entry's group index, or -1 for entries no group switches.
  virtual int disable_group_of(int layer, int stream, int source) const = 0;
};

// What fca trace shows of a pass beyond tokens, logits and coefficients.
class Traceable {
 public:
  virtual ~Traceable() = default;
  // Asked before set_max_batch and the pass: keep every intermediate trace_tensors names (hyper:
  // every site's streams, where audits keep two alternating buffers); takes effect at the next
  // set_max_batch. Families whose run state always keeps them ignore it.
  virtual void set_keep_intermediates(bool keep) = 0;
  // After a pass of B windows of T tokens: the per-position cross-entropy [B * T] where the model
  // keeps it (null: the trace computes it from the logits).
  virtual const float* last_position_losses() const = 0;
  // The family's named intermediates (hidden states; `live`: the pass ran the controller, whose
  // inputs some families also show).
  virtual std::vector<TraceTensor> trace_tensors(int B, int T, bool live) const = 0;
};

}  // namespace fca
