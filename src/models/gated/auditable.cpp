#include "models/gated/auditable.h"

#include <cstdio>

#include "core/error.h"
#include "core/safetensors.h"
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

std::vector<TraceTensor> GatedAuditable::trace_tensors(int B, int T, bool live) const {
  const int L = model_.config().n_layer, D = model_.config().d_model;
  std::vector<TraceTensor> out;
  for (int l = 0; l <= L; ++l) out.push_back({"hidden." + std::to_string(l), {B, T, D}, rs_->hidden[size_t(l)]});
  // phi_l: computed only by a live featuregate controller.
  if (live && model_.config().gate == GateKind::featuregate)
    for (int l = 0; l < L; ++l)
      out.push_back({"blocks." + std::to_string(l) + ".features", {B, T, 4}, rs_->features + int64_t(l) * B * T * 4});
  return out;
}

namespace {

// fca info: the gate, the shape and the checkpoint's metadata.
std::string gated_info(const std::string& path) {
  const GatedModel<float> model = GatedModel<float>::load(path);  // full validation
  const GatedConfig& c = model.config();
  const SafetensorsReader reader(path);
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "model:      %s\nformat:     %s\n", path.c_str(), kGatedFormat);
  out += line;
  std::snprintf(line, sizeof line, "gate:       %s%s\n", gate_kind_name(c.gate),
                c.gate == GateKind::fixed ? (" (g = " + std::to_string(c.gate_value) + ")").c_str() : "");
  out += line;
  std::snprintf(line, sizeof line, "shape:      L %d, D %d, H %d (head width %d), T %d\nparameters: %zu\n", c.n_layer,
                c.d_model, c.n_head, c.head_dim(), c.seq_len, gated_parameter_count(c));
  out += line;
  for (const auto& [k, v] : reader.metadata())
    if (k != "format" && k != "config") {
      std::snprintf(line, sizeof line, "%-11s %s\n", (k + ":").c_str(), v.c_str());
      out += line;
    }
  return out + "sha256:     " + sha256_file(path) + "\n";
}

}  // namespace

ModelFamily gated_model_family() {
  return {"gated", kGatedFormat,
          [](const std::string&, const std::string& format) { return format == kGatedFormat; },
          [](const std::string& path, int batch, int tokens) -> std::unique_ptr<AuditableModel> {
            return std::make_unique<GatedAuditable>(path, batch, tokens);
          },
          [](const nlohmann::json& c) { return c.at("gate").get<std::string>(); },
          gated_info, nullptr};
}

}  // namespace fca
