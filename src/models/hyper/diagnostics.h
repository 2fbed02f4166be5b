// Diagnostics of hyper-connection coefficients computable from a coefficient cache alone
// (docs/hyper.md), and the mHC manifold check of what an intervention replays. Each
// square C_p [n+1, n+1] per site p and token: row 0 the read (columns 1..n), column 0 the write
// (rows 1..n), the block M_p[j][i] = C_p[1+j][1+i] the mixing, so that X_{p+1} = M_p X_p + write F.
#pragma once
#include "core/json.h"
#include "models/coefficient_tensor.h"
#include "models/hyper/config.h"

namespace fca {

// max over sites, tokens and columns of |sum_j M_p[j][i] - 1| in window `window` (mHC's mixing is
// doubly stochastic live; a per-row token shuffle breaks its column sums). Rows sums are not
// checked: every intervention moves whole rows, which keep theirs.
double hyper_column_sum_deviation(const HyperConfig& config, const CoefficientView& coefficients, int window);

// Over every window and token of `evaluation`, in double:
// - composite_gain: P = M_{2L-1} ... M_0 per token; the largest |row sum| (forward gain) and
//   |column sum| (backward gain), the smallest column sum and the largest |log column sum|, and the
//   [mHC] figure: per window the mean over tokens of the largest |row sum| (column sum), the
//   largest over windows;
// - connection_matrix: the weight of writer j's output (the embedding, with weight 1 on every
//   stream, or site j's branch) in reader k's input (site k's read, or the head's sum over streams),
//   read_k M_{k-1} ... M_{j+1} write_j, averaged over tokens ([HC] section 4.5);
// - distance_from_identity: per site the mean and largest Frobenius norm of M_p - I over tokens,
//   and that of the mean M_p.
nlohmann::ordered_json hyper_cache_diagnostics(const HyperConfig& config, const CoefficientView& evaluation);

}  // namespace fca
