// The replay sensitivity probe: exact replay shows that replaying the cached coefficients unchanged
// reproduces the live run, but a replay that ignores the coefficients it is handed (an adapter that
// runs its own controller, or a hooked module whose output the logits never use) passes that check
// too, and every intervention would then show a penalty of exactly 0: "no functional dependence"
// by construction. Before any condition, the audit replays one window batch twice, once with the
// cached coefficients and once with coefficients that differ from them at every valid coordinate
// (routing records: other assignments as well), and requires the logits to change. One mechanism
// for every family, native or external; computed from what ran, never from a model's word.
#pragma once
#include <cstdint>
#include <string>

#include "audit/cache.h"
#include "core/json.h"
#include "models/auditable.h"

namespace fca {

struct ReplayProbe {
  int first = 0, windows = 0;         // the batch probed: calibration windows [first, first + windows)
  bool by_digest = false;             // logits compared by SHA-256 (an external adapter)
  int64_t differing_logits = 0;       // logits whose bits differ (by_digest: 1 if the digests differ)
  double max_abs_delta_logit = 0;     // over finite pairs (0 when compared by digest)
  int64_t controller_evaluations = 0;  // during the two replays; must be 0
  std::string perturbation;           // what the changed coefficients were, in words
  bool sensitive() const { return differing_logits > 0; }
  nlohmann::ordered_json to_json(bool allowed_insensitive) const;
  // Why an insensitive replay stops the audit, with the likely causes.
  std::string failure() const;
};

// The probe's perturbation of a batch of coefficients, in place: continuous values v become
// v + 0.25 (1 + |v|) at every valid coordinate (a shift no coordinate can absorb); expert indices
// e become (e + 1) mod E (still distinct per token); token selections move one token later,
// cyclically (still K per window and layer).
void perturb_for_probe(CoefficientTensor& coefficients);

// Replays windows [w0, w0 + B) of `windows` with their cached coefficients A and with
// perturb_for_probe of them. The audit probes its first batch of calibration windows: they are
// never replayed by a condition, so the probe's passes cannot change what a condition replay
// reuses (prefix_reuse.h) or any result.
ReplayProbe probe_replay_sensitivity(AuditableModel& model, const WindowSet& windows, const CoefficientView& A, int w0, int B);

}  // namespace fca
