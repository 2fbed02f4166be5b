#include "ops/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "core/exec_counters.h"
#include "core/phase_timer.h"
#include "ops/simd.h"

namespace fca {

std::string openblas_description() {
  std::string version = openblas_get_config();  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."
  const size_t second_space = version.find(' ', version.find(' ') + 1);
  if (second_space != std::string::npos) version.resize(second_space);
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const std::string source = forced != nullptr && *forced != 0 ? std::string("OPENBLAS_CORETYPE=") + forced : "detected";
  return version + " " + openblas_get_corename() + " (" + source + ")";
}

std::string blas_description() {
  return "sgemm fca tile_matmul " + simd::dispatched_target() + "; dgemm " + openblas_description();
}

void openblas_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha,
              A, lda, B, ldb, beta, C, ldc);
}

// Float GEMM on fca's register-tiled kernel (simd::tile_matmul), blocked as GotoBLAS does. op(B) is
// copied, kPackColumns columns at a time, by all threads together, into panels as wide as the
// kernel's register tile (simd::tile_panel_width()), each panel K rows of contiguous values, so the
// kernel streams it without cache-set conflicts whatever B's row stride (a power of two in every
// model). Then each thread takes a fixed share of C's row chunks and, for each block of
// kColumnBlock columns, runs its chunks over the block's panels (K x 256 values, which stay in its
// L2 cache), the inner dimension in blocks of kInnerBlock; a transposed A is copied per chunk into
// contiguous columns. Two barriers per kPackColumns columns.
//
// Each value of C is alpha times one multiply-add chain per inner block, the blocks in order, added
// to C (after beta): it depends on its own row of op(A) and on op(B), never on M, on the other rows
// or on how rows are split over threads or packed. That is what makes a window's results
// independent of the batch it is computed in.
constexpr int kColumnBlock = 256;
constexpr int kInnerBlock = 256;
constexpr int kRowChunk = 32;      // rows of C per unit of work (four AVX-512 register tiles)
constexpr int kPackColumns = 2048;  // columns of op(B) packed at a time: at most K x 2048 values

template <>
void gemm<float>(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  const PhaseScope phase_scope(Phase::gemm);
  count_gemm_flops(2 * int64_t(M) * N * K, 1);
  if (M <= 0 || N <= 0) return;
  if (beta != 0.0f && beta != 1.0f) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) C[int64_t(i) * ldc + j] *= beta;
  }
  if (K <= 0) {
    if (beta == 0.0f)
#pragma omp parallel for schedule(static)
      for (int i = 0; i < M; ++i) std::fill(C + int64_t(i) * ldc, C + int64_t(i) * ldc + N, 0.0f);
    return;
  }
  const int W = simd::tile_panel_width();  // divides kColumnBlock and kPackColumns (2 .. 32)
  // Packed columns s0 .. s0 + ns - 1 of op(B): panel q (columns s0 + q W ..) holds K rows of wq
  // values at offset q W K. Owned by the calling thread and kept between calls.
  thread_local std::vector<float> packed_b;
  const size_t pack_size = size_t(K) * size_t(std::min(N, kPackColumns));
  if (packed_b.size() < pack_size) packed_b.resize(pack_size);
  float* const packed = packed_b.data();  // thread_local: the other threads need the pointer, not the name
  const int chunks = (M + kRowChunk - 1) / kRowChunk;
#pragma omp parallel
  {
    thread_local std::vector<float> packed_a;  // this thread's chunk of a transposed A: [K, kRowChunk]
    if (trans_a && packed_a.size() < size_t(K) * kRowChunk) packed_a.resize(size_t(K) * kRowChunk);
    const int threads = omp_get_num_threads(), me = omp_get_thread_num();
    const int first = int(int64_t(chunks) * me / threads), last = int(int64_t(chunks) * (me + 1) / threads);
    for (int s0 = 0; s0 < N; s0 += kPackColumns) {
      const int ns = std::min(kPackColumns, N - s0), panels = (ns + W - 1) / W;
#pragma omp for schedule(static)
      for (int q = 0; q < panels; ++q) {
        const int j0 = s0 + q * W, wq = std::min(W, N - j0);
        float* panel = packed + int64_t(q) * W * K;
        if (trans_b) {  // B [N, K]: row j0 + j is column j of the panel, read contiguously
          for (int j = 0; j < wq; ++j) {
            const float* src = B + int64_t(j0 + j) * ldb;
            for (int p = 0; p < K; ++p) panel[int64_t(p) * wq + j] = src[p];
          }
        } else {
          for (int p = 0; p < K; ++p)
            std::copy(B + int64_t(p) * ldb + j0, B + int64_t(p) * ldb + j0 + wq, panel + int64_t(p) * wq);
        }
      }
      // (the implicit barrier: every thread sees the packed columns)
      for (int c0 = s0; c0 < s0 + ns; c0 += kColumnBlock) {
        const int c1 = std::min(s0 + ns, c0 + kColumnBlock);
        for (int chunk = first; chunk < last; ++chunk) {
          const int i0 = chunk * kRowChunk, rows = std::min(kRowChunk, M - i0);
          const float* a = A + (trans_a ? i0 : int64_t(i0) * lda);
          int64_t a_row = lda, a_col = 1;
          if (trans_a) {
            for (int p = 0; p < K; ++p)
              std::copy(a + int64_t(p) * lda, a + int64_t(p) * lda + rows, packed_a.data() + int64_t(p) * rows);
            a = packed_a.data(), a_row = 1, a_col = rows;
          }
          for (int j0 = c0; j0 < c1; j0 += W) {
            const int wq = std::min(W, N - j0);
            const float* panel = packed + int64_t(j0 - s0) * K;
            for (int p0 = 0; p0 < K; p0 += kInnerBlock)
              simd::tile_matmul(C + int64_t(i0) * ldc + j0, ldc, a + p0 * a_col, a_row, a_col, panel + int64_t(p0) * wq,
                                wq, rows, wq, std::min(kInnerBlock, K - p0), alpha, beta != 0.0f || p0 > 0);
          }
        }
      }
#pragma omp barrier
    }
  }
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
