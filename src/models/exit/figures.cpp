#include "models/exit/figures.h"

#include <string>

#include "core/error.h"
#include "models/base/stream.h"
#include "ops/attention.h"

namespace fca {

ExitPassFigures exit_pass_figures(const ExitConfig& c, const int32_t* depth, int B, int T, bool live) {
  const int L = c.n_layer, m = c.min_exit;
  const double D = c.d_model;
  ExitPassFigures f;
  f.active.assign(size_t(L), 0);
  f.propagated.assign(size_t(L), 0);
  for (int64_t n = 0; n < int64_t(B) * T; ++n)
    if (depth[n] < m || depth[n] > L)
      throw Error("depth " + std::to_string(depth[n]) + " of token " + std::to_string(n) + " is outside [" +
                  std::to_string(m) + ", " + std::to_string(L) + "]");
  for (int k = 1; k <= L; ++k) {
    int64_t active = 0, propagated = 0, pairs = 0;
    for (int b = 0; b < B; ++b) {
      const int32_t* d = depth + int64_t(b) * T;
      int t_max = -1;
      for (int t = 0; t < T; ++t)
        if (d[t] >= k) {
          ++active;
          pairs += attention_row_pairs(t, T);
          t_max = t;
        }
      for (int u = 0; u < t_max; ++u) propagated += d[u] < k;
    }
    if (active == 0) break;  // nothing runs from here on: no block, no classifier
    f.blocks = k;
    f.active[size_t(k - 1)] = active;
    f.propagated[size_t(k - 1)] = propagated;
    f.trunk += 24.0 * D * D * double(active);
    f.attention += 4.0 * D * double(pairs);
    if (k <= m) f.prefix_gemm += 24.0 * D * D * double(active) + 4.0 * D * double(pairs);
    f.propagation += 4.0 * D * D * double(propagated);
    if (live && k >= m && k <= L - 1) {
      f.controller += (9.0 * D + 3.0) * double(active);
      ++f.controller_evaluations;
    }
  }
  f.head = 2.0 * D * kByteVocab * double(int64_t(B) * T);
  for (int64_t n = 0; n < int64_t(B) * T; ++n) f.propagation_decode += double(L - depth[n]) * 4.0 * D * D;
  return f;
}

}  // namespace fca
