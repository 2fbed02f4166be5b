#include "models/moe/auditable.h"

namespace fca {

std::string MoeAuditTraits::describe(const MoeConfig& c) {
  return "moe E " + std::to_string(c.n_expert) + " k " + std::to_string(c.top_k) + " L " + std::to_string(c.n_layer) +
         ", D " + std::to_string(c.d_model) + ", H " + std::to_string(c.n_head) + ", T " + std::to_string(c.seq_len);
}

}  // namespace fca
