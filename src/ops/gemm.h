// GEMM through OpenBLAS: C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major.
// Called outside OpenMP regions it uses all threads; inside one (per-head attention) the OpenMP
// build of OpenBLAS runs single-threaded in the calling thread.
#pragma once
#include <cstdint>
#include <string>

namespace fca {

// The OpenBLAS build and the kernels it runs, e.g. "OpenBLAS 0.3.21 Cooperlake (detected)" or
// "OpenBLAS 0.3.21 Haswell (OPENBLAS_CORETYPE=Haswell)". GEMM's bits and speed depend on the
// kernels, which OpenBLAS (DYNAMIC_ARCH) picks at load time from the CPU or from the environment
// variable OPENBLAS_CORETYPE, so provenance records them (docs/building.md).
std::string blas_description();

template <typename T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B,
          int ldb, T beta, T* C, int ldc);

// y[N, out] = x[N, in] W[out, in]^T + b[out]  (b may be null): a Linear layer's forward.
template <typename T>
void linear_forward(T* y, const T* x, const T* weight, const T* bias, int N, int in, int out);

// Linear backward. dx[N,in] = dy W (overwritten when accumulate_dx is false, else added);
// dW[out,in] += dy^T x; db[out] += sum over rows of dy (db may be null). dx may be null.
template <typename T>
void linear_backward(T* dx, T* dweight, T* dbias, const T* dy, const T* x, const T* weight, int N, int in,
                     int out, bool accumulate_dx = false);

// out[c] += sum over rows n of in[n, c]: column-parallel, each column summed in row order.
template <typename T>
void add_column_sums(T* out, const T* in, int64_t N, int C);

}  // namespace fca
