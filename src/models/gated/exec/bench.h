// `fca bench` for the gated family: a forward pass (live or replayed gates) and an optimizer step
// of a checkpoint or of a fresh model, with FLOPs by the family's formula (exec/flops.h). These are
// the figures of docs/building.md and bench/compare_pytorch.py.
#pragma once
#include "exec/exec_family.h"

namespace fca {

BenchWork gated_bench_forward(const BenchRequest& request);
BenchWork gated_bench_train(const BenchRequest& request);

}  // namespace fca
