// The skip family's record kind, block_skip (skip_kind.cpp): installed into the models', the
// audit's and the report's record-kind tables by install_skip_family (idempotent).
#pragma once

namespace fca::toy {

void install_block_skip_kind();

}  // namespace fca::toy
