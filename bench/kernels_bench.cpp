// Kernel benchmarks (Google Benchmark): GEMM and attention in GFLOP/s, and the memory-bound
// kernels around them, at the shapes of the default model (B 8, T 256, D 256, H 4).
// Run: build/fca_kernels_bench (make bench). FLOP convention: a multiply-add is 2 FLOPs.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/norms.h"

namespace fca {
namespace {

std::vector<float> random_vector(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(rng.normal() * scale);
  return v;
}

constexpr int kB = 8, kT = 256, kD = 256, kH = 4, kN = kB * kT;

void BM_Sgemm(benchmark::State& state) {
  const int M = int(state.range(0)), N = int(state.range(1)), K = int(state.range(2));
  auto a = random_vector(size_t(M) * K, 1), b = random_vector(size_t(K) * N, 2);
  std::vector<float> c(size_t(M) * N);
  for (auto _ : state) gemm<float>(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
// The same products on OpenBLAS (whatever kernels it picked: see the provenance of `fca bench`), the
// second contestant of the SGEMM peak probe.
void BM_SgemmOpenBLAS(benchmark::State& state) {
  const int M = int(state.range(0)), N = int(state.range(1)), K = int(state.range(2));
  auto a = random_vector(size_t(M) * K, 1), b = random_vector(size_t(K) * N, 2);
  std::vector<float> c(size_t(M) * N);
  for (auto _ : state) openblas_sgemm(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
// The default model's Linear layers (N = B*T rows): qkv, proj, fc, mlp proj; a square peak probe; and
// the MUDDPythia-1.4B Linear layers at batch 1 x 256 tokens (qkv, attention out, fc, mlp proj): few
// rows against large weights, where packing the weights costs most per FLOP; and the audit's small model.
void gemm_shapes(benchmark::internal::Benchmark* b) {
  b->Args({kN, 3 * kD, kD})->Args({kN, kD, kD})->Args({kN, 4 * kD, kD})->Args({kN, kD, 4 * kD});
  b->Args({2048, 2048, 2048});
  b->Args({256, 6144, 2048})->Args({256, 2048, 2048})->Args({256, 8192, 2048})->Args({256, 2048, 8192});
  // The audit benchmark's L4 D128 model at 4 windows of 128 tokens (bench/compare_audit_pytorch.py):
  // qkv, proj, fc, mlp proj with 128 and 512 inner values.
  b->Args({512, 384, 128})->Args({512, 128, 128})->Args({512, 512, 128})->Args({512, 128, 512});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_Sgemm)->Apply(gemm_shapes);
BENCHMARK(BM_SgemmOpenBLAS)->Apply(gemm_shapes);

// The default model's biased Linear layers, the bias (and for fc the GELU) fused into the GEMM
// against unfused, the same values bitwise (tests/gemm_test.cpp). Args: output width (768 qkv,
// 1024 fc), variant: 0 unfused (qkv: fill with the bias, GEMM with beta 1; fc: GEMM, then one pass
// over its rows for bias and GELU), 1 fused (linear_forward, linear_gelu_forward: what the model
// runs), 2 the GEMM alone. Inputs are LayerNorm outputs against weights at their initial scale
// (N(0, 0.02^2)): fc pre-activations of standard deviation 0.32, GELU's working range.
void BM_LinearLayer(benchmark::State& state) {
  const int out = int(state.range(0)), variant = int(state.range(1));
  const bool fc = out == 4 * kD;
  auto x = random_vector(size_t(kN) * kD, 1), w = random_vector(size_t(out) * kD, 2, 0.02);
  auto bias = random_vector(size_t(out), 3, 0.02);
  std::vector<float> pre(size_t(kN) * out), act(pre.size());
  for (auto _ : state) {
    if (variant == 1) {
      if (fc) linear_gelu_forward<float>(pre.data(), act.data(), x.data(), w.data(), bias.data(), kN, kD, out);
      else linear_forward<float>(pre.data(), x.data(), w.data(), bias.data(), kN, kD, out);
    } else if (variant == 2 || fc) {
      gemm<float>(false, true, kN, out, kD, 1.0f, x.data(), kD, w.data(), kD, 0.0f, pre.data(), out);
      if (variant == 0) bias_gelu_tanh_forward<float>(pre.data(), act.data(), bias.data(), kN, out);
    } else {
#pragma omp parallel for schedule(static)
      for (int n = 0; n < kN; ++n) std::copy(bias.begin(), bias.end(), pre.begin() + int64_t(n) * out);
      gemm<float>(false, true, kN, out, kD, 1.0f, x.data(), kD, w.data(), kD, 1.0f, pre.data(), out);
    }
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * kN * out * kD, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_LinearLayer)
    ->ArgsProduct({{3 * kD, 4 * kD}, {0, 1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The 1.4B shapes as a forward pass meets them: each product reads weights that are not in any
// cache (a model of 5.7 GB streams its weights from memory), here by cycling through copies of B
// that together are 8x the L3 cache (32 MB on this machine's EPYC: 256 MB).
void BM_SgemmStreamedWeights(benchmark::State& state) {
  const int M = int(state.range(0)), N = int(state.range(1)), K = int(state.range(2));
  const size_t b_size = size_t(K) * N, copies = std::max<size_t>(2, (size_t(256) << 20) / (b_size * sizeof(float)));
  auto a = random_vector(size_t(M) * K, 1);
  std::vector<std::vector<float>> b;
  for (size_t i = 0; i < copies; ++i) b.push_back(random_vector(b_size, 2 + i));
  std::vector<float> c(size_t(M) * N);
  size_t next = 0;
  for (auto _ : state) {
    gemm<float>(false, true, M, N, K, 1.0f, a.data(), K, b[next].data(), K, 0.0f, c.data(), N);
    next = (next + 1) % copies;
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_SgemmStreamedWeights)
    ->Args({256, 6144, 2048})->Args({256, 2048, 2048})->Args({256, 8192, 2048})->Args({256, 2048, 8192})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

// Arg 0: probabilities kept for a backward; 1: kept, with featuregate's statistics; 2: an inference
// pass (no probabilities buffer, no statistics).
void BM_AttentionForward(benchmark::State& state) {
  const bool with_stats = state.range(0) == 1, keep_probs = state.range(0) != 2;
  auto qkv = random_vector(size_t(kN) * 3 * kD, 3);
  std::vector<float> out(size_t(kN) * kD), probs(size_t(kB) * kH * kT * kT), logp(probs.size()), prev(probs.size()),
      feats(size_t(kB) * kH * kT * 3);
  std::vector<float> scratch(size_t(thread_count() * attention_scratch_per_thread(kT, kD / kH, false)));
  AttentionStats<float> stats{logp.data(), prev.data(), feats.data()};
  for (auto _ : state)
    attention_forward(out.data(), keep_probs ? probs.data() : nullptr, scratch.data(), with_stats ? &stats : nullptr, qkv.data(),
                      kB, kT, kD, kH);
  // The products' executed work: Q K^T and P V over the executed (query, key) pairs.
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * kB * double(attention_executed_pairs(kT)) * kD,
                                                 benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_AttentionForward)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_AttentionBackward(benchmark::State& state) {
  auto qkv = random_vector(size_t(kN) * 3 * kD, 3), dout = random_vector(size_t(kN) * kD, 4);
  std::vector<float> out(size_t(kN) * kD), probs(size_t(kB) * kH * kT * kT), dqkv(qkv.size()),
      scratch(size_t(thread_count() * attention_scratch_per_thread(kT, kD / kH, true)));
  attention_forward<float>(out.data(), probs.data(), scratch.data(), nullptr, qkv.data(), kB, kT, kD, kH);
  for (auto _ : state) attention_backward(dqkv.data(), scratch.data(), dout.data(), probs.data(), qkv.data(), kB, kT, kD, kH);
  // Four products (dP, dQ over the executed pairs; dV, dK over about as many key-side pairs).
  state.counters["GFLOP/s"] = benchmark::Counter(8.0 * kB * double(attention_executed_pairs(kT)) * kD,
                                                 benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_AttentionBackward)->Unit(benchmark::kMillisecond)->UseRealTime();

// The yardsticks of the memory-bound kernels: the same bytes read and written (8 per element) by a
// plain copy split across the threads like the kernels, at the kernels' size (2M floats, 16 MB in
// and out: what the cache hierarchy delivers to them) and at 64M floats (512 MB: main memory).
void BM_Copy(benchmark::State& state) {
  const int64_t n = state.range(0), chunk = 4096;
  auto x = random_vector(size_t(n), 5);
  std::vector<float> y(x.size());
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < (n + chunk - 1) / chunk; ++c)
      std::memcpy(y.data() + c * chunk, x.data() + c * chunk, sizeof(float) * size_t(std::min(chunk, n - c * chunk)));
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * n * 8);
}
BENCHMARK(BM_Copy)->Arg(int64_t(kN) * 4 * kD)->Arg(int64_t(1) << 26)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Arg: the inputs' standard deviation. 16 is what the fc layer's products give at the default
// shape (a sum of 256 products): large |x|, where tanh saturates.
void BM_GeluForward(benchmark::State& state) {
  auto x = random_vector(size_t(kN) * 4 * kD, 5, double(state.range(0)));
  std::vector<float> y(x.size());
  for (auto _ : state) gelu_tanh_forward(y.data(), x.data(), int64_t(x.size()));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(x.size()) * 8);
}
BENCHMARK(BM_GeluForward)->Arg(1)->Arg(16)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The exact (erf) GELU of MUDD's FFN, inputs N(0, 1).
void BM_GeluErfForward(benchmark::State& state) {
  auto x = random_vector(size_t(kN) * 4 * kD, 5);
  std::vector<float> y(x.size());
  for (auto _ : state) gelu_erf_forward(y.data(), x.data(), int64_t(x.size()));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(x.size()) * 8);
}
BENCHMARK(BM_GeluErfForward)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Args: rows, row width (the default shape; an audit batch of 8 windows of 128 tokens at D 128).
void BM_LayerNormForward(benchmark::State& state) {
  const int N = int(state.range(0)), D = int(state.range(1));
  auto x = random_vector(size_t(N) * D, 6), w = random_vector(size_t(D), 7), b = random_vector(size_t(D), 8);
  std::vector<float> y(x.size()), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
  for (auto _ : state) layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, D);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(x.size()) * 8);
}
BENCHMARK(BM_LayerNormForward)->Args({kN, kD})->Args({1024, 128})->Unit(benchmark::kMicrosecond)->UseRealTime();

// MUDD's QK-norm: an RMSNorm per (token, head) of 32 values, 4 heads per row of 128 (in place).
void BM_RmsNormHeads(benchmark::State& state) {
  const int N = 1024, G = 4, C = 32;
  auto x = random_vector(size_t(N) * G * C, 6), w = random_vector(size_t(C), 7);
  std::vector<float> rstd(size_t(N) * G);
  for (auto _ : state) rmsnorm_forward(x.data(), rstd.data(), x.data(), w.data(), N, G, C, int64_t(G) * C, 1e-6);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(x.size()) * 8);
}
BENCHMARK(BM_RmsNormHeads)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_GeluBackward(benchmark::State& state) {
  auto x = random_vector(size_t(kN) * 4 * kD, 5), dy = random_vector(x.size(), 9);
  std::vector<float> dx(x.size());
  for (auto _ : state) gelu_tanh_backward(dx.data(), dy.data(), x.data(), int64_t(x.size()));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(x.size()) * 12);
}
BENCHMARK(BM_GeluBackward)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The causal softmax of the default attention (B H = 32 score matrices of T x T): each row t reads
// its t + 1 scores and writes all T entries (the probabilities and the zeros above the diagonal).
void BM_CausalSoftmax(benchmark::State& state) {
  const auto scores = random_vector(size_t(kB) * kH * kT * kT, 10, 3.0);
  std::vector<float> p(scores.size());
  for (auto _ : state) {
    state.PauseTiming();
    std::copy(scores.begin(), scores.end(), p.begin());
    state.ResumeTiming();
    causal_softmax(p.data(), kB * kH, kT);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kB) * kH * (int64_t(kT) * (kT + 1) / 2 + int64_t(kT) * kT) * 4);
}
BENCHMARK(BM_CausalSoftmax)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace fca

int main(int argc, char** argv) {
  fca::set_threads(0);  // both cores, as the CLI does by default
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
