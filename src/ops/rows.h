// Row routing for conditional computation: gathering the rows a routed computation needs into a
// contiguous buffer, running one Linear per group of rows, and combining or scattering the results
// back. Used by MoE (tokens grouped by expert) and Mixture-of-Depths (the selected subsequence).
//
// Every kernel is deterministic for any thread count: each output row is written by exactly one
// iteration, and sums over a token's entries run in entry order.
#pragma once
#include <cstdint>

namespace fca {

// out[r, :] = x[rows[r], :] for r < R; x [*, C], out [R, C].
template <typename T>
void gather_rows(T* out, const T* x, const int32_t* rows, int64_t R, int C);

// y[rows[r], :] += weights[r] * src[r, :] for r < R (weights null: 1). The rows must be distinct.
template <typename T>
void scatter_add_rows(T* y, const T* src, const int32_t* rows, const T* weights, int64_t R, int C);

// Token n combines S entries of a row buffer: y[n, :] (=, or += with accumulate) sum over j < S of
// weights[n*S + j] * src[rows[n*S + j], :] (weights null: 1), j in order. y [N, C].
template <typename T>
void combine_rows(T* y, const T* src, const int32_t* rows, const T* weights, int64_t N, int S, int C, bool accumulate);

// Backward of combine_rows (each src row referenced by at most one (n, j)): dsrc[rows[n*S+j], :] =
// weights[n*S+j] * dy[n, :]; dweights[n*S+j] = <dy[n, :], src[rows[n*S+j], :]> (dweights may be null).
template <typename T>
void combine_rows_backward(T* dsrc, T* dweights, const T* dy, const T* src, const int32_t* rows, const T* weights,
                           int64_t N, int S, int C);

// Grouped Linear: the rows [offsets[g], offsets[g+1]) of x [rows, in] are multiplied by group g's
// weight: y[r, :] = x[r, :] W_g^T + b_g with W_g = weight + g*out*in ([out, in]) and b_g = bias + g*out.
// One GEMM per non-empty group over its contiguous rows (the MoE's grouped expert execution).
template <typename T>
void grouped_linear_forward(T* y, const T* x, const T* weight, const T* bias, const int64_t* offsets, int groups, int in,
                            int out);
// dx (overwritten, may be null), dweight and dbias (accumulated) per group, as linear_backward.
template <typename T>
void grouped_linear_backward(T* dx, T* dweight, T* dbias, const T* dy, const T* x, const T* weight,
                             const int64_t* offsets, int groups, int in, int out);

}  // namespace fca
