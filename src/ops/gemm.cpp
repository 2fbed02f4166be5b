#include "ops/gemm.h"

#include <cblas.h>

#include <cstdlib>

#include "core/exec_counters.h"
#include "core/phase_timer.h"

namespace fca {

std::string blas_description() {
  std::string version = openblas_get_config();  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."
  const size_t second_space = version.find(' ', version.find(' ') + 1);
  if (second_space != std::string::npos) version.resize(second_space);
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const std::string source = forced != nullptr && *forced != 0 ? std::string("OPENBLAS_CORETYPE=") + forced : "detected";
  return version + " " + openblas_get_corename() + " (" + source + ")";
}

template <>
void gemm<float>(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  const PhaseScope phase_scope(Phase::gemm);
  count_gemm_flops(2 * int64_t(M) * N * K, 1);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void gemm<double>(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
                  const double* B, int ldb, double beta, double* C, int ldc) {
  const PhaseScope phase_scope(Phase::gemm);
  count_gemm_flops(2 * int64_t(M) * N * K, 1);
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <typename T>
void add_column_sums(T* out, const T* in, int64_t N, int C) {
  // Blocks of 16 columns keep each thread's reads within cache lines of the rows it walks.
  const int blocks = (C + 15) / 16;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * 16, c1 = c0 + 16 < C ? c0 + 16 : C;
    T acc[16] = {};
    for (int64_t n = 0; n < N; ++n) {
      const T* row = in + n * C;
      for (int c = c0; c < c1; ++c) acc[c - c0] += row[c];
    }
    for (int c = c0; c < c1; ++c) out[c] += acc[c - c0];
  }
}

template <typename T>
void linear_forward(T* y, const T* x, const T* weight, const T* bias, int N, int in, int out) {
  const PhaseScope phase_scope(Phase::elementwise);
  if (bias != nullptr) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < out; ++o) y[int64_t(n) * out + o] = bias[o];
  }
  gemm<T>(false, true, N, out, in, T(1), x, in, weight, in, bias != nullptr ? T(1) : T(0), y, out);
}

template <typename T>
void linear_backward(T* dx, T* dweight, T* dbias, const T* dy, const T* x, const T* weight, int N, int in,
                     int out, bool accumulate_dx) {
  const PhaseScope phase_scope(Phase::elementwise);
  if (dx != nullptr) gemm<T>(false, false, N, in, out, T(1), dy, out, weight, in, accumulate_dx ? T(1) : T(0), dx, in);
  gemm<T>(true, false, out, in, N, T(1), dy, out, x, in, T(1), dweight, in);
  if (dbias != nullptr) add_column_sums(dbias, dy, N, out);
}

#define FCA_INSTANTIATE(T)                                                                       \
  template void add_column_sums<T>(T*, const T*, int64_t, int);                                 \
  template void linear_forward<T>(T*, const T*, const T*, const T*, int, int, int);             \
  template void linear_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int, bool);
FCA_INSTANTIATE(float)
FCA_INSTANTIATE(double)
#undef FCA_INSTANTIATE

}  // namespace fca
