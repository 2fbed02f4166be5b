#include "models/mod/auditable.h"

#include "core/sha256.h"

namespace fca {

ModAuditable::ModAuditable(const std::string& path, int max_batch, int max_tokens)
    : model_(ModModel<float>::load(path)),
      hash_(sha256_file(path)),
      rs_(model_.config(), max_batch, std::min(max_tokens, model_.config().seq_len), false) {}

std::string ModAuditable::description() const {
  const ModConfig& c = model_.config();
  char capacity[32];
  std::snprintf(capacity, sizeof capacity, "%g", c.capacity);
  return std::string("mod c ") + capacity + " every " + std::to_string(c.routed_every) + " L " + std::to_string(c.n_layer) +
         ", D " + std::to_string(c.d_model) + ", H " + std::to_string(c.n_head) + ", T " + std::to_string(c.seq_len);
}

std::vector<int32_t> ModAuditable::tokenize(const TextSplit& split) const {
  return std::vector<int32_t>(split.bytes(), split.bytes() + split.size());
}

CoefficientTensor ModAuditable::make_coefficients(int windows, int tokens) const {
  return CoefficientTensor(windows, mod_record_shape(model_.config(), tokens));
}

void ModAuditable::run_live(const int32_t* inputs, const int32_t* targets, int B, int T, CoefficientTensor* record,
                            int record_first, double* window_nll) {
  if (record != nullptr) {
    ModRecordingRouting<float> source(model_, *record);
    mod_forward(model_, rs_, inputs, B, T, source, record_first);
  } else {
    ModLiveRouting<float> source(model_);
    mod_forward(model_, rs_, inputs, B, T, source);
  }
  mod_loss(rs_, targets, window_nll);
}

void ModAuditable::run_replay(const int32_t* inputs, const int32_t* targets, int B, int T,
                              const CoefficientTensor& coefficients, double* window_nll) {
  ModReplayedRouting<float> source(model_.config(), coefficients);
  mod_forward(model_, rs_, inputs, B, T, source, 0);
  replay_evaluations_ += source.controller_evaluations();
  mod_loss(rs_, targets, window_nll);
}

}  // namespace fca
