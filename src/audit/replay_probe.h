// The replay sensitivity probe: exact replay shows that replaying the cached coefficients unchanged
// reproduces the live run, but a replay that ignores the coefficients it is handed (an adapter that
// runs its own controller, or a hooked module whose output the logits never use) passes that check
// too, and every intervention would then show a penalty of exactly 0: "no functional dependence"
// by construction. The same holds layer by layer: an adapter that uses the handed coefficients in
// one layer and its own controller in the others would pass a probe that changes every layer at
// once. So before any condition, the audit replays a few calibration windows with the cached
// coefficients, then once per probe group (each layer; the whole record for exit depths, which are
// per token, not per layer) with coefficients that differ from them at every valid coordinate of
// that group only, and requires every group's replay to change the logits. One mechanism for every
// family, native or external; computed from what ran, never from a model's word.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "audit/cache.h"
#include "core/json.h"
#include "models/auditable.h"

namespace fca {

// Calibration windows the probe replays: few, since it replays them once per layer and once more.
inline constexpr int kProbeWindows = 2;

// One probe group: the coordinates it perturbs (layer >= 0: that layer; -1: the whole record).
struct ProbeGroup {
  std::string name;  // "layer 3", "every layer"
  int layer = -1;
};
// The groups of a record: every layer with a valid coordinate (routing records: every layer); for
// exit depths, one.
std::vector<ProbeGroup> probe_groups(const CoefficientView& A);

struct ReplayProbe {
  int first = 0, windows = 0;         // the batch probed: calibration windows [first, first + windows)
  bool by_digest = false;             // logits compared by SHA-256 (an external adapter)
  struct Group {
    ProbeGroup group;
    int64_t differing_logits = 0;     // logits whose bits differ (by_digest: 1 if the digests differ)
    double max_abs_delta_logit = 0;   // over finite pairs (0 when compared by digest)
  };
  std::vector<Group> groups;
  int64_t controller_evaluations = 0;  // during every replay of the probe; must be 0
  std::string perturbation;           // what the changed coefficients were, in words
  bool sensitive() const;             // every group changed the logits
  std::vector<std::string> insensitive() const;  // the groups that did not
  nlohmann::ordered_json to_json(bool allowed_insensitive) const;
  // Why an insensitive replay stops the audit, naming the groups, with the likely causes.
  std::string failure() const;
};

// The probe's perturbation of a batch of coefficients, in place, at the valid coordinates of
// `layer` (-1: every layer): continuous values v become v + 0.25 (1 + |v|) (a shift no coordinate
// can absorb); expert indices e become (e + 1) mod E (still distinct per token); token selections
// move one token later, cyclically (still K per window and layer); exit depths (whole record only)
// one block deeper, or one shallower at full depth.
void perturb_for_probe(CoefficientTensor& coefficients, int layer = -1);

// Replays windows [w0, w0 + B) of `windows` with their cached coefficients A, then once per probe
// group with perturb_for_probe of that group. The audit probes its first calibration windows: they
// are never replayed by a condition, so the probe's passes cannot change what a condition replay
// reuses (prefix_reuse.h) or any result.
ReplayProbe probe_replay_sensitivity(AuditableModel& model, const WindowSet& windows, const CoefficientView& A, int w0, int B);

}  // namespace fca
