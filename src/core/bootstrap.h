// The bootstrap's machinery, shared by the audit's statistics and exec's timing intervals: resample
// indices with replacement, deterministically and independently of the thread count, and read
// percentiles.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace fca {

// The q-quantile (q in [0, 1]) by linear interpolation between order statistics (numpy's default);
// 0 for an empty sample.
double quantile(std::vector<double> values, double q);
// quantile(values, 0.5), bit for bit, in linear time; reorders `values`.
double median_in_place(std::vector<double>& values);

// Resamples per random stream: block k of the resamples draws its indices in order from
// Rng(derive_seed(seed, k)), so the blocks run in parallel and the result does not depend on the
// thread count.
inline constexpr int kResampleBlock = 256;

// statistic(indices) of `resamples` bootstrap resamples of n entries (indices drawn with
// replacement); the caller's statistic must only read shared data.
template <typename F>
std::vector<double> bootstrap(size_t n, int resamples, uint64_t seed, F statistic) {
  if (n == 0) throw Error("bootstrap of an empty sample");
  std::vector<double> out(static_cast<size_t>(resamples > 0 ? resamples : 0));
  const int blocks = (resamples + kResampleBlock - 1) / kResampleBlock;
#pragma omp parallel
  {
    std::vector<size_t> idx(n);
#pragma omp for schedule(static)
    for (int block = 0; block < blocks; ++block) {
      Rng rng(derive_seed(seed, uint64_t(block)));
      const int end = resamples < (block + 1) * kResampleBlock ? resamples : (block + 1) * kResampleBlock;
      for (int b = block * kResampleBlock; b < end; ++b) {
        for (auto& i : idx) i = size_t(rng.below(n));
        out[size_t(b)] = statistic(idx);
      }
    }
  }
  return out;
}

}  // namespace fca
