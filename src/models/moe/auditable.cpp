#include "models/moe/auditable.h"

#include "core/sha256.h"

namespace fca {

MoeAuditable::MoeAuditable(const std::string& path, int max_batch, int max_tokens)
    : FamilyAuditable(MoeModel<float>::load(path), max_batch, max_tokens), hash_(sha256_file(path)) {}

std::string MoeAuditable::description() const {
  const MoeConfig& c = model_.config();
  return "moe E " + std::to_string(c.n_expert) + " k " + std::to_string(c.top_k) + " L " + std::to_string(c.n_layer) +
         ", D " + std::to_string(c.d_model) + ", H " + std::to_string(c.n_head) + ", T " + std::to_string(c.seq_len);
}

}  // namespace fca
