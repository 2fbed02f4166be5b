// OpenBLAS (what fca links) against BLIS (Debian libblis4-openmp, loaded at run time with dlopen so
// that its CBLAS symbols cannot clash with OpenBLAS's) at the GEMM shapes of the default model
// (B 8, T 256 -> N 2048 rows, D 256, H 4): the forward Linear layers, their two backward products,
// the per-head attention products and a square peak probe. Same thread count for both (2 by
// default, as the CLI). Run: build/fca_blas_bench; results and the decision are in docs/building.md.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"

namespace {

using CblasSgemm = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, int, int, int, float, const float*, int,
                            const float*, int, float, float*, int);

struct Shape {
  const char* what;
  bool trans_a, trans_b;
  int M, N, K;
  bool one_thread = false;  // attention's per-head products run inside fca's OpenMP loop: one thread each
};

// linear_forward: C[N, out] = X[N, in] W[out, in]^T; backward: dW = dY^T X, dX = dY W.
const std::vector<Shape> kShapes = {
    {"qkv", false, true, 2048, 768, 256},       {"proj", false, true, 2048, 256, 256},
    {"fc", false, true, 2048, 1024, 256},       {"mlp_proj", false, true, 2048, 256, 1024},
    {"head", false, true, 2048, 256, 256},      {"fc_dW", true, false, 1024, 256, 2048},
    {"fc_dX", false, false, 2048, 256, 1024},   {"attn_QK", false, true, 64, 256, 64, true},
    {"attn_PV", false, false, 64, 64, 256, true},     {"square", false, true, 2048, 2048, 2048},
};

struct Library {
  std::string name;
  CblasSgemm sgemm;
  void (*set_threads)(int);
};

void set_openblas_threads(int n) { fca::set_threads(n); }
void (*blis_set_threads)(int64_t) = nullptr;
void set_blis_threads(int n) { blis_set_threads(n); }

void run(benchmark::State& state, const Library& lib, const Shape& s, int threads) {
  lib.set_threads(s.one_thread ? 1 : threads);
  const CblasSgemm sgemm = lib.sgemm;
  fca::Rng rng(1);
  std::vector<float> a(size_t(s.M) * s.K), b(size_t(s.K) * s.N), c(size_t(s.M) * s.N);
  for (auto& x : a) x = float(rng.normal());
  for (auto& x : b) x = float(rng.normal());
  const int lda = s.trans_a ? s.M : s.K, ldb = s.trans_b ? s.K : s.N;
  for (auto _ : state) {
    sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans, s.M, s.N, s.K, 1.0f,
          a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.N);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * s.M * s.N * s.K, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  lib.set_threads(threads);
}

}  // namespace

int main(int argc, char** argv) {
  fca::set_threads(0);
  const int threads = fca::thread_count();
  std::vector<Library> libraries = {{"openblas", &cblas_sgemm, &set_openblas_threads}};
  std::printf("OpenBLAS %s kernels, %d threads\n", openblas_get_corename(), threads);
  const char* blis_path = "/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4";
  if (void* blis = dlopen(blis_path, RTLD_NOW | RTLD_LOCAL)) {
    auto sgemm = reinterpret_cast<CblasSgemm>(dlsym(blis, "cblas_sgemm"));
    blis_set_threads = reinterpret_cast<void (*)(int64_t)>(dlsym(blis, "bli_thread_set_num_threads"));
    auto version = reinterpret_cast<const char* (*)()>(dlsym(blis, "bli_info_get_version_str"));
    // The kernel set BLIS picked for this CPU (arch_t is an enum: an int across the C ABI).
    auto arch_id = reinterpret_cast<int (*)()>(dlsym(blis, "bli_arch_query_id"));
    auto arch_name = reinterpret_cast<const char* (*)(int)>(dlsym(blis, "bli_arch_string"));
    const std::string kernels = arch_id != nullptr && arch_name != nullptr ? arch_name(arch_id()) : "?";
    if (kernels == "generic" && std::getenv("BLIS_ARCH_TYPE") == nullptr) {
      // BLIS 0.9.0 does not recognise every CPU (Zen 5, say) and falls back to plain C kernels.
      std::printf("BLIS runs its generic kernels on this CPU: left out (generic C against OpenBLAS's %s kernels is no "
                  "comparison); set BLIS_ARCH_TYPE to its kernel set for this instruction set, e.g. skx or zen3\n",
                  openblas_get_corename());
    } else if (sgemm != nullptr && blis_set_threads != nullptr) {
      blis_set_threads(threads);
      libraries.push_back({"blis", sgemm, &set_blis_threads});
      std::printf("BLIS %s (%s kernels) from %s, %d threads\n", version ? version() : "?", kernels.c_str(), blis_path,
                  threads);
    }
  } else {
    std::printf("BLIS not found (%s: install Debian libblis4-openmp to compare); OpenBLAS only\n", blis_path);
  }
  for (const auto& s : kShapes)
    for (const auto& lib : libraries) {
      const std::string label = std::string("sgemm/") + s.what + "/" + std::to_string(s.M) + "x" + std::to_string(s.N) + "x" +
                                std::to_string(s.K) + (s.one_thread ? "/1thread/" : "/") + lib.name;
      benchmark::RegisterBenchmark(label.c_str(), [lib, &s, threads](benchmark::State& st) { run(st, lib, s, threads); })
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
