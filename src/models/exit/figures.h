// What a pass of an exit model runs, from its depth record alone (docs/exit.md, "FLOPs"): rows per
// block, need-based propagated rows, blocks executed, classifier evaluations, and FLOPs by kind.
// exec checks the counters of every counted pass against these (exec/flops.h), and the audit
// reports them per condition; the formulas never read a counter.
#pragma once
#include <cstdint>
#include <vector>

#include "models/exit/model.h"

namespace fca {

struct ExitPassFigures {
  int blocks = 0;                         // blocks with at least one running row
  std::vector<int64_t> active, propagated;  // |A_k| and |P_k| per block k = 1..L
  int64_t controller_evaluations = 0;     // live: exit points m..L-1 whose block ran
  // FLOPs (multiply-add = 2): trunk GEMMs 24 D^2 per running row; attention 4 D per executed
  // (query, key) pair (attention_row_pairs: the tiled kernel's keys of the row); K/V propagation
  // 4 D^2 per propagated row; the classifier (9 D + 3) per running row at an exit point (live only);
  // the head 2 D V per token.
  double trunk = 0, attention = 0, propagation = 0, controller = 0, head = 0;
  // Eager (decode-faithful) propagation: (L - d) 4 D^2 per token.
  double propagation_decode = 0;
  // The GEMM FLOPs of blocks 1..m (every row, no decision yet): what a replay that reuses the
  // kept prefix does not run (prefix reuse, docs/exit.md).
  double prefix_gemm = 0;
  double gemm() const { return trunk + attention + propagation + head; }
  double total() const { return gemm() + controller; }
};

// depth [B*T] (row b*T + t), each in [m, L]; live: the classifier runs (its FLOPs and evaluations).
ExitPassFigures exit_pass_figures(const ExitConfig& config, const int32_t* depth, int B, int T, bool live);

}  // namespace fca
