// The audit's half of the record-kind table (docs/audit.md, "Record kinds"; the models' half is
// models/record_kind.h): per kind, the conditions in report order, which of them draw a new
// randomisation per repetition, which do not apply (with why), how the calibration profiles are
// prepared and the conditions built over them, and the kind's JSON for audit.json. The audit phases
// read the row of the audited records' kind and never switch on the kind: a new record kind is one
// file (<kind>_kind.cpp here, beside record_kind_<kind>.cpp) and one row in audit_kind.cpp.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "audit/conditions.h"
#include "core/json.h"
#include "models/auditable.h"

namespace fca {

struct CacheManifest;
struct ConditionRun;

// A condition that does not apply to the audited model, and why: left out of the default list (and
// listed in audit.json's skipped_conditions), refused when asked for by name.
struct SkippedCondition {
  std::string name, reason;
};

// One audit's calibration profiles for a kind, and the conditions built over them. Built once the
// cache exists; the conditions it makes refer to it, so it outlives them.
class KindConditions {
 public:
  virtual ~KindConditions() = default;
  // The condition `name` over the cached evaluation records; Error for a name the kind does not know.
  virtual std::unique_ptr<Condition> make(const std::string& name, const CoefficientView& evaluation,
                                          const AuditRandomness& randomness) const = 0;
  // audit.json's "profiles": the calibration profiles a figure draws.
  virtual nlohmann::ordered_json profiles_json() const = 0;
};

struct AuditKindRow {
  RecordKind kind;
  std::vector<std::string> condition_names;  // report order, "correct" first
  std::vector<std::string> randomized;       // the conditions drawing a new randomisation per repetition
  // The conditions that do not apply to this model, in audit.json's order. `one_window`: the
  // model's record for one window of the audit's length (its shape and valid coordinates).
  std::vector<SkippedCondition> (*skipped)(const AuditableModel& model, const CoefficientView& one_window);
  // Conditions the model adds after the table's by default (null: none).
  std::vector<std::string> (*model_conditions)(const AuditableModel& model);
  // The calibration profiles from the cached calibration records.
  std::unique_ptr<KindConditions> (*prepare)(const AuditableModel& model, const CoefficientView& calibration);
  // audit.json's "routing": what the evaluation records say of how the model routed, with what the
  // runs measured of it (null function: no such entry).
  nlohmann::ordered_json (*routing_json)(const CoefficientView& evaluation, const CacheManifest& manifest,
                                         const std::vector<ConditionRun>& runs);
  // Kinds whose records set how many blocks each token runs (null: not such a kind): which tokens of
  // a window ran fewer than every block in its records. The replay of `full_computation_condition`
  // (every block) is compared with the live pass on those tokens (ConditionRun's agreement).
  std::vector<bool> (*shortened_tokens)(const CoefficientView& records, int window);
  const char* full_computation_condition;

  bool is_randomized(const std::string& name) const;
};

// A kind a family brings (models/record_kind.h's add_record_kind) gets its audit row here, at
// start-up; refuses a kind that has a row or that the models' table lacks. Not thread-safe.
void add_audit_kind(AuditKindRow row);

// The row of a kind, and every row in installation order.
const AuditKindRow& audit_kind_row(RecordKind kind);
const std::vector<AuditKindRow>& audit_kind_rows();

// Pieces the rows share: the static profile S[l][s][k] as audit.json writes it (null where a
// coordinate is invalid); the routing records' skipped conditions.
nlohmann::ordered_json static_profile_json(const CoefficientTensor& static_profile);
std::vector<SkippedCondition> routing_skipped_conditions(const AuditableModel& model, const CoefficientView& one_window);

// The rows, one per file.
AuditKindRow continuous_audit_kind();
AuditKindRow expert_routing_audit_kind();
AuditKindRow token_selection_audit_kind();
AuditKindRow exit_depth_audit_kind();

}  // namespace fca
