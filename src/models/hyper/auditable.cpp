#include "models/hyper/auditable.h"

#include <algorithm>

#include "core/sha256.h"

namespace fca {

HyperAuditable::HyperAuditable(const std::string& path, int max_batch, int max_tokens)
    : FamilyAuditable(load_hyper_model(path), max_batch, max_tokens), hash_(sha256_file(path)) {}

std::string HyperAuditable::description() const {
  const HyperConfig& c = model_.config();
  return std::string(hyper_variant_name(c.variant)) + " n " + std::to_string(c.streams) + " L " + std::to_string(c.n_layer) +
         ", D " + std::to_string(c.d_model) + ", H " + std::to_string(c.n_head) + ", T " + std::to_string(c.seq_len);
}

void HyperAuditable::identity_profile(CoefficientTensor& out) const {
  const HyperConfig& c = model_.config();
  const auto& s = out.shape();
  std::fill(out.values().begin(), out.values().begin() + s.per_window(), 0.0f);
  for (int p = 0; p < s.layers; ++p)
    for (int t = 0; t < s.tokens; ++t) {
      out.at(0, p, t, 0, 1 + c.read_stream(p)) = 1.0f;
      for (int j = 1; j <= c.streams; ++j) {
        out.at(0, p, t, j, 0) = 1.0f;
        out.at(0, p, t, j, j) = 1.0f;
      }
    }
}

void HyperAuditable::structure_removed_profile(const CoefficientTensor& static_profile, CoefficientTensor& out) const {
  // Groups: read (row 0) 0, mixing (rows >= 1, columns >= 1) 1, writes (column 0) kept.
  source_group_uniform_mean(static_profile, [](int, int s, int k) { return s == 0 ? 0 : k == 0 ? -1 : 1; }, out);
}

ModelFamily hyper_model_family() {
  return {"hyper", kHyperFormat,
          [](const std::string&, const std::string& format) { return format == kHyperFormat; },
          [](const std::string& path, int batch, int tokens) -> std::unique_ptr<AuditableModel> {
            return std::make_unique<HyperAuditable>(path, batch, tokens);
          },
          [](const nlohmann::json& c) {
            return c.at("hc_variant").get<std::string>() + " n" + std::to_string(c.at("hc_streams").get<int>());
          },
          nullptr, nullptr};
}

}  // namespace fca
