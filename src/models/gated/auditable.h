// The gated family behind the audit's interface (models/auditable.h).
#pragma once
#include <memory>

#include "models/auditable.h"
#include "models/gated/coefficients.h"
#include "models/gated/model.h"
#include "models/gated/run_state.h"

namespace fca {

class GatedAuditable : public AuditableModel {
 public:
  // Loads `path`; runs batches of at most max_batch windows of at most max_tokens tokens.
  GatedAuditable(const std::string& path, int max_batch, int max_tokens);

  std::string family() const override { return "gated"; }
  std::string description() const override;
  std::string content_hash() const override { return hash_; }
  std::string config_json() const override { return model_.config().to_json(); }
  size_t parameter_count() const override { return gated_parameter_count(model_.config()); }
  int max_tokens() const override { return model_.config().seq_len; }
  int vocab() const override { return kByteVocab; }
  std::vector<int32_t> tokenize(const TextSplit& split) const override;
  CoefficientTensor make_coefficients(int windows, int tokens) const override;
  void run_live(const int32_t* inputs, const int32_t* targets, int B, int T, CoefficientTensor* record, int record_first,
                double* window_nll) override;
  void run_replay(const int32_t* inputs, const int32_t* targets, int B, int T, const CoefficientTensor& coefficients,
                  double* window_nll) override;
  const float* last_logits() const override { return rs_.logits; }
  int64_t replay_controller_evaluations() const override { return replay_evaluations_; }
  void identity_profile(CoefficientTensor& out) const override;
  void structure_removed_profile(const CoefficientTensor& static_profile, CoefficientTensor& out) const override;
  std::string static_profile_name() const override { return "LayerMean"; }
  std::string structure_removed_name() const override { return "GlobalMean"; }

  const GatedModel<float>& model() const { return model_; }

 private:
  GatedModel<float> model_;
  std::string hash_;
  GatedRunState<float> rs_;
  int64_t replay_evaluations_ = 0;
};

}  // namespace fca
