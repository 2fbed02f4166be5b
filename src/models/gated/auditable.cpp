#include "models/gated/auditable.h"

#include "core/error.h"
#include "core/sha256.h"
#include "models/gated/forward.h"

namespace fca {

GatedAuditable::GatedAuditable(const std::string& path, int max_batch, int max_tokens)
    : FamilyAuditable(GatedModel<float>::load(path), max_batch, max_tokens), hash_(sha256_file(path)) {}

std::string GatedAuditable::description() const {
  const GatedConfig& c = model_.config();
  return std::string(gate_kind_name(c.gate)) + " L " + std::to_string(c.n_layer) + ", D " + std::to_string(c.d_model) +
         ", H " + std::to_string(c.n_head) + ", T " + std::to_string(c.seq_len);
}

CoefficientTensor GatedAuditable::make_coefficients(int windows, int tokens) const {
  return CoefficientTensor(windows, gated_coefficient_shape(model_.config(), tokens));
}

void GatedAuditable::identity_profile(CoefficientTensor& out) const {
  std::fill(out.window_data(0), out.window_data(0) + out.shape().per_window(), 1.0f);
}

void GatedAuditable::structure_removed_profile(const CoefficientTensor& static_profile, CoefficientTensor& out) const {
  // GlobalMean: one scalar, the mean over calibration windows, layers and tokens. Every layer has
  // the same number of tokens, so it is the mean over layers of the layer means S[l].
  const auto& s = static_profile.shape();
  double sum = 0;
  for (int l = 0; l < s.layers; ++l) sum += static_profile.at(0, l, 0);
  const float global = float(sum / s.layers);
  std::fill(out.window_data(0), out.window_data(0) + out.shape().per_window(), global);
}

}  // namespace fca
