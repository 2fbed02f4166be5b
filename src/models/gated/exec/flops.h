// FLOPs of the gated model by formula, under the convention of core/exec_counters.h: GEMMs (a
// multiply-add = 2 FLOPs; attention as executed by the blocked causal kernel, ops/attention.h:
// attention_executed_pairs), the controller's non-GEMM arithmetic and the gate products. The trunk's
// element-wise work (LayerNorm, softmax, GELU, residual adds) is not counted. docs/exec.md derives
// these; exec checks them against the counters of every measured pass.
#pragma once
#include <cstdint>

#include "models/gated/config.h"

namespace fca {

// One forward pass over B windows of T tokens, for `layers` executed blocks.
double gated_forward_flops(const GatedConfig& c, int B, int T, int layers);
// The live controller's non-GEMM FLOPs over `layers` executed blocks: for featuregate the attention
// statistics (entropy, KL from block 1 on, log-partition), the features and the gate; one sigmoid
// per block for uniform and layerstatic; none for dense and fixed.
double gated_controller_flops(const GatedConfig& c, int B, int T, int layers);
// Calls into controller code in a live pass over `layers` executed blocks: the gate function once
// per block (every gate kind, dense included: its "controller" returns 1), and featuregate's features
// once more.
int64_t gated_controller_evaluations(const GatedConfig& c, int layers);
// h + g F in each executed block: 2 FLOPs per element.
double gated_mixing_flops(const GatedConfig& c, int B, int T, int layers);
// One training step (forward + backward: each GEMM once forward and twice backward).
double gated_train_flops(const GatedConfig& c, int B, int T);

}  // namespace fca
