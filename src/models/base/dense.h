// The FLOP formula of the Dense transformer of the shared pre-norm block (dense_block_forward,
// models/base/block.h): what every pre-norm family's unrouted blocks and tied head count. The Dense
// reference of exec (dense_same_shape) is the gated family's Dense variant (g = 1), which adds its
// unit gate's evaluations and h + 1 F mixing to this formula (docs/exec.md).
#pragma once

namespace fca {

// GEMM FLOPs of `layers` blocks and the tied head over B windows of T tokens: the four linear maps
// (12 D^2 per row), QK^T and PV over the pairs the blocked causal kernel executes, and the head
// (2 D 256 per row).
double dense_forward_flops(int d_model, int B, int T, int layers);

}  // namespace fca
