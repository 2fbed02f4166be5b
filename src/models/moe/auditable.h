// MoE models behind the audit's interface (models/auditable.h): routing records of kind
// expert_routing [L, T, 1, k] (weights) + [L, T, k] (experts); replay never evaluates a router.
#pragma once
#include "models/family_auditable.h"
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
};

class MoeAuditable : public FamilyAuditable<MoeAuditTraits> {
 public:
  MoeAuditable(const std::string& path, int max_batch, int max_tokens);
  std::string family() const override { return "moe"; }
  std::string description() const override;
  std::string content_hash() const override { return hash_; }
  std::string config_json() const override { return model_.config().to_json(); }
  size_t parameter_count() const override { return layout_parameter_count(model_.layout()); }
  int max_tokens() const override { return model_.config().seq_len; }
  int vocab() const override { return 256; }
  std::vector<int32_t> tokenize(const TextSplit& split) const override { return split.byte_tokens(); }
  CoefficientTensor make_coefficients(int windows, int tokens) const override {
    return CoefficientTensor(windows, moe_record_shape(model_.config(), tokens));
  }
  std::string static_profile_name() const override { return "LayerTopExperts"; }
  std::string structure_removed_name() const override { return "RandomExperts"; }

 private:
  std::string hash_;
};

}  // namespace fca
