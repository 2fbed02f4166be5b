// MoD models behind the audit's interface (models/auditable.h): routing records of kind
// token_selection [R, T, 1, 1] (sigmoid(s)) + [R, T, 1] (selected); replay never evaluates a router.
#pragma once
#include "models/family_auditable.h"
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
};

class ModAuditable : public FamilyAuditable<ModAuditTraits> {
 public:
  ModAuditable(const std::string& path, int max_batch, int max_tokens);
  std::string family() const override { return "mod"; }
  std::string description() const override;
  std::string content_hash() const override { return hash_; }
  std::string config_json() const override { return model_.config().to_json(); }
  size_t parameter_count() const override { return layout_parameter_count(model_.layout()); }
  int max_tokens() const override { return model_.config().seq_len; }
  int vocab() const override { return 256; }
  std::vector<int32_t> tokenize(const TextSplit& split) const override { return split.byte_tokens(); }
  CoefficientTensor make_coefficients(int windows, int tokens) const override {
    return CoefficientTensor(windows, mod_record_shape(model_.config(), tokens));
  }
  std::string static_profile_name() const override { return "EvenlySpaced"; }
  std::string structure_removed_name() const override { return "RandomTokens"; }

 private:
  std::string hash_;
};

}  // namespace fca
