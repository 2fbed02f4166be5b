#include "exec/timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "ops/gemm.h"

namespace fca {

nlohmann::ordered_json TimingStats::to_json() const {
  return {{"runs", runs}, {"median_s", median}, {"p10_s", p10}, {"p90_s", p90},
          {"mean_s", mean}, {"sd_s", sd}, {"min_s", min}};
}

TimingStats time_runs(const std::function<void()>& fn, int warmup, int runs) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  TimingStats s;
  s.runs = runs;
  if (t.empty()) return s;
  std::vector<double> sorted = t;
  std::sort(sorted.begin(), sorted.end());
  // Percentiles by linear interpolation between order statistics (numpy's default).
  auto quantile = [&](double q) {
    const double pos = q * double(sorted.size() - 1);
    const size_t lo = size_t(pos), hi = std::min(lo + 1, sorted.size() - 1);
    return sorted[lo] + (pos - double(lo)) * (sorted[hi] - sorted[lo]);
  };
  s.median = quantile(0.5);
  s.p10 = quantile(0.1);
  s.p90 = quantile(0.9);
  s.min = sorted.front();
  for (double v : t) s.mean += v;
  s.mean /= double(t.size());
  for (double v : t) s.sd += (v - s.mean) * (v - s.mean);
  s.sd = t.size() > 1 ? std::sqrt(s.sd / double(t.size() - 1)) : 0;
  return s;
}

double measure_sgemm_peak_gflops() {
  const int n = 2048;
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n, 0.0f);
  // The faster of fca's GEMM and OpenBLAS's: the best SGEMM this machine runs.
  const TimingStats ours = time_runs([&] { gemm<float>(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); }, 2, 8);
  const TimingStats blas = time_runs([&] { openblas_sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); }, 2, 8);
  return 2.0 * n * double(n) * n / std::min(ours.min, blas.min) / 1e9;
}

}  // namespace fca
