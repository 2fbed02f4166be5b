// MUDD models behind the audit's interface (models/auditable.h): coefficients [L, T, 4, L+1] with
// the validity mask; identity = one-hot on the newest source; structure_removed = SourceUniformMean.
#pragma once
#include <memory>

#include "models/auditable.h"
#include "models/mudd/forward.h"
#include "models/mudd/model.h"
#include "models/mudd/tokenizer.h"

namespace fca {

class MuddAuditable : public AuditableModel {
 public:
  // Loads the folder; text is tokenized with its tokenizer.json, or as bytes for a byte-level
  // model (vocab 256) without one.
  MuddAuditable(const std::string& dir, int max_batch, int max_tokens);

  std::string family() const override { return "mudd"; }
  std::string description() const override;
  std::string content_hash() const override { return model_.content_hash(); }
  std::string config_json() const override { return model_.config().to_json(); }
  size_t parameter_count() const override { return model_.parameter_count(); }
  int max_tokens() const override { return model_.config().block_size; }
  int vocab() const override { return model_.config().vocab_size; }
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
  std::string static_profile_name() const override { return "StaticMixMean"; }
  std::string structure_removed_name() const override { return "SourceUniformMean"; }

  const MuddModel<float>& model() const { return model_; }

 private:
  MuddModel<float> model_;
  std::unique_ptr<BpeTokenizer> tokenizer_;  // null for byte-level models
  MuddRunState<float> rs_;
  int64_t replay_evaluations_ = 0;
};

}  // namespace fca
