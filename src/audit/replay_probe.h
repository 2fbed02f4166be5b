// The replay sensitivity probe: exact replay shows that replaying the cached coefficients unchanged
// reproduces the live run, but a replay that ignores the coefficients it is handed (an adapter that
// runs its own controller, or a hooked module whose output the logits never use) passes that check
// too, and every intervention would then show a penalty of exactly 0: "no functional dependence"
// by construction. The same holds layer by layer: an adapter that uses the handed coefficients in
// one layer and its own controller in the others would pass a probe that changes every layer at
// once, and within a layer, an adapter that uses the handed values for one stream, or for some
// tokens, and its own controller for the rest. So before any condition, the audit replays a few
// calibration windows with the cached coefficients, then once per probe group with coefficients that
// differ from them at every valid coordinate of that group only, and requires every group's replay
// to change the logits. Groups of a continuous record: each (layer, stream), split into two
// complementary token subsets drawn at random (a fixed hash of layer, stream and token: both halves
// must move the logits, so a replay that honours only some tokens fails one of them); routing
// records: each layer; exit depths (per token, not per layer): the whole record. One mechanism for
// every family, native or external; computed from what ran, never from a model's word.
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

// One probe group: the coordinates it perturbs (layer >= 0: that layer; -1: the whole record;
// stream >= 0: that stream only; tokens 1 or 2: one of the two token subsets of token_subset, 0:
// every token).
struct ProbeGroup {
  std::string name;  // "layer 3 stream 1 tokens A", "layer 3", "every layer"
  int layer = -1;
  int stream = -1;
  int tokens = 0;
};
// The groups of a record: every (layer, stream) with a valid coordinate, twice (token subsets 1 and
// 2; once, every token, for a record of one token); routing records: every layer; exit depths: one.
std::vector<ProbeGroup> probe_groups(const CoefficientView& A);
// The token subset (1 or 2) of token t of (layer, stream) in a record of `tokens` tokens: a fixed
// hash of the three, both subsets non-empty when tokens >= 2.
int token_subset(int layer, int stream, int t, int tokens);

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
// The same at the valid coordinates of one probe group only.
void perturb_for_probe(CoefficientTensor& coefficients, const ProbeGroup& group);

// Replays windows [w0, w0 + B) of `windows` with their cached coefficients A, then once per probe
// group with perturb_for_probe of that group. The audit probes its first calibration windows: they
// are never replayed by a condition, so the probe's passes cannot change what a condition replay
// reuses (prefix_reuse.h) or any result.
ReplayProbe probe_replay_sensitivity(AuditableModel& model, const WindowSet& windows, const CoefficientView& A, int w0, int B);

}  // namespace fca
