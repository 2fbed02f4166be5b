#include "audit/replay_probe.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "models/record_kind.h"

namespace fca {

namespace {

uint64_t mix64(uint64_t x) {  // SplitMix64's finaliser: a fixed, well-spread hash
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t token_hash(int layer, int stream, int t) { return mix64((uint64_t(layer) << 42) ^ (uint64_t(stream) << 21) ^ uint64_t(t)); }

}  // namespace

int token_subset(int layer, int stream, int t, int tokens) {
  // Both subsets must be non-empty: where the hash puts every token in one, tokens 0 and 1 split.
  bool all_same = true;
  const uint64_t first = token_hash(layer, stream, 0) & 1;
  for (int u = 1; u < tokens && all_same; ++u) all_same = (token_hash(layer, stream, u) & 1) == first;
  if (all_same) return t == 0 ? 1 : 2;
  return 1 + int(token_hash(layer, stream, t) & 1);
}

std::vector<ProbeGroup> probe_groups(const CoefficientView& A) {
  const CoefficientShape& s = A.shape;
  const RecordKindRow& row = record_kind_row(s.kind);
  if (row.whole_record_probe != nullptr) return {{row.whole_record_probe, -1}};
  std::vector<ProbeGroup> groups;
  for (int l = 0; l < s.layers; ++l) {
    if (row.discrete) {  // routing records perturb the discrete field of every layer
      groups.push_back({"layer " + std::to_string(l), l});
      continue;
    }
    for (int st = 0; st < s.streams; ++st) {
      bool any = false;
      for (int k = 0; k < s.sources && !any; ++k) any = A.valid(l, st, k);
      if (!any) continue;
      const std::string name = "layer " + std::to_string(l) + (s.streams > 1 ? " stream " + std::to_string(st) : "");
      if (s.tokens < 2) {
        groups.push_back({name, l, st, 0});
        continue;
      }
      groups.push_back({name + " tokens A", l, st, 1});
      groups.push_back({name + " tokens B", l, st, 2});
    }
  }
  return groups;
}

void perturb_for_probe(CoefficientTensor& c, const ProbeGroup& group) {
  const CoefficientShape& s = c.shape();
  const int l0 = group.layer < 0 ? 0 : group.layer, l1 = group.layer < 0 ? s.layers : group.layer + 1;
  const int s0 = group.stream < 0 ? 0 : group.stream, s1 = group.stream < 0 ? s.streams : group.stream + 1;
  for (int w = 0; w < c.windows(); ++w)
    for (int l = l0; l < l1; ++l)
      for (int t = 0; t < s.tokens; ++t)
        for (int st = s0; st < s1; ++st) {
          if (group.tokens != 0 && token_subset(l, st, t, s.tokens) != group.tokens) continue;
          for (int k = 0; k < s.sources; ++k)
            if (c.valid(l, st, k)) {
              float& v = c.at(w, l, t, st, k);
              v = v + 0.25f * (1.0f + std::abs(v));
            }
        }
  // The discrete fields (expert indices, token selections, depths) move with whole-layer groups.
  if (const auto perturb_discrete = record_kind_row(s.kind).perturb_discrete; perturb_discrete && group.stream < 0 && group.tokens == 0)
    perturb_discrete(c, group.layer);
}

void perturb_for_probe(CoefficientTensor& c, int layer) { perturb_for_probe(c, ProbeGroup{"", layer, -1, 0}); }

ReplayProbe probe_replay_sensitivity(AuditableModel& model, const WindowSet& windows, const CoefficientView& A, int w0, int B) {
  ReplayProbe p;
  const int T = windows.tokens;
  p.first = w0;
  p.windows = B;
  CoefficientTensor cached = model.make_coefficients(B, T);
  for (int b = 0; b < B; ++b) cached.copy_window(b, A, w0 + b);
  const int32_t* inputs = windows.inputs.data() + int64_t(w0) * T;
  const int32_t* targets = windows.targets.data() + int64_t(w0) * T;
  const int64_t before = model.replay_controller_evaluations();
  std::vector<double> nll(static_cast<size_t>(B));
  // Every pass starts from NaN logits: a replay that writes none shows no difference (and fails).
  model.poison_logits(B, T);
  model.run_replay(inputs, targets, B, T, cached, nll.data());
  p.by_digest = model.last_logits() == nullptr;
  const size_t n = size_t(B) * T * size_t(model.vocab());
  std::vector<float> reference;
  std::string reference_digest;
  if (p.by_digest) reference_digest = model.last_logits_sha256();
  else reference.assign(model.last_logits(), model.last_logits() + n);

  for (const ProbeGroup& group : probe_groups(A)) {
    CoefficientTensor changed = model.make_coefficients(B, T);
    for (int b = 0; b < B; ++b) changed.copy_window(b, A, w0 + b);
    perturb_for_probe(changed, group);
    model.poison_logits(B, T);
    model.run_replay(inputs, targets, B, T, changed, nll.data());
    ReplayProbe::Group g{group, 0, 0};
    if (p.by_digest) {
      g.differing_logits = model.last_logits_sha256() != reference_digest ? 1 : 0;
    } else {
      const float* logits = model.last_logits();
      for (size_t i = 0; i < n; ++i) {
        if (std::memcmp(&logits[i], &reference[i], sizeof(float)) != 0) ++g.differing_logits;
        if (std::isfinite(logits[i]) && std::isfinite(reference[i]))
          g.max_abs_delta_logit = std::max(g.max_abs_delta_logit, double(std::abs(logits[i] - reference[i])));
      }
    }
    p.groups.push_back(std::move(g));
  }
  p.controller_evaluations = model.replay_controller_evaluations() - before;
  const CoefficientShape& s = A.shape;
  const RecordKindRow& row = record_kind_row(s.kind);
  p.perturbation = std::string("every valid coefficient v of one group (") +
                   (row.whole_record_probe != nullptr ? "the whole record"
                    : row.discrete                    ? "a layer"
                                                      : "a layer's stream on one of two random token subsets") +
                   ") replaced by v + 0.25 (1 + |v|)";
  p.perturbation += row.probe_words(s);
  return p;
}

bool ReplayProbe::sensitive() const { return !groups.empty() && insensitive().empty(); }

std::vector<std::string> ReplayProbe::insensitive() const {
  std::vector<std::string> names;
  for (const Group& g : groups)
    if (g.differing_logits == 0) names.push_back(g.group.name);
  return names;
}

nlohmann::ordered_json ReplayProbe::to_json(bool allowed_insensitive) const {
  nlohmann::ordered_json per_group = nlohmann::ordered_json::array();
  int64_t differing = 0;
  for (const Group& g : groups) {
    per_group.push_back({{"group", g.group.name}, {"differing_logits", g.differing_logits}, {"max_abs_delta_logit", g.max_abs_delta_logit}});
    differing += g.differing_logits;
  }
  nlohmann::ordered_json j{{"calibration_windows", nlohmann::ordered_json::array({first, first + windows})},
                           {"perturbation", perturbation},
                           {"logits_compared", by_digest ? "sha256" : "values"},
                           {"differing_logits", differing},
                           {"groups", per_group},
                           {"insensitive_groups", insensitive()},
                           {"controller_evaluations", controller_evaluations},
                           {"passed", sensitive()}};
  if (!sensitive() && allowed_insensitive)
    j["warning"] = "the replay did not depend on the coefficients it was handed (" + std::to_string(insensitive().size()) + " of " +
                   std::to_string(groups.size()) + " probe groups); the audit ran anyway (--allow-insensitive-replay): "
                   "every penalty below is 0 by construction, not evidence";
  return j;
}

std::string ReplayProbe::failure() const {
  const std::vector<std::string> names = insensitive();
  std::string listed;
  for (size_t i = 0; i < names.size() && i < 6; ++i) listed += (i ? ", " : "") + names[i];
  if (names.size() > 6) listed += ", ... (" + std::to_string(names.size()) + " in all)";
  return "replay sensitivity probe failed: replaying calibration windows [" + std::to_string(first) + ", " +
         std::to_string(first + windows) + ") with coefficients that differ from the cached ones at every valid coordinate of " +
         (groups.size() == 1 ? std::string("the record") : "one group at a time") + " (" + perturbation +
         ") gave bitwise the same logits as replaying the cached ones for " + std::to_string(names.size()) + " of " +
         std::to_string(groups.size()) + " probe groups (" + listed +
         "). The replay does not use the coefficients it is handed there, so every intervention would show a penalty of 0 "
         "by construction. Likely causes: the adapter ignores the handed coefficients (it runs its own controller in replay), "
         "or the hooked module's output is never used by the logits. Pass --allow-insensitive-replay to audit anyway; "
         "audit.json and the report then say so";
}

}  // namespace fca
