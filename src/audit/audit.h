// `fca audit`: the Frozen-Controller Audit of one model (docs/audit.md). Stage 1 caches the
// live coefficients; stage 2 checks exact replay, then replays every condition with the controller
// disabled; the statistics give penalties, factor effects, retention, criteria and the variance
// decomposition. Writes audit.json and windows.csv into the output folder (audit.md is rendered from
// audit.json by report/, called by the commands).
#pragma once
#include "audit/audit_options.h"
#include "core/json.h"
#include "data/corpus.h"
#include "models/auditable.h"

namespace fca {

// Runs the audit and writes its outputs; returns the audit.json document (or, with plan_only, the plan).
nlohmann::ordered_json run_audit(AuditableModel& model, const Corpus& corpus, const AuditOptions& options);

}  // namespace fca
