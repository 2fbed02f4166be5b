// `fca exec` for the MoE family (docs/routed.md, "Execution"): what the routing
// really executed (expert rows per layer and expert, GEMM FLOPs counted at the call sites and checked
// against the formula of the graph that ran) and what it cost, for live routing, replay, cross_input
// replay (a load-changing condition), dense_experts, dense_same_shape and the Dense model whose MLP
// has the MoE's total expert parameters.
// Every configuration is timed later, interleaved with all others (exec/exec.cpp); baselines are
// timed with initialised weights (latency and FLOPs do not depend on the weights' values).
#pragma once
#include "exec/exec_family.h"

namespace fca {

// The family's entry in the exec layer's family table.
ExecFamily moe_exec_family();

}  // namespace fca
