// `fca exec` for the gated family: live, replay, gates_forced_to_1, and the real skip sweep, where
// blocks whose calibrated static gate is below a threshold are removed from the executed graph.
#pragma once
#include "exec/exec_family.h"

namespace fca {

// The family's entry in the exec layer's family table; its gates are calibratable where the gate
// has a controller (uniform, layerstatic, featuregate).
ExecFamily gated_exec_family();

}  // namespace fca
