// FLOPs of the gated model's executed GEMMs, by formula (a multiply-add = 2 FLOPs). Attention is
// counted as executed by the blocked causal kernel (ops/attention.h: attention_executed_pairs).
// Element-wise work (LayerNorm, softmax, GELU, gates) is not counted. docs/model.md derives these.
#pragma once
#include <cstdint>

#include "models/gated/config.h"

namespace fca {

// One forward pass over B windows of T tokens, for `layers` executed blocks.
double gated_forward_flops(const GatedConfig& c, int B, int T, int layers);
// One training step (forward + backward: each GEMM once forward and twice backward).
double gated_train_flops(const GatedConfig& c, int B, int T);

}  // namespace fca
