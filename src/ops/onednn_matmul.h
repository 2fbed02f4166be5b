// Float GEMMs on oneDNN's matmul primitive (Debian's libdnnl): its brgemm kernels, chosen by
// oneDNN at run time for the CPU (AVX-512, AVX2, AMX), run fp32 products at 95-105% of the square
// 2048 SGEMM peak on the shapes of a transformer layer, where fca's own register-tiled kernel
// (ops/gemm.cpp) reaches about 80% on Intel; and they run bf16 products with fp32 accumulation on
// AMX or AVX512-BF16, five times the fp32 peak on an AMX Xeon (docs/precision.md).
//
// Which path runs a float GEMM is a fixed rule of its shape and the process's matmul precision,
// never of a timing: a choice made by timing would make the bits depend on the machine's load.
// - fp32 (the default): oneDNN when N >= 64 and K >= 64 and oneDNN's ISA is at least AVX2; fca's
//   kernel otherwise (the gates' narrow products, where oneDNN's fixed cost per call dominates).
//   oneDNN's fp32 rows do not depend on M or on the thread count where A is not transposed (every
//   forward product; tests/gemm_test.cpp checks each shape class the rule admits), so a window's
//   results stay independent of its batch. With A transposed (only weight gradients, dW = dy^T x,
//   whose M is a weight's dimension) oneDNN blocks by M: the results depend on the thread count
//   only.
// - bf16: every float GEMM with K > 0 runs on oneDNN with both operands rounded to bf16 (nearest,
//   ties to even) and fp32 accumulation. oneDNN's bf16 kernels block differently for different M
//   (measured: a row differs between M = 1 and M = 2048 at K = 2048), so in this mode a window's
//   bits depend on the batch it runs in; the audit's live and replayed passes run the same batches,
//   so exact replay still holds within the mode (tests/precision_test.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace fca {

enum class MatmulPrecision { fp32, bf16 };
const char* matmul_precision_name(MatmulPrecision p);  // "fp32", "bf16"
// Parses "fp32" / "bf16"; throws Error naming `what` (the flag or the file field) otherwise.
MatmulPrecision parse_matmul_precision(const std::string& text, const std::string& what);

// The process's matmul precision, read by every float GEMM (ops/gemm.cpp). Process-wide, not per
// thread, because GEMMs are also called from inside parallel regions. fp32 unless set; a command
// sets it once, before its work (`--precision`). Throws Error when bf16 is asked for on a CPU
// where oneDNN has no bf16 matmul.
void set_matmul_precision(MatmulPrecision p);
MatmulPrecision matmul_precision();

// Sets the process's precision while alive and puts the previous one back (the fp32 SGEMM peak
// probe under a bf16 command, tests).
class MatmulPrecisionScope {
 public:
  explicit MatmulPrecisionScope(MatmulPrecision p) : previous_(matmul_precision()) { set_matmul_precision(p); }
  ~MatmulPrecisionScope() { set_matmul_precision(previous_); }
  MatmulPrecisionScope(const MatmulPrecisionScope&) = delete;
  MatmulPrecisionScope& operator=(const MatmulPrecisionScope&) = delete;

 private:
  MatmulPrecision previous_;
};

// Whether a float GEMM with these dimensions runs on oneDNN under the current precision (above).
bool onednn_runs_gemm(int N, int K);

// An element-wise function oneDNN applies to each finished value before it is stored (its eltwise
// post-op, in fp32 on the accumulator): the GELU of a bf16 MLP (ops/gemm.h: mlp_forward).
enum class OnednnPostOp { none, gelu_tanh, gelu_erf };

// C[M, N] = f(alpha op(A) op(B) (+ C when accumulate) (+ bias[N] when not null, added to each
// row's finished product)), f the post-op (the identity for none), row-major with leading
// dimensions; in the current precision. `b_bf16`, when not null, is op(B) already rounded to bf16
// in B's layout (a Linear weight kept by PackedWeights), read in place of B in the bf16 precision.
// In the bf16 precision only: `a_bf16`, when not null, is A already in bf16 (not transposed, rows
// K apart), read in place of A; `c_bf16`, when not null, receives the result rounded to bf16
// (rows N apart) in place of C (not with accumulate).
// A Linear weight W [N, K] in oneDNN's own blocked layouts, one copy per layout a primitive asks
// for (oneDNN picks it for the product's shape and data type), reordered from W (or from its bf16
// copy) the first time that layout is asked for. With the weight in a plain layout oneDNN repacks
// it on every call; blocked once, fc-shaped products run 5-30% faster (docs/precision.md), and the
// results are bitwise those of the plain layout (tests/gemm_test.cpp). Owned by PackedWeights
// (ops/gemm.h), whose contract applies: the weight does not change while it is alive.
class OnednnBlockedWeights {
 public:
  OnednnBlockedWeights();
  ~OnednnBlockedWeights();
  OnednnBlockedWeights(const OnednnBlockedWeights&) = delete;
  OnednnBlockedWeights& operator=(const OnednnBlockedWeights&) = delete;
  size_t bytes() const;  // of the blocked copies made so far
  struct Copies;         // the copies, by layout (onednn_matmul.cpp)
  Copies& copies() { return *copies_; }

 private:
  std::unique_ptr<Copies> copies_;
};

struct OnednnGemm {
  bool trans_a, trans_b;
  int M, N, K;
  float alpha;
  const float* A;
  int lda;
  const float* B;
  int ldb;
  bool accumulate;
  float* C;
  int ldc;
  const float* bias = nullptr;
  const uint16_t* b_bf16 = nullptr;
  // When not null, op(B) = W^T is this Linear weight (B = W [N, K], trans_b, ldb == K), read from
  // its blocked copy for the primitive's layout.
  OnednnBlockedWeights* b_blocked = nullptr;
  const uint16_t* a_bf16 = nullptr;
  uint16_t* c_bf16 = nullptr;
  OnednnPostOp post_op = OnednnPostOp::none;
};
void onednn_gemm(const OnednnGemm& g);

// Rounds n floats to bf16 (nearest, ties to even), in parallel for large n.
void round_to_bf16(uint16_t* out, const float* in, int64_t n);

// e.g. "oneDNN 2.6.3 (cpu isa avx512_core_amx)".
std::string onednn_description();

}  // namespace fca
