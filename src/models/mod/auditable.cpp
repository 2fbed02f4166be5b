#include "models/mod/auditable.h"

#include <cstdio>

namespace fca {

std::string ModAuditTraits::describe(const ModConfig& c) {
  char capacity[32];
  std::snprintf(capacity, sizeof capacity, "%g", c.capacity);
  return std::string("mod c ") + capacity + " every " + std::to_string(c.routed_every) + " L " + std::to_string(c.n_layer) +
         ", D " + std::to_string(c.d_model) + ", H " + std::to_string(c.n_head) + ", T " + std::to_string(c.seq_len);
}

}  // namespace fca
