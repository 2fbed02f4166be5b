// `fca exec` for MUDD folders: live (the DA generators compute the mixing weights), replay (recorded
// weights supplied) and identity_mixing (one-hot newest source, the mixing still executed).
#pragma once
#include "exec/exec_family.h"

namespace fca {

// The family's entry in the exec layer's family table.
ExecFamily mudd_exec_family();

}  // namespace fca
