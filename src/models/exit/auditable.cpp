#include "models/exit/auditable.h"

#include <cstdio>

namespace fca {

std::string ExitAuditTraits::describe(const ExitConfig& c) {
  char threshold[32];
  std::snprintf(threshold, sizeof threshold, "%g", c.exit_threshold);
  return std::string("exit m ") + std::to_string(c.min_exit) + " threshold " + threshold + " L " +
         std::to_string(c.n_layer) + ", D " + std::to_string(c.d_model) + ", H " + std::to_string(c.n_head) + ", T " +
         std::to_string(c.seq_len);
}

ModelFamily exit_model_family() {
  return {"exit", kExitFormat,
          [](const std::string&, const std::string& format) { return format == kExitFormat; },
          [](const std::string& path, int batch, int tokens) -> std::unique_ptr<AuditableModel> {
            return std::make_unique<ExitAuditable>(path, batch, tokens);
          },
          [](const nlohmann::json& c) {
            char buf[48];
            std::snprintf(buf, sizeof buf, "exit m%d t%g", c.at("min_exit").get<int>(), c.at("exit_threshold").get<double>());
            return std::string(buf);
          },
          nullptr, nullptr};
}

}  // namespace fca
