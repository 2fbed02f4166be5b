#include "models/moe/auditable.h"

namespace fca {

std::string MoeAuditTraits::describe(const MoeConfig& c) {
  return "moe E " + std::to_string(c.n_expert) + " k " + std::to_string(c.top_k) + " L " + std::to_string(c.n_layer) +
         ", D " + std::to_string(c.d_model) + ", H " + std::to_string(c.n_head) + ", T " + std::to_string(c.seq_len);
}

ModelFamily moe_model_family() {
  return {"moe", kMoeFormat,
          [](const std::string&, const std::string& format) { return format == kMoeFormat; },
          [](const std::string& path, int batch, int tokens) -> std::unique_ptr<AuditableModel> {
            return std::make_unique<MoeAuditable>(path, batch, tokens);
          },
          [](const nlohmann::json& c) {
            return "moe E" + std::to_string(c.at("n_expert").get<int>()) + " k" + std::to_string(c.at("top_k").get<int>());
          },
          nullptr, nullptr};
}

}  // namespace fca
