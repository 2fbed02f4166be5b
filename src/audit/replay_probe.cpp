#include "audit/replay_probe.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "models/record_kind.h"

namespace fca {

std::vector<ProbeGroup> probe_groups(const CoefficientView& A) {
  const CoefficientShape& s = A.shape;
  const RecordKindRow& row = record_kind_row(s.kind);
  if (row.whole_record_probe != nullptr) return {{row.whole_record_probe, -1}};
  std::vector<ProbeGroup> groups;
  for (int l = 0; l < s.layers; ++l) {
    bool any = row.discrete;  // routing records perturb the discrete field of every layer
    for (int st = 0; st < s.streams && !any; ++st)
      for (int k = 0; k < s.sources && !any; ++k) any = A.valid(l, st, k);
    if (any) groups.push_back({"layer " + std::to_string(l), l});
  }
  return groups;
}

void perturb_for_probe(CoefficientTensor& c, int layer) {
  const CoefficientShape& s = c.shape();
  const int l0 = layer < 0 ? 0 : layer, l1 = layer < 0 ? s.layers : layer + 1;
  for (int w = 0; w < c.windows(); ++w)
    for (int l = l0; l < l1; ++l)
      for (int t = 0; t < s.tokens; ++t)
        for (int st = 0; st < s.streams; ++st)
          for (int k = 0; k < s.sources; ++k)
            if (c.valid(l, st, k)) {
              float& v = c.at(w, l, t, st, k);
              v = v + 0.25f * (1.0f + std::abs(v));
            }
  if (const auto perturb_discrete = record_kind_row(s.kind).perturb_discrete) perturb_discrete(c, layer);
}

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
    perturb_for_probe(changed, group.layer);
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
  p.perturbation = "every valid coefficient v of one group replaced by v + 0.25 (1 + |v|)";
  p.perturbation += record_kind_row(s.kind).probe_words(s);
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
         (groups.size() == 1 ? std::string("the record") : "one layer at a time") + " (" + perturbation +
         ") gave bitwise the same logits as replaying the cached ones for " + std::to_string(names.size()) + " of " +
         std::to_string(groups.size()) + " probe groups (" + listed +
         "). The replay does not use the coefficients it is handed there, so every intervention would show a penalty of 0 "
         "by construction. Likely causes: the adapter ignores the handed coefficients (it runs its own controller in replay), "
         "or the hooked module's output is never used by the logits. Pass --allow-insensitive-replay to audit anyway; "
         "audit.json and the report then say so";
}

}  // namespace fca
