// MoE models behind the audit's interface (models/auditable.h): routing records of kind
// expert_routing [L, T, 1, k] (weights) + [L, T, k] (experts); replay never evaluates a router.
#pragma once
#include "models/auditable.h"
#include "models/moe/forward.h"

namespace fca {

class MoeAuditable : public AuditableModel {
 public:
  // dense_experts: run every expert on every token (measurement mode; same routing).
  MoeAuditable(const std::string& path, int max_batch, int max_tokens, bool dense_experts = false);
  std::string family() const override { return "moe"; }
  std::string description() const override;
  std::string content_hash() const override { return hash_; }
  std::string config_json() const override { return model_.config().to_json(); }
  size_t parameter_count() const override { return layout_parameter_count(model_.layout()); }
  int max_tokens() const override { return model_.config().seq_len; }
  int vocab() const override { return 256; }
  std::vector<int32_t> tokenize(const TextSplit& split) const override;
  CoefficientTensor make_coefficients(int windows, int tokens) const override;
  void run_live(const int32_t* inputs, const int32_t* targets, int B, int T, CoefficientTensor* record, int record_first,
                double* window_nll) override;
  void run_replay(const int32_t* inputs, const int32_t* targets, int B, int T, const CoefficientTensor& coefficients,
                  double* window_nll) override;
  const float* last_logits() const override { return rs_.logits; }
  int64_t replay_controller_evaluations() const override { return replay_evaluations_; }
  std::string static_profile_name() const override { return "LayerTopExperts"; }
  std::string structure_removed_name() const override { return "RandomExperts"; }
  const MoeModel<float>& model() const { return model_; }
  MoeRunState<float>& run_state() { return rs_; }

 private:
  MoeModel<float> model_;
  std::string hash_;
  MoeRunState<float> rs_;
  int64_t replay_evaluations_ = 0;
};

}  // namespace fca
