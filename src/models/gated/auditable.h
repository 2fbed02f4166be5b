// The gated family behind the audit's interface (models/auditable.h).
#pragma once
#include "models/family_auditable.h"
#include "models/registry.h"
#include "models/gated/coefficients.h"
#include "models/gated/forward.h"

namespace fca {

struct GatedAuditTraits {
  using Model = GatedModel<float>;
  using RunState = GatedRunState<float>;
  using Live = LiveCoefficients<float>;
  using Recording = RecordingCoefficients<float>;
  using Replayed = ReplayedCoefficients<float>;
  static RunState run_state(const Model& m, int B, int T) { return RunState(m.config(), B, std::min(T, m.config().seq_len), false); }
  static Replayed replayed(const Model&, const CoefficientTensor& c) { return Replayed(c); }
  static void forward(const Model& m, RunState& rs, const int32_t* x, int B, int T, CoefficientSource<float>& s, int first) {
    gated_forward(m, rs, x, B, T, s, first);
  }
  static void loss(RunState& rs, const int32_t* y, double* nll) { gated_loss(rs, y, nll); }
};

class GatedAuditable : public FamilyAuditable<GatedAuditTraits> {
 public:
  // Loads `path`; runs batches of at most max_batch windows of at most max_tokens tokens.
  GatedAuditable(const std::string& path, int max_batch, int max_tokens);

  std::string family() const override { return "gated"; }
  bool batch_invariant() const override { return true; }  // tests/audit_test.cpp checks it
  bool coefficients_are_gates() const override { return true; }
  std::string description() const override;
  std::string content_hash() const override { return hash_; }
  std::string config_json() const override { return model_.config().to_json(); }
  size_t parameter_count() const override { return gated_parameter_count(model_.config()); }
  int max_tokens() const override { return model_.config().seq_len; }
  int vocab() const override { return kByteVocab; }
  std::vector<int32_t> tokenize(const std::string&, std::span<const unsigned char> text) const override {
    return std::vector<int32_t>(text.begin(), text.end());
  }
  CoefficientTensor make_coefficients(int windows, int tokens) const override;
  void identity_profile(CoefficientTensor& out) const override;
  void structure_removed_profile(const CoefficientTensor& static_profile, CoefficientTensor& out) const override;
  // hidden.{l} = h_0 .. h_L [B, T, D]; after a live featuregate pass also blocks.{l}.features [B, T, 4].
  const float* last_position_losses() const override { return rs_->losses; }
  std::vector<TraceTensor> trace_tensors(int B, int T, bool live) const override;
  std::string static_profile_name() const override { return "LayerMean"; }
  std::string structure_removed_name() const override { return "GlobalMean"; }

 private:
  std::string hash_;
};

// The family's entry in the model registry (models/registry.h): "gated", format fca-gated-v1,
// labelled by its gate kind.
ModelFamily gated_model_family();

}  // namespace fca
