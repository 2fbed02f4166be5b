// MUDD models behind the audit's interface (models/auditable.h): coefficients [L, T, 4, L+1] with
// the validity mask; identity = one-hot on the newest source; structure_removed = SourceUniformMean.
#pragma once
#include <memory>

#include "models/family_auditable.h"
#include "models/registry.h"
#include "models/mudd/forward.h"
#include "models/mudd/model.h"
#include "models/mudd/tokenizer.h"

namespace fca {

struct MuddAuditTraits {
  using Model = MuddModel<float>;
  using RunState = MuddRunState<float>;
  using Live = MuddLiveCoefficients<float>;
  using Recording = MuddRecordingCoefficients<float>;
  using Replayed = MuddReplayedCoefficients<float>;
  static RunState run_state(const Model& m, int B, int T) { return RunState(m.config(), B, std::min(T, m.config().block_size)); }
  static Replayed replayed(const Model&, const CoefficientTensor& c) { return Replayed(c); }
  static void forward(const Model& m, RunState& rs, const int32_t* x, int B, int T, MuddCoefficientSource<float>& s, int first) {
    mudd_forward(m, rs, x, B, T, s, first);
  }
  static void loss(RunState& rs, const int32_t* y, double* nll) { mudd_loss(rs, y, nll); }
};

class MuddAuditable : public FamilyAuditable<MuddAuditTraits> {
 public:
  // Loads the folder; text is tokenized with its tokenizer.json, or, when the folder has none,
  // its bytes are the token ids (0..255; vocab_size must be at least 256).
  MuddAuditable(const std::string& dir, int max_batch, int max_tokens);

  std::string family() const override { return "mudd"; }
  bool batch_invariant() const override { return true; }  // tests/audit_test.cpp checks it
  std::string description() const override;
  std::string content_hash() const override { return model_.content_hash(); }
  std::string config_json() const override { return model_.config().to_json(); }
  size_t parameter_count() const override { return model_.parameter_count(); }
  int max_tokens() const override { return model_.config().block_size; }
  int vocab() const override { return model_.config().vocab_size; }
  std::vector<int32_t> tokenize(const std::string& split, std::span<const unsigned char> text) const override;
  CoefficientTensor make_coefficients(int windows, int tokens) const override;
  void identity_profile(CoefficientTensor& out) const override;
  void structure_removed_profile(const CoefficientTensor& static_profile, CoefficientTensor& out) const override;
  // final_stream [B, T, D] and hidden.{j} = X_0 .. X_L [B, T, D].
  const float* last_position_losses() const override { return rs_->losses; }
  std::vector<TraceTensor> trace_tensors(int B, int T, bool live) const override;
  std::string static_profile_name() const override { return "StaticMixMean"; }
  std::vector<std::string> stream_labels() const override { return {"Q", "K", "V", "R"}; }
  std::vector<std::string> source_labels() const override;
  std::string structure_removed_name() const override { return "SourceUniformMean"; }

 private:
  std::unique_ptr<BpeTokenizer> tokenizer_;  // null for byte-level models
};

// The family's entry in the model registry (models/registry.h): "mudd", any folder (a Hugging Face
// checkpoint).
ModelFamily mudd_model_family();

}  // namespace fca
