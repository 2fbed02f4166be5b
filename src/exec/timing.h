// Timing statistics and the machine's measured SGEMM peak, for benchmarks and `fca exec`.
#pragma once
#include <functional>
#include "core/json.h"
#include <vector>

namespace fca {

struct TimingStats {
  int runs = 0;
  double median = 0, p10 = 0, p90 = 0, mean = 0, sd = 0, min = 0;  // seconds
  nlohmann::ordered_json to_json() const;
};

// Runs fn `warmup` times untimed, then `runs` times timed (steady clock).
TimingStats time_runs(const std::function<void()>& fn, int warmup, int runs);

// Best achieved SGEMM GFLOP/s on this machine with the current thread count: square n x n x n
// products (n = 2048), best of several, warm, by fca's GEMM or OpenBLAS's, whichever is faster.
// The reference for "fraction of peak".
double measure_sgemm_peak_gflops();

}  // namespace fca
