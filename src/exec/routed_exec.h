// `fca exec` for the routed families (conditional-computation spec, "Execution"): what the routing
// really executed (expert rows per layer and expert, tokens per routed block, GEMM FLOPs counted at
// the call sites and checked against the formula of the graph that ran) and what it cost (latency),
// for live routing, replay, cross_input replay (a load-changing condition), dense_experts (MoE), and
// the Dense baselines of the same L, D, H (and, for MoE, the Dense model whose MLP has the MoE's
// total expert parameters). Every configuration is timed later, interleaved with all others (exec/exec.cpp). Baselines are timed with initialised weights: latency and FLOPs do not
// depend on the values of the weights.
#pragma once
#include "core/json.h"
#include <string>

#include "data/corpus.h"
#include "exec/exec.h"
#include "exec/timed_modes.h"

namespace fca {

// A routed model's exec.json entry: every configuration's counted pass and NLL; the passes to time
// and the savings to compare (live against each baseline) are handed to `timed`.
nlohmann::ordered_json measure_moe(const std::string& path, const Corpus& corpus, const ExecOptions& options, TimedModes& timed);
nlohmann::ordered_json measure_mod(const std::string& path, const Corpus& corpus, const ExecOptions& options, TimedModes& timed);

}  // namespace fca
