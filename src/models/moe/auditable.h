// MoE models behind the audit's interface (models/auditable.h): routing records of kind
// expert_routing [L, T, 1, k] (weights) + [L, T, k] (experts); replay never evaluates a router.
#pragma once
#include "models/family_auditable.h"
#include "models/registry.h"
#include "models/moe/forward.h"

namespace fca {

struct MoeAuditTraits {
  using Model = MoeModel<float>;
  using RunState = MoeRunState<float>;
  using Live = MoeLiveRouting<float>;
  using Recording = MoeRecordingRouting<float>;
  using Replayed = MoeReplayedRouting<float>;
  static RunState run_state(const Model& m, int B, int T) { return RunState(m.config(), B, std::min(T, m.config().seq_len), false); }
  static Replayed replayed(const Model& m, const CoefficientTensor& c) { return Replayed(m.config(), c); }
  static void forward(const Model& m, RunState& rs, const int32_t* x, int B, int T, MoeRoutingSource<float>& s, int first) {
    moe_forward(m, rs, x, B, T, s, first);
  }
  static void loss(RunState& rs, const int32_t* y, double* nll) { moe_loss(rs, y, nll); }
  static constexpr const char* kFamily = "moe";
  static constexpr const char* kStaticProfile = "LayerTopExperts";
  static constexpr const char* kStructureRemoved = "RandomExperts";
  static CoefficientShape record_shape(const MoeConfig& c, int tokens) { return moe_record_shape(c, tokens); }
  static std::string describe(const MoeConfig& c);
};

using MoeAuditable = ByteLevelAuditable<MoeAuditTraits>;

// The family's entry in the model registry (models/registry.h): "moe", format fca-moe-v1, labelled
// "moe E<experts> k<top_k>".
ModelFamily moe_model_family();

}  // namespace fca
