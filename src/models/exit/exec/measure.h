// `fca exec` for early-exit models (docs/exit.md, "Execution"): live (the config's threshold), replay,
// the threshold sweep, full depth, every fixed depth of the same weights (the static truncation
// curve), cross_input and dense_same_shape; counters checked against the depth record's formulas
// (flops.h) in every mode; NLL, depth histogram and FLOPs by kind on the evaluation windows; the
// sweep's NLL against the fixed-depth curve at equal FLOPs; savings against full depth.
#pragma once
#include "exec/exec_family.h"

namespace fca {

ExecFamily exit_exec_family();

}  // namespace fca
