#include "models/mod/auditable.h"

#include <cstdio>

#include "core/sha256.h"

namespace fca {

ModAuditable::ModAuditable(const std::string& path, int max_batch, int max_tokens)
    : FamilyAuditable(ModModel<float>::load(path), max_batch, max_tokens), hash_(sha256_file(path)) {}

std::string ModAuditable::description() const {
  const ModConfig& c = model_.config();
  char capacity[32];
  std::snprintf(capacity, sizeof capacity, "%g", c.capacity);
  return std::string("mod c ") + capacity + " every " + std::to_string(c.routed_every) + " L " + std::to_string(c.n_layer) +
         ", D " + std::to_string(c.d_model) + ", H " + std::to_string(c.n_head) + ", T " + std::to_string(c.seq_len);
}

}  // namespace fca
