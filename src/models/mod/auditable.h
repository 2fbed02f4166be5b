// MoD models behind the audit's interface (models/auditable.h): routing records of kind
// token_selection [R, T, 1, 1] (sigmoid(s)) + [R, T, 1] (selected); replay never evaluates a router.
#pragma once
#include "models/family_auditable.h"
#include "models/registry.h"
#include "models/mod/forward.h"

namespace fca {

struct ModAuditTraits {
  using Model = ModModel<float>;
  using RunState = ModRunState<float>;
  using Live = ModLiveRouting<float>;
  using Recording = ModRecordingRouting<float>;
  using Replayed = ModReplayedRouting<float>;
  static RunState run_state(const Model& m, int B, int T) { return RunState(m.config(), B, std::min(T, m.config().seq_len), false); }
  static Replayed replayed(const Model& m, const CoefficientTensor& c) { return Replayed(m.config(), c); }
  static void forward(const Model& m, RunState& rs, const int32_t* x, int B, int T, ModRoutingSource<float>& s, int first) {
    mod_forward(m, rs, x, B, T, s, first);
  }
  static void loss(RunState& rs, const int32_t* y, double* nll) { mod_loss(rs, y, nll); }
  static constexpr const char* kFamily = "mod";
  static constexpr const char* kStaticProfile = "EvenlySpaced";
  static constexpr const char* kStructureRemoved = "RandomTokens";
  static CoefficientShape record_shape(const ModConfig& c, int tokens) { return mod_record_shape(c, tokens); }
  static std::string describe(const ModConfig& c);
};

using ModAuditable = ByteLevelAuditable<ModAuditTraits>;

// The family's entry in the model registry (models/registry.h): "mod", format fca-mod-v1, labelled
// "mod c<capacity>".
ModelFamily mod_model_family();

}  // namespace fca
