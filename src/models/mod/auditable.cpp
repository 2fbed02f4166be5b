#include "models/mod/auditable.h"

#include <cstdio>

namespace fca {

std::string ModAuditTraits::describe(const ModConfig& c) {
  char capacity[32];
  std::snprintf(capacity, sizeof capacity, "%g", c.capacity);
  return std::string("mod c ") + capacity + " every " + std::to_string(c.routed_every) + " L " + std::to_string(c.n_layer) +
         ", D " + std::to_string(c.d_model) + ", H " + std::to_string(c.n_head) + ", T " + std::to_string(c.seq_len);
}

ModelFamily mod_model_family() {
  return {"mod", kModFormat,
          [](const std::string&, const std::string& format) { return format == kModFormat; },
          [](const std::string& path, int batch, int tokens) -> std::unique_ptr<AuditableModel> {
            return std::make_unique<ModAuditable>(path, batch, tokens);
          },
          [](const nlohmann::json& c) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "mod c%g", c.at("capacity").get<double>());
            return std::string(buf);
          },
          nullptr, nullptr};
}

}  // namespace fca
