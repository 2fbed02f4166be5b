// The MoE's grouped expert GEMM (ops/rows.h grouped_linear_forward: one GEMM per expert over its
// contiguous rows) against one dense GEMM over the same total rows, in GFLOP/s and as a share of
// the machine's measured SGEMM peak. Rows per expert come from a seeded random top-k routing, so
// the groups are unequal as in a real MoE layer. Args: tokens N, width D, expert width F, experts E
// (k = 2: N*k rows in all).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "core/rng.h"
#include "exec/timing.h"
#include "ops/gemm.h"
#include "ops/rows.h"

namespace {

double peak_gflops() {
  static const double peak = fca::measure_sgemm_peak_gflops();
  return peak;
}

std::vector<float> random_vector(size_t n, uint64_t seed) {
  fca::Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(rng.normal() * 0.1);
  return v;
}

// Row offsets of E groups for N tokens routed to k = 2 distinct random experts each.
std::vector<int64_t> random_offsets(int N, int E) {
  fca::Rng rng(7);
  std::vector<int64_t> offsets(size_t(E) + 1, 0);
  for (int n = 0; n < N; ++n) {
    const int a = int(rng.below(uint64_t(E)));
    int b = int(rng.below(uint64_t(E - 1)));
    if (b >= a) ++b;
    ++offsets[size_t(a) + 1];
    ++offsets[size_t(b) + 1];
  }
  for (int e = 0; e < E; ++e) offsets[size_t(e) + 1] += offsets[size_t(e)];
  return offsets;
}

void report(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["peak_GFLOP/s"] = peak_gflops();
}

void BM_GroupedExpertGemm(benchmark::State& state) {
  const int N = int(state.range(0)), D = int(state.range(1)), F = int(state.range(2)), E = int(state.range(3));
  const std::vector<int64_t> offsets = random_offsets(N, E);
  const int64_t R = offsets.back();
  const auto x = random_vector(size_t(R) * D, 1), w = random_vector(size_t(E) * F * D, 2), b = random_vector(size_t(E) * F, 3);
  std::vector<float> y(size_t(R) * F);
  for (auto _ : state) {
    for (int e = 0; e < E; ++e) {  // one Linear per expert over its contiguous rows, as the MoE's fc layer
      const int64_t r0 = offsets[size_t(e)], rows = offsets[size_t(e) + 1] - r0;
      if (rows > 0)
        fca::linear_forward(y.data() + r0 * F, x.data() + r0 * D, w.data() + int64_t(e) * F * D, b.data() + int64_t(e) * F,
                            int(rows), D, F);
    }
    benchmark::DoNotOptimize(y.data());
  }
  report(state, 2.0 * double(R) * D * F);
  int64_t smallest = R;
  for (int e = 0; e < E; ++e) smallest = std::min(smallest, offsets[size_t(e) + 1] - offsets[size_t(e)]);
  state.counters["smallest_group"] = double(smallest);
}

void BM_DenseGemmSameRows(benchmark::State& state) {
  const int N = int(state.range(0)), D = int(state.range(1)), F = int(state.range(2));
  const int64_t R = 2 * int64_t(N);
  const auto x = random_vector(size_t(R) * D, 1), w = random_vector(size_t(F) * D, 2), b = random_vector(size_t(F), 3);
  std::vector<float> y(size_t(R) * F);
  for (auto _ : state) {
    fca::linear_forward(y.data(), x.data(), w.data(), b.data(), int(R), D, F);
    benchmark::DoNotOptimize(y.data());
  }
  report(state, 2.0 * double(R) * D * F);
}

// The study's MoE (D 128, F 256, E 8, batch 8 x 128 tokens) and a 2x wider one.
BENCHMARK(BM_GroupedExpertGemm)->Args({1024, 128, 256, 8})->Args({2048, 256, 512, 8})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_DenseGemmSameRows)->Args({1024, 128, 256, 8})->Args({2048, 256, 512, 8})->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
