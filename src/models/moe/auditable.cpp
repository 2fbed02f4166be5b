#include "models/moe/auditable.h"

#include "core/sha256.h"

namespace fca {

MoeAuditable::MoeAuditable(const std::string& path, int max_batch, int max_tokens, bool dense_experts)
    : model_(MoeModel<float>::load(path)),
      hash_(sha256_file(path)),
      rs_(model_.config(), max_batch, std::min(max_tokens, model_.config().seq_len), false, dense_experts) {}

std::string MoeAuditable::description() const {
  const MoeConfig& c = model_.config();
  return "moe E " + std::to_string(c.n_expert) + " k " + std::to_string(c.top_k) + " L " + std::to_string(c.n_layer) +
         ", D " + std::to_string(c.d_model) + ", H " + std::to_string(c.n_head) + ", T " + std::to_string(c.seq_len);
}

std::vector<int32_t> MoeAuditable::tokenize(const TextSplit& split) const {
  return std::vector<int32_t>(split.bytes(), split.bytes() + split.size());
}

CoefficientTensor MoeAuditable::make_coefficients(int windows, int tokens) const {
  return CoefficientTensor(windows, moe_record_shape(model_.config(), tokens));
}

void MoeAuditable::run_live(const int32_t* inputs, const int32_t* targets, int B, int T, CoefficientTensor* record,
                            int record_first, double* window_nll) {
  if (record != nullptr) {
    MoeRecordingRouting<float> source(model_, *record);
    moe_forward(model_, rs_, inputs, B, T, source, record_first);
  } else {
    MoeLiveRouting<float> source(model_);
    moe_forward(model_, rs_, inputs, B, T, source);
  }
  moe_loss(rs_, targets, window_nll);
}

void MoeAuditable::run_replay(const int32_t* inputs, const int32_t* targets, int B, int T,
                              const CoefficientTensor& coefficients, double* window_nll) {
  MoeReplayedRouting<float> source(model_.config(), coefficients);
  moe_forward(model_, rs_, inputs, B, T, source, 0);
  replay_evaluations_ += source.controller_evaluations();
  moe_loss(rs_, targets, window_nll);
}

}  // namespace fca
