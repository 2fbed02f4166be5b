// GEMM: C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major. Float runs on oneDNN's
// matmul where the shape's rule says so (ops/onednn_matmul.h: fp32 when N and K >= 64, every
// product in the bf16 precision), else on fca's register-tiled Highway kernel (ops/gemm.cpp,
// ops/simd_matmul.cpp); in fp32 both give rows that do not depend on M or on the thread split.
// Double (the finite-difference gradient checks) runs OpenBLAS dgemm.
// Called outside OpenMP regions it uses all threads; inside one it runs in the calling thread.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/onednn_matmul.h"

namespace fca {

// What runs the GEMMs, e.g. "sgemm oneDNN 2.6.3 (cpu isa avx512_core_amx) where N and K >= 64,
// fca tile_matmul AVX3 otherwise; dgemm OpenBLAS 0.3.21 Haswell (OPENBLAS_CORETYPE=Haswell)":
// float GEMM's bits depend on oneDNN's ISA and on whether the SIMD target has fused multiply-add
// (ops/simd.h); OpenBLAS (DYNAMIC_ARCH) picks its kernels at load time from the CPU or from the
// environment variable OPENBLAS_CORETYPE (docs/building.md).
std::string blas_description();
// OpenBLAS's own description alone, e.g. "OpenBLAS 0.3.21 Cooperlake (detected)".
std::string openblas_description();

// OpenBLAS's SGEMM itself, for the peak probe (exec/timing.cpp), which reports the faster of it and
// gemm<float> as the machine's SGEMM peak.
void openblas_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc);

template <typename T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B,
          int ldb, T beta, T* C, int ldc);

// y[N, out] = x[N, in] W[out, in]^T + b[out]  (b may be null): a Linear layer's forward; y's rows
// are ldy apart (a column block of a wider buffer), out by default. In float the bias is the
// GEMM's first addend: bitwise a fill with the bias and a GEMM with beta 1.
template <typename T>
void linear_forward(T* y, const T* x, const T* weight, const T* bias, int N, int in, int out, int ldy);
template <typename T>
void linear_forward(T* y, const T* x, const T* weight, const T* bias, int N, int in, int out) {
  linear_forward(y, x, weight, bias, N, in, out, out);
}

// Which GELU an MLP applies: the tanh approximation (the gated family, ops/elementwise.h) or the
// exact erf form (MUDDPythia, ops/norms.h).
enum class GeluForm { tanh, erf };

// One Linear layer of linear_forward_group: y[N, out] (rows ldy apart) = x[N, in] W[out, in]^T + b,
// and with `act` (same layout as y) also act = GELU(y) of the given form, as linear_gelu_forward.
template <typename T>
struct LinearOperands {
  T* y;
  const T* x;
  const T* weight;
  const T* bias;  // may be null
  int in, out, ldy;
  T* act = nullptr;
  GeluForm form = GeluForm::tanh;
};
// Independent Linear layers over the same N rows (no layer reads another's output): bitwise
// linear_forward (linear_gelu_forward) on each. In float they share one parallel region, each
// thread going from its share of one layer to its share of the next without waiting (the small
// projections of one block then pay for one fork and join).
template <typename T>
void linear_forward_group(std::initializer_list<LinearOperands<T>> layers, int N);

// The fc layer's forward: pre[N, out] = x W^T + b, act = GELU(pre). In float the bias and the GELU
// are the GEMM's epilogue, applied to each tile while it is in cache; the values are bitwise those
// of linear_forward then gelu_tanh_forward (gelu_erf_forward).
template <typename T>
void linear_gelu_forward(T* pre, T* act, const T* x, const T* weight, const T* bias, int N, int in, int out,
                         GeluForm form = GeluForm::tanh);

// A transformer MLP: pre[N, F] = x[N, D] Wfc^T + bfc, act = GELU(pre) of the given form, then
// y[N, D] = act Wproj^T + bproj (bproj may be null), or y += act Wproj^T with `accumulate` (then
// bproj must be null: a caller adds it to y first). In fp32 and
// double, bitwise linear_gelu_forward then linear_forward (the GEMM with beta 1 when accumulating).
// In the bf16 matmul precision (ops/onednn_matmul.h; inference only, where no backward pass reads
// pre or act) the hidden activation never exists in fp32: the GELU is oneDNN's post-op on the fc
// product's fp32 accumulator, stored in bf16 (the precision the proj product reads it in), and
// pre and act are left as they were. That saves a pass writing and reading [N, F] at fp32 width
// and the proj product's rounding pass (docs/precision.md).
template <typename T>
void mlp_forward(T* y, T* pre, T* act, const T* x, const T* fc_weight, const T* fc_bias, const T* proj_weight,
                 const T* proj_bias, int N, int D, int F, bool accumulate, GeluForm form = GeluForm::tanh);

// Linear weights packed once, as fca's float GEMM kernel packs op(B) = W^T for each call (the
// GEMMs oneDNN runs read fp32 weights in place, and in bf16 the copy of bf16()): for inference
// with fixed weights (the audit's thousands of passes), where every call would otherwise copy the
// same weights into the same panels again (in a rows-split product, once per thread). The packed
// values are the same values in the same order, so the results are bitwise those of packing per
// call. Layout of W [out, in]: inner blocks of kb = min(256, in - p0) rows of op(B) at offset
// p0 * out, each holding the panels of the kernel's width (simd::tile_panel_width()), panel j0 at
// j0 * kb, kb rows of min(width, out - j0) values.
class PackedWeights {
 public:
  // Declares W [out, in] (row-major, rows `in` apart) a weight that GEMMs under a scope may read as
  // op(B) = W^T. It is packed the first time one does, so tensors that never are (embedding tables
  // that are only gathered, say) cost nothing. A weight added again keeps its first entry.
  void add(const float* weight, int out, int in);
  // The packed copy of `weight` for a product of this shape, packed now if it was not yet; null
  // when `weight` was not added with this shape.
  const float* packed(const float* weight, int out, int in);
  // The weight rounded to bf16 (ops/onednn_matmul.h), in W's own layout, rounded now if it was not
  // yet: what the bf16 matmul precision reads; null when `weight` was not added with this shape.
  const uint16_t* bf16(const float* weight, int out, int in);
  // The weight's copies in oneDNN's blocked layouts (ops/onednn_matmul.h), made as products ask
  // for them; null when `weight` was not added with this shape.
  OnednnBlockedWeights* onednn_blocked(const float* weight, int out, int in);
  size_t bytes() const;  // of the weights' copies made so far (packed, bf16 and blocked)
  size_t count() const;                    // weights packed so far

 private:
  struct Entry {
    int out = 0, in = 0;
    int panel_width = 0;        // simd::tile_panel_width() when packed
    std::vector<float> values;  // empty until first used
    std::vector<uint16_t> bf16_values;  // empty until a bf16 product first reads it
    std::unique_ptr<OnednnBlockedWeights> onednn;  // null until a oneDNN product first reads it
  };
  std::unordered_map<const float*, Entry> entries_;
  size_t bytes_ = 0;
};

// While alive, the float GEMMs called from this thread whose op(B) is W^T for a weight of `packed`
// (the same pointer and shape, rows `in` apart: every Linear forward over it) read the packed copy
// instead of packing W. The caller keeps the weights unchanged meanwhile: the packed copy is not
// refreshed. Scopes nest (the inner one wins); null installs none.
class PackedWeightsScope {
 public:
  explicit PackedWeightsScope(PackedWeights* packed);
  ~PackedWeightsScope();
  PackedWeightsScope(const PackedWeightsScope&) = delete;
  PackedWeightsScope& operator=(const PackedWeightsScope&) = delete;

 private:
  PackedWeights* previous_;
};

// Linear backward. dx[N,in] = dy W (overwritten when accumulate_dx is false, else added);
// dW[out,in] += dy^T x; db[out] += sum over rows of dy (db may be null). dx may be null.
template <typename T>
void linear_backward(T* dx, T* dweight, T* dbias, const T* dy, const T* x, const T* weight, int N, int in,
                     int out, bool accumulate_dx = false);

// out[c] += sum over rows n of in[n, c]: column-parallel, each column summed in row order.
template <typename T>
void add_column_sums(T* out, const T* in, int64_t N, int C);

}  // namespace fca
