// The audit's row for continuous coefficients (audit_kind.h): the conditions of conditions.h over
// the calibration means, the model's identity and structure-removed profiles, and one
// disabled_<group> condition per switchable group of the model.
#include <algorithm>

#include "audit/audit_kind.h"
#include "core/error.h"
#include "models/capabilities.h"

namespace fca {
namespace {

class ContinuousConditions : public KindConditions {
 public:
  ContinuousConditions(const AuditableModel& model, const CoefficientView& C) {
    const int T = C.shape.tokens;
    profiles_ = {model.make_coefficients(1, T), model.make_coefficients(1, T), model.make_coefficients(1, T),
                 model.make_coefficients(1, T)};
    compute_means(C, profiles_.layer_position_mean, profiles_.static_profile);
    if (model.has_identity_profile()) model.identity_profile(profiles_.identity);
    model.structure_removed_profile(profiles_.static_profile, profiles_.structure_removed);
    const AblationGroups* ablation = capability<AblationGroups>(model);
    if (ablation == nullptr) return;
    groups_.names = ablation->disable_groups();
    if (groups_.names.empty()) return;
    groups_.disabled = model.make_coefficients(1, T);
    ablation->disabled_profile(groups_.disabled);
    const CoefficientShape& shape = groups_.disabled.shape();
    for (int l = 0; l < shape.layers; ++l)
      for (int st = 0; st < shape.streams; ++st)
        for (int k = 0; k < shape.sources; ++k) {
          const int g = ablation->disable_group_of(l, st, k);
          if (g < -1 || g >= int(groups_.names.size()))
            throw Error("internal error: coefficient group " + std::to_string(g) + " of " + std::to_string(groups_.names.size()));
          groups_.group_of.push_back(g);
        }
  }

  std::unique_ptr<Condition> make(const std::string& name, const CoefficientView& A, const AuditRandomness& rand) const override {
    return make_condition(name, A, profiles_, rand, groups_);
  }

  // S[l][s][k] and, for one-stream one-source tensors (the gated family), the layer x position means.
  nlohmann::ordered_json profiles_json() const override {
    nlohmann::ordered_json out;
    out["static_profile"] = static_profile_json(profiles_.static_profile);
    const CoefficientShape& sh = profiles_.layer_position_mean.shape();
    if (sh.streams == 1 && sh.sources == 1) {
      nlohmann::ordered_json lpm = nlohmann::ordered_json::array();
      for (int l = 0; l < sh.layers; ++l) {
        std::vector<float> row(size_t(sh.tokens));
        for (int t = 0; t < sh.tokens; ++t) row[size_t(t)] = profiles_.layer_position_mean.at(0, l, t);
        lpm.push_back(row);
      }
      out["layer_position_mean"] = lpm;
    }
    return out;
  }

 private:
  CalibrationProfiles profiles_;
  DisableGroups groups_;
};

// layer_permutation where the layers' valid coordinates differ (known from the shape, before the
// cache), identity where the model has no identity coefficients.
std::vector<SkippedCondition> continuous_skipped(const AuditableModel& model, const CoefficientView& one_window) {
  std::vector<SkippedCondition> skipped;
  if (!layers_are_permutable(one_window))
    skipped.push_back({"layer_permutation", "the layers have different valid (stream, source) coordinates"});
  if (!model.has_identity_profile())
    skipped.push_back({"identity", "the model gives no identity coefficients (the values that make its controller a no-op)"});
  return skipped;
}

std::vector<std::string> disabled_group_conditions(const AuditableModel& model) {
  std::vector<std::string> names;
  if (const AblationGroups* ablation = capability<AblationGroups>(model))
    for (const auto& g : ablation->disable_groups()) names.push_back("disabled_" + g);
  return names;
}

}  // namespace

AuditKindRow continuous_audit_kind() {
  return {.kind = RecordKind::continuous,
          .condition_names = all_condition_names(),
          .randomized = {"cross_input", "token_shuffle", "cross_shuffle", "layer_permutation"},
          .skipped = continuous_skipped,
          .model_conditions = disabled_group_conditions,
          .prepare = [](const AuditableModel& model, const CoefficientView& C) -> std::unique_ptr<KindConditions> {
            return std::make_unique<ContinuousConditions>(model, C);
          },
          .routing_json = nullptr,
          .shortened_tokens = nullptr,
          .full_computation_condition = nullptr};
}

}  // namespace fca
