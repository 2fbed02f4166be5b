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

// Grouped MLP (the MoE's grouped expert execution): the rows [offsets[g], offsets[g+1]) of x
// [rows, in] go through group g's MLP, mlp_forward (ops/gemm.h) with fc W = fc_weight + g*F*in
// ([F, in]), b = fc_bias + g*F and proj W = proj_weight + g*in*F ([in, F]), b = proj_bias + g*in:
// pre, act [rows, F], y [rows, in]. Two GEMMs per non-empty group over its contiguous rows; in
// bf16 each group's hidden activation stays in bf16 (pre and act unwritten).
template <typename T>
void grouped_mlp_forward(T* y, T* pre, T* act, const T* x, const T* fc_weight, const T* fc_bias, const T* proj_weight,
                         const T* proj_bias, const int64_t* offsets, int groups, int in, int F);
// dx (overwritten, may be null), dweight and dbias (accumulated) per group, as linear_backward.
template <typename T>
void grouped_linear_backward(T* dx, T* dweight, T* dbias, const T* dy, const T* x, const T* weight,
                             const int64_t* offsets, int groups, int in, int out);

}  // namespace fca
