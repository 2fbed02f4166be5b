// `fca exec` for the Mixture-of-Depths family (docs/routed.md, "Execution"): what the routing
// really executed (tokens per routed block, GEMM FLOPs counted at the call sites and checked against
// the formula of the graph that ran) and what it cost, for live routing, replay, cross_input replay
// and dense_same_shape.
// Every configuration is timed later, interleaved with all others (exec/exec.cpp); baselines are
// timed with initialised weights (latency and FLOPs do not depend on the weights' values).
#pragma once
#include "exec/exec_family.h"

namespace fca {

// The family's entry in the exec layer's family table.
ExecFamily mod_exec_family();

}  // namespace fca
