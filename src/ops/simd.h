// Float kernels written once with Google Highway and dispatched at run time to the best target
// this CPU supports among those compiled in (SSSE3, SSE4, AVX2, AVX-512 "AVX3", AVX3_DL on x86).
//
// Every kernel does the same float operations in the same order on every target: no fused
// multiply-add (Mul then Add), reductions over 16 virtual lanes whatever the vector width (one
// AVX-512 vector, two AVX2 vectors, four SSE4 vectors) combined in lane order, element-wise
// functions lane by lane. Results are therefore bitwise identical across targets and equal to the
// scalar templates of ops/fast_math.h (tests/simd_test.cpp forces each target and compares bits).
// The one exception is the sign of a zero maximum (x86 max returns its second operand on ties of
// +0 and -0), which no result of fca depends on.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fca::simd {

// The target the kernels dispatch to now, e.g. "AVX3", "AVX2", "SSE4" (recorded in provenance).
std::string dispatched_target();
// Targets compiled into this binary that this CPU supports: (Highway target bit, name).
struct Target {
  int64_t bit;
  std::string name;
};
std::vector<Target> available_targets();
// Tests only: dispatch to `bit` from now on (0: back to the CPU's best). Not thread-safe.
void force_target(int64_t bit);

// 16-lane sum, dot product and maximum of x[0..n) (n >= 1 for the maximum): the exact operation
// order of lane_sum / lane_dot / lane_max in ops/fast_math.h.
float lane_sum(const float* x, int n);
float lane_dot(const float* x, const float* y, int n);
float lane_max(const float* x, int n);
// 16-lane sum of ((a[i] * b[i]) * (x[i] - mean)) * scale, i < n (LayerNorm backward).
float lane_centered_product_sum(const float* a, const float* b, const float* x, int n, float mean, float scale);
// row[i] = exp_approx(row[i] - shift) for i < n; returns lane_sum(row, n) of the result.
float exp_shifted_sum(float* row, int n, float shift);
// One causal softmax row (ops/attention.cpp). On entry row[0..n) holds scores s; on exit the
// probabilities p = exp_approx(s - max) * (1 / sum), sum = the 16-lane sum of the exponentials (n
// >= 1). Without logp that is all (max and sum are returned). With logp, also logp[i] = (s[i] - max)
// - log(sum), neg_entropy = lane_dot(p, logp) and, with prev_logp, cross = lane_dot(p, prev_logp):
// the operations of lane_max, exp_shifted_sum, scale and lane_dot in ops/fast_math.h, fused into
// three passes.
struct SoftmaxRowStats {
  float max = 0, sum = 0, log_sum = 0, neg_entropy = 0, cross = 0;
};
SoftmaxRowStats softmax_row(float* row, int n, float* logp, const float* prev_logp);
// 16-lane sum of (x[i] - mean)^2, i < n (LayerNorm's two-pass variance).
float lane_squared_deviation_sum(const float* x, int n, float mean);

// LayerNorm of `rows` rows of n values (ops/layernorm.cpp), row r at x + r ldx, written to y + r ldy:
// mean = lane_sum(x, n) / n, var = the 16-lane sum of (x - mean)^2, rstd = 1 / sqrt(var / n + eps),
// y[i] = ((x[i] - mean) * rstd) * weight[i] + bias[i]; mean[r] and rstd[r] are stored for the
// backward pass. Each row's values are those of the row alone: rows are taken kMaxNormRows at a
// time only so that their reductions' dependent additions overlap.
inline constexpr int kMaxNormRows = 8;
void layernorm_rows(float* y, int64_t ldy, const float* x, int64_t ldx, const float* weight, const float* bias,
                    int rows, int n, float eps, float* mean, float* rstd);
// RMSNorm of `rows` groups of n values at x + r ld (y the same layout; y may alias x):
// rstd = 1 / sqrt(lane_dot(x, x, n) / n + eps), y[i] = (x[i] * rstd) * scale[i], or x[i] * rstd
// without a scale; rstd[r] stored unless rstd is null.
void rmsnorm_rows(float* y, const float* x, int64_t ld, const float* scale, int rows, int n, float eps, float* rstd);

// GELU, tanh approximation, element-wise over n values (one thread's share; callers split the
// work across threads): the formulas of ops/elementwise.h with exp_approx/tanh_approx.
void gelu_tanh_forward(float* out, const float* inp, int64_t n);
void gelu_tanh_backward(float* dinp, const float* dout, const float* inp, int64_t n);

// The exact GELU 0.5 x (1 + erf(x / sqrt 2)) with one_plus_erf_approx (ops/fast_math.h), and its
// derivative dy ((1 + erf) / 2 + x exp_approx(-x^2 / 2) / sqrt(2 pi)), element-wise over n values.
void gelu_erf_forward(float* out, const float* inp, int64_t n);
void gelu_erf_backward(float* dinp, const float* dout, const float* inp, int64_t n);

// y[i] = a * x[i] (scale), y[i] += a * x[i] (axpy), y[i] = h[i] + a * f[i] (the gated residual row):
// MUDD's source mixing and the gated residual, over n values.
void scale(float* y, const float* x, float a, int64_t n);
void axpy(float* y, const float* x, float a, int64_t n);
void residual_row(float* y, const float* h, float a, const float* f, int64_t n);

// out[c] += sum over rows n < N of in[n * ld + c], for c < C: each column's sum starts at zero and
// adds the rows in order (a bias gradient), up to 8 vectors of columns held in registers while the
// rows stream by.
void column_sums_add(float* out, const float* in, int64_t N, int C, int64_t ld);

// out[i] = f32_to_bf16(in[i]) (core/half.h: nearest, ties to even; NaN stays a quiet NaN), in
// integer operations: the same bits on every target (tests/precision_test.cpp).
void round_to_bf16(uint16_t* out, const float* in, int64_t n);

// Small matrix products for attention's per-head tiles (ops/attention.cpp), where OpenBLAS's
// packing costs more than the product: for i < m, j < n,
//   C[i * ldc + j] = Z(i, j) + alpha * sum_{p < k} A(i, p) B(p, j)  (Z(i, j) = 0 when addend is null),
// with A(i, p) = a[i * a_row + p * a_col] (either layout, so A or its transpose), B(p, j) =
// b[p * ldb + j] and Z(i, j) = addend[i * ld_addend + j]: C itself (addend c, ld_addend ldc) to
// accumulate, or a bias row broadcast to every row (ld_addend 0). The one exception to the no-FMA rule above: each output is a chain of fused
// multiply-adds over p = 0 .. k-1 in order, from zero, then times alpha. On targets with FMA (AVX2,
// AVX-512) that is bitwise tile_matmul_reference<float> of ops/fast_math.h whatever m, n, the tiling
// or the target; targets without it (SSE4, SSSE3) round the multiply and the add separately.
void tile_matmul(float* c, int64_t ldc, const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t ldb,
                 int m, int n, int k, float alpha, const float* addend, int64_t ld_addend);
// Columns of tile_matmul's register tile on the dispatched target (two vectors: 32 on AVX-512,
// 16 on AVX2): the panel width GEMM packs B into. Layout only; results do not depend on it.
int tile_panel_width();
// panel[r * w + j] = b[j * ldb + r] for r < kb, j < w: w rows of a row-major [N, K] weight, kb of
// their values each, transposed into a kernel panel (GEMM's op(B) = W^T). A copy on every target.
void pack_transposed(float* panel, int w, const float* b, int64_t ldb, int kb);
// panel[r * w + j] = b[r * ldb + j] for r < kb, j < w: kb rows of w values (a panel of a B that is
// not transposed, or a chunk of a transposed A) into contiguous rows. In registers: GEMM packs rows
// of 32 values, where a memcpy call per row cost 2-4% of a training step. A copy on every target.
void pack_rows(float* panel, int w, const float* b, int64_t ldb, int kb);

// MUDD's source mixing for all of a DA module's streams in one pass over the sources: for s <
// streams (at most 4) and i < n, y[s][i] = alpha[s S] x[0][i], then += alpha[s S + j] x[j][i] for j
// = 1 .. S-1 in order: the operations of scale and axpy above, element by element, with each
// source read once for every stream.
void mix_streams(float* const* y, int streams, const float* const* x, int sources, const float* alpha, int64_t n);
inline constexpr int kMixStreamsMaxOutputs = 4;  // mix_streams' `streams` per call

// One AdamW step over n values, the operations of train/adamw.cpp in its order:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;
//   p = p decay - step_size m / (sqrt(v) inv_sqrt_bias2 + eps).
// grad_scale multiplies each gradient as it is read (global-norm clipping's factor, 1 otherwise):
// the same float product as scaling the buffer first, without a pass over it.
struct AdamWConstants {
  float b1, b2, decay, step_size, inv_sqrt_bias2, eps, grad_scale;
};
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConstants& k);

}  // namespace fca::simd
