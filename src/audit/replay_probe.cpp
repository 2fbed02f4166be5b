#include "audit/replay_probe.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "audit/exit_conditions.h"
#include "core/error.h"

namespace fca {

void perturb_for_probe(CoefficientTensor& c) {
  const CoefficientShape& s = c.shape();
  for (int w = 0; w < c.windows(); ++w)
    for (int l = 0; l < s.layers; ++l)
      for (int t = 0; t < s.tokens; ++t)
        for (int st = 0; st < s.streams; ++st)
          for (int k = 0; k < s.sources; ++k)
            if (c.valid(l, st, k)) {
              float& v = c.at(w, l, t, st, k);
              v = v + 0.25f * (1.0f + std::abs(v));
            }
  if (s.kind == RecordKind::expert_routing) {
    for (int32_t& e : c.discrete()) e = (e + 1) % s.categories;
  } else if (s.kind == RecordKind::exit_depth) {
    // Every token one block deeper, or one shallower where it ran them all (still a valid depth:
    // m <= L - 1), with its absorbing fill.
    for (int w = 0; w < c.windows(); ++w) {
      std::vector<int> d = exit_depths(c.view(), w);
      for (int& v : d) v = v < s.layers + 1 ? v + 1 : v - 1;
      write_exit_depths(c, w, d);
    }
  } else if (s.kind == RecordKind::token_selection) {
    std::vector<int32_t> row(size_t(s.tokens));
    for (int w = 0; w < c.windows(); ++w)
      for (int l = 0; l < s.layers; ++l) {
        for (int t = 0; t < s.tokens; ++t) row[size_t(t)] = c.discrete_at(w, l, t, 0);
        for (int t = 0; t < s.tokens; ++t) c.discrete_at(w, l, (t + 1) % s.tokens, 0) = row[size_t(t)];
      }
  }
}

ReplayProbe probe_replay_sensitivity(AuditableModel& model, const WindowSet& windows, const CoefficientView& A, int w0, int B) {
  ReplayProbe p;
  const int T = windows.tokens;
  p.first = w0;
  p.windows = B;
  CoefficientTensor handed = model.make_coefficients(B, T);
  for (int b = 0; b < B; ++b) handed.copy_window(b, A, w0 + b);
  const int32_t* inputs = windows.inputs.data() + int64_t(w0) * T;
  const int32_t* targets = windows.targets.data() + int64_t(w0) * T;
  const int64_t before = model.replay_controller_evaluations();
  std::vector<double> nll(static_cast<size_t>(B));
  // Both passes start from NaN logits: a replay that writes none shows no difference (and fails).
  model.poison_logits(B, T);
  model.run_replay(inputs, targets, B, T, handed, nll.data());
  p.by_digest = model.last_logits() == nullptr;
  const size_t n = size_t(B) * T * size_t(model.vocab());
  std::vector<float> reference;
  std::string reference_digest;
  if (p.by_digest) reference_digest = model.last_logits_sha256();
  else reference.assign(model.last_logits(), model.last_logits() + n);

  perturb_for_probe(handed);
  model.poison_logits(B, T);
  model.run_replay(inputs, targets, B, T, handed, nll.data());
  p.controller_evaluations = model.replay_controller_evaluations() - before;
  if (p.by_digest) {
    p.differing_logits = model.last_logits_sha256() != reference_digest ? 1 : 0;
  } else {
    const float* changed = model.last_logits();
    for (size_t i = 0; i < n; ++i) {
      if (std::memcmp(&changed[i], &reference[i], sizeof(float)) != 0) ++p.differing_logits;
      if (std::isfinite(changed[i]) && std::isfinite(reference[i]))
        p.max_abs_delta_logit = std::max(p.max_abs_delta_logit, double(std::abs(changed[i] - reference[i])));
    }
  }
  const CoefficientShape& s = A.shape;
  p.perturbation = "every valid coefficient v replaced by v + 0.25 (1 + |v|)";
  if (s.kind == RecordKind::expert_routing) p.perturbation += ", every expert index e by (e + 1) mod " + std::to_string(s.categories);
  if (s.kind == RecordKind::token_selection) p.perturbation += ", every token selection moved one token later (cyclically)";
  if (s.kind == RecordKind::exit_depth) p.perturbation += ", every token's depth one block deeper (one shallower at full depth)";
  return p;
}

nlohmann::ordered_json ReplayProbe::to_json(bool allowed_insensitive) const {
  nlohmann::ordered_json j{{"calibration_windows", nlohmann::ordered_json::array({first, first + windows})},
                           {"perturbation", perturbation},
                           {"logits_compared", by_digest ? "sha256" : "values"},
                           {"differing_logits", differing_logits},
                           {"max_abs_delta_logit", max_abs_delta_logit},
                           {"controller_evaluations", controller_evaluations},
                           {"passed", sensitive()}};
  if (!sensitive() && allowed_insensitive)
    j["warning"] = "the replay did not depend on the coefficients it was handed; the audit ran anyway "
                   "(--allow-insensitive-replay): every penalty below is 0 by construction, not evidence";
  return j;
}

std::string ReplayProbe::failure() const {
  return "replay sensitivity probe failed: replaying calibration windows [" + std::to_string(first) + ", " + std::to_string(first + windows) + ") with coefficients that differ "
         "from the cached ones at every valid coordinate (" + perturbation + ") gave bitwise the same logits as replaying the "
         "cached ones. The replay does not use the coefficients it is handed, so every intervention would show a penalty of 0 "
         "by construction. Likely causes: the adapter ignores the handed coefficients (it runs its own controller in replay), "
         "or the hooked module's output is never used by the logits. Pass --allow-insensitive-replay to audit anyway; "
         "audit.json and the report then say so";
}

}  // namespace fca
