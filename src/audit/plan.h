// The audit's plan, printed before it starts and recorded in audit.json's provenance: how many
// windows it will run live and replayed, how many tokens and FLOPs that is, and how long it should
// take, from a probe of one live and one replayed batch on this machine; and, at the end, what it
// measured (wall time, tokens/s, GFLOP/s) beside it.
#pragma once
#include <cstdint>
#include <string>

#include "audit/cache.h"
#include "core/json.h"
#include "models/auditable.h"

namespace fca {

struct AuditPlan {
  int64_t live_windows = 0;    // the cache pass (unless reused) and the live half of exact replay
  int64_t replay_windows = 0;  // the replayed half of exact replay and every condition and repetition
  int tokens = 0;              // T
  int probe_batch = 0;         // windows in each probe pass
  double live_batch_s = 0, replay_batch_s = 0;          // probe wall time per batch
  double live_batch_flops = 0, replay_batch_flops = 0;  // counted (0 for an external model)

  int64_t planned_tokens() const { return (live_windows + replay_windows) * tokens; }
  double estimated_s() const;
  double planned_flops() const;
  nlohmann::ordered_json to_json() const;
  std::string summary() const;  // one line for the terminal
};

// Times one live pass (recording its coefficients) and one replay of them over the first
// min(batch, W) evaluation windows, with the execution counters installed.
AuditPlan plan_audit(AuditableModel& model, const WindowSet& eval, int batch, int64_t live_windows, int64_t replay_windows);

// What the audit's passes took: `flops` counted over all of them.
nlohmann::ordered_json measured_json(const AuditPlan& plan, double seconds, double flops);
std::string measured_summary(const AuditPlan& plan, double seconds, double flops);

}  // namespace fca
