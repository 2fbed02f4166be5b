#include "ops/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/exec_counters.h"
#include "core/phase_timer.h"
#include "core/threads.h"
#include "ops/elementwise.h"
#include "ops/norms.h"
#include "ops/onednn_matmul.h"
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
  const std::string sgemm = matmul_precision() == MatmulPrecision::bf16
                                ? "sgemm bf16 " + onednn_description() + " for every product"
                                : "sgemm " + onednn_description() + " where N and K >= 64, fca tile_matmul " +
                                      simd::dispatched_target() + " otherwise";
  return sgemm + "; dgemm " + openblas_description();
}

void openblas_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha,
              A, lda, B, ldb, beta, C, ldc);
}

// Float GEMM on fca's register-tiled kernel (simd::tile_matmul), blocked as GotoBLAS does, without
// barriers. C is cut along its longer side into units of work: runs of columns (all rows) when C has
// at least as many columns as rows, else runs of rows (all columns); each thread starts with an
// equal share of consecutive units and takes over another thread's last units when it runs out of
// its own (gemm_float_group). For each block of kColumnBlock
// of its columns and kInnerBlock of the inner dimension, a thread copies that block of op(B) into
// its own panels as wide as the kernel's register tile (simd::tile_panel_width()), each panel
// kInnerBlock rows of contiguous values (256 x 256 values, 256 KB: written into and read back from
// its L2 cache, whatever B's row stride, a power of two in every model), then runs each chunk of
// kRowChunk of its rows over the block's panels, the chunk's values of op(A) staying in L1 across
// the panels (a transposed A is copied per chunk into contiguous columns first). Splitting the
// longer side means that few rows against wide weights (a 1.4B model at batch 1) copy each weight
// once, by whoever computes it, into the cache it is used from; with more rows than columns each
// unit copies all of op(B), so there each thread has at most one unit: one copy per M / threads
// multiply-adds of its own. Weights packed once
// (PackedWeights, ops/gemm.h) are read in place of those copies: the same panels.
//
// Each value of C is alpha times one multiply-add chain per inner block, the blocks in order, added
// to C (after beta): it depends on its own row of op(A) and on op(B), never on M, on the other rows
// or on how rows and columns are split over threads or packed. That is what makes a window's
// results independent of the batch it is computed in.
constexpr int kColumnBlock = 256;
constexpr int kInnerBlock = 256;
constexpr int kRowChunk = 32;  // rows of C per chunk (four AVX-512 register tiles)

namespace {

// Copies op(B)(p0 .. p0 + kb - 1, c0 .. c1 - 1) into panels of W columns: panel q holds kb rows of
// min(W, c1 - c0 - q W) values at offset q W kb.
void pack_b_block(float* panels, bool trans_b, const float* B, int ldb, int p0, int kb, int c0, int c1, int W) {
  for (int j0 = c0; j0 < c1; j0 += W) {
    const int wq = std::min(W, c1 - j0);
    float* panel = panels + int64_t(j0 - c0) * kb;
    if (trans_b) {
      simd::pack_transposed(panel, wq, B + int64_t(j0) * ldb + p0, ldb, kb);  // B [N, K]: row j0 + j is column j
    } else {
      simd::pack_rows(panel, wq, B + int64_t(p0) * ldb + j0, ldb, kb);
    }
  }
}

// One float GEMM with two optional fusions for Linear layers (beta 0 only): `bias` [N] is the
// addend of the first inner block in place of zero, so C = bias + chain, bitwise what a fill with
// the bias and a GEMM with beta 1 give (one addition, commutative); and `gelu_out` (row stride ldc)
// receives the GELU of each row chunk's column block of C as its last inner block finishes it, in
// cache, the operations of simd::gelu_tanh_forward or simd::gelu_erf_forward (element-wise, so the
// tiling cannot change a value).
struct FloatGemm {
  bool trans_a, trans_b;
  int M, N, K;
  float alpha;
  const float* A;
  int lda;
  const float* B;
  int ldb;
  float beta;
  float* C;
  int ldc;
  const float* bias = nullptr;
  float* gelu_out = nullptr;
  GeluForm gelu_form = GeluForm::tanh;
  const float* packed_b = nullptr;  // op(B) packed in PackedWeights's layout (B unread), or null
};

thread_local PackedWeights* active_packed_weights = nullptr;

// What gemm_float does before its blocked products (one thread): beta's scaling, and the whole of
// a GEMM with an empty inner dimension. Returns whether the blocked products remain to be run.
bool gemm_float_prologue(const FloatGemm& g) {
  count_gemm_flops(2 * int64_t(g.M) * g.N * g.K, 1);
  if (g.M <= 0 || g.N <= 0) return false;
  if (g.beta != 0.0f && g.beta != 1.0f)
#pragma omp parallel for schedule(static)
    for (int i = 0; i < g.M; ++i)
      for (int j = 0; j < g.N; ++j) g.C[int64_t(i) * g.ldc + j] *= g.beta;
  if (g.K > 0) return true;
  // C = bias (or 0), then the GELU: the same values as the blocked path with an empty chain.
  const auto gelu = g.gelu_form == GeluForm::tanh ? simd::gelu_tanh_forward : simd::gelu_erf_forward;
  if (g.beta == 0.0f)
#pragma omp parallel for schedule(static)
    for (int i = 0; i < g.M; ++i) {
      float* row = g.C + int64_t(i) * g.ldc;
      for (int j = 0; j < g.N; ++j) row[j] = g.bias != nullptr ? g.bias[j] : 0.0f;
      if (g.gelu_out != nullptr) gelu(g.gelu_out + int64_t(i) * g.ldc, row, g.N);
    }
  return false;
}

// The rectangle of C of rows kRowChunk * [chunk_begin, chunk_end) and columns [col_begin, col_end),
// computed by the calling thread with no synchronisation: for each block of kColumnBlock of its
// columns and kInnerBlock of the inner dimension, the block's panels (prepacked, or packed now into
// this thread's buffer), then each row chunk over them.
void gemm_float_rectangle(const FloatGemm& g, int chunk_begin, int chunk_end, int col_begin, int col_end) {
  const auto gelu = g.gelu_form == GeluForm::tanh ? simd::gelu_tanh_forward : simd::gelu_erf_forward;
  const int M = g.M, N = g.N, K = g.K, ldc = g.ldc;
  const int W = simd::tile_panel_width();  // divides kColumnBlock (2 .. 32)
  thread_local std::vector<float> packed_b;  // [kColumnBlock / W panels][kInnerBlock][W]
  thread_local std::vector<float> packed_a;  // this thread's chunk of a transposed A: [kInnerBlock, kRowChunk]
  if (g.packed_b == nullptr && packed_b.size() < size_t(kInnerBlock) * kColumnBlock)
    packed_b.resize(size_t(kInnerBlock) * kColumnBlock);
  if (g.trans_a && packed_a.size() < size_t(kInnerBlock) * kRowChunk) packed_a.resize(size_t(kInnerBlock) * kRowChunk);
  for (int c0 = col_begin; c0 < col_end; c0 += kColumnBlock) {
    const int c1 = std::min(col_end, c0 + kColumnBlock);
    for (int p0 = 0; p0 < K; p0 += kInnerBlock) {
      const int kb = std::min(kInnerBlock, K - p0);
      const bool onto_c = g.beta != 0.0f || p0 > 0, last_block = p0 + kb == K;
      // This block's panels: panel j0 at (j0 - c0) kb, from the prepacked weight or packed now.
      const float* block_panels = g.packed_b != nullptr ? g.packed_b + int64_t(p0) * N + int64_t(c0) * kb : packed_b.data();
      if (g.packed_b == nullptr) pack_b_block(packed_b.data(), g.trans_b, g.B, g.ldb, p0, kb, c0, c1, W);
      for (int chunk = chunk_begin; chunk < chunk_end; ++chunk) {
        const int i0 = chunk * kRowChunk, rows = std::min(kRowChunk, M - i0);
        const float* a = g.A + (g.trans_a ? i0 + int64_t(p0) * g.lda : int64_t(i0) * g.lda + p0);
        int64_t a_row = g.lda, a_col = 1;
        if (g.trans_a) {
          simd::pack_rows(packed_a.data(), rows, a, g.lda, kb);
          a = packed_a.data(), a_row = 1, a_col = rows;
        }
        for (int j0 = c0; j0 < c1; j0 += W) {
          const int wq = std::min(W, c1 - j0);
          float* c = g.C + int64_t(i0) * ldc + j0;
          const float* addend = onto_c ? c : g.bias != nullptr ? g.bias + j0 : nullptr;
          simd::tile_matmul(c, ldc, a, a_row, a_col, block_panels + int64_t(j0 - c0) * kb, wq, rows, wq, kb, g.alpha,
                            addend, onto_c ? ldc : 0);
        }
        // The chunk's rows of this column block (at most 32 x 256 values, in L1/L2), one call
        // per row: per register tile the dispatch would cost as much as the GELU.
        if (g.gelu_out != nullptr && last_block)
          for (int r = i0; r < i0 + rows; ++r)
            gelu(g.gelu_out + int64_t(r) * ldc + c0, g.C + int64_t(r) * ldc + c0, c1 - c0);
      }
    }
  }
}

// The GEMM on oneDNN (ops/onednn_matmul.h), after gemm_float_prologue: beta, when not 0, has
// already scaled C, which the product is then added onto; a bias (beta is 0 with one) is added to
// the finished product, one addition, which is what a fill with the bias and a product added onto
// it (beta 1) give too; the GELU epilogue is applied to C's rows
// afterwards with the same row function as the blocked path (so the values are bitwise those of
// the unfused layers here too). In bf16 a Linear weight under a PackedWeightsScope is rounded once.
// When op(B) = W^T is a Linear weight kept by the active PackedWeights: its bf16 copy (in the bf16
// precision) and its blocked copies for oneDNN, in place of W.
void use_kept_weight(OnednnGemm& g) {
  if (!g.trans_b || g.ldb != g.K || active_packed_weights == nullptr) return;
  if (matmul_precision() == MatmulPrecision::bf16) g.b_bf16 = active_packed_weights->bf16(g.B, g.N, g.K);
  g.b_blocked = active_packed_weights->onednn_blocked(g.B, g.N, g.K);
}

void gemm_float_onednn(const FloatGemm& g) {
  OnednnGemm call{g.trans_a, g.trans_b, g.M, g.N, g.K, g.alpha, g.A, g.lda, g.B, g.ldb, g.beta != 0.0f, g.C, g.ldc, g.bias};
  use_kept_weight(call);
  onednn_gemm(call);
  if (g.gelu_out == nullptr) return;
  const auto gelu = g.gelu_form == GeluForm::tanh ? simd::gelu_tanh_forward : simd::gelu_erf_forward;
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
  for (int i = 0; i < g.M; ++i) gelu(g.gelu_out + int64_t(i) * g.ldc, g.C + int64_t(i) * g.ldc, g.N);
}

// How one GEMM's C is cut into units of work: the longer side (rows when C has more rows than
// columns) in `units` rectangles, each `group` row chunks (all columns) or `group` panels (all
// rows), the last one possibly smaller.
struct GemmUnits {
  bool split_columns;
  int group, units;
};

// With op(B) prepacked, or split by columns (each column's panels packed once, by whoever computes
// it), a unit costs nothing to move to another thread: about 16 units per thread (a row chunk or a
// panel at least), so that a thread that finishes first can take over units of a slower one. A
// rows split that packs op(B) per call packs all of it once per unit: at most one unit per thread
// (some threads may have none when the row chunks do not divide evenly), the static split.
GemmUnits gemm_units(const FloatGemm& g, int threads) {
  const int W = simd::tile_panel_width();
  GemmUnits u;
  u.split_columns = g.N >= g.M;
  const int base = u.split_columns ? (g.N + W - 1) / W : (g.M + kRowChunk - 1) / kRowChunk;
  const bool movable = g.packed_b != nullptr || u.split_columns;
  const int wanted = movable ? 16 * threads : threads;
  u.group = std::max(1, (base + wanted - 1) / wanted);
  u.units = (base + u.group - 1) / u.group;
  return u;
}

void gemm_float_unit(const FloatGemm& g, const GemmUnits& u, int unit) {
  const int W = simd::tile_panel_width(), row_chunks = (g.M + kRowChunk - 1) / kRowChunk;
  if (u.split_columns)
    gemm_float_rectangle(g, 0, row_chunks, std::min(g.N, unit * u.group * W), std::min(g.N, (unit + 1) * u.group * W));
  else
    gemm_float_rectangle(g, unit * u.group, std::min(row_chunks, (unit + 1) * u.group), 0, g.N);
}

// Independent GEMMs (no output is another's input) in one parallel region: each thread computes
// its units of each in turn (and then any left in the other threads' runs) and goes on to the
// next without waiting for the other threads, so a group of small products pays for one fork and
// one join, not one per product.
constexpr int kMaxGroup = 8;
void gemm_float_group(const FloatGemm* gemms, int count) {
  const PhaseScope phase_scope(Phase::gemm);
  // The team's size at most (a call inside a parallel region runs in a team of one, which takes
  // every run). Which thread computes a unit never changes a value (see above).
  const int threads = omp_get_max_threads();
  std::vector<UnitRuns> runs;
  runs.reserve(std::min(count, kMaxGroup));
  for (int q = 0; q < std::min(count, kMaxGroup); ++q) runs.emplace_back(threads);
  for (int q0 = 0; q0 < count; q0 += kMaxGroup) {
    FloatGemm blocked[kMaxGroup];
    GemmUnits units[kMaxGroup];
    int n = 0;
    for (int q = q0; q < std::min(count, q0 + kMaxGroup); ++q) {
      if (!gemm_float_prologue(gemms[q])) continue;
      if (onednn_runs_gemm(gemms[q].N, gemms[q].K)) {
        gemm_float_onednn(gemms[q]);
        continue;
      }
      FloatGemm& g = blocked[n] = gemms[q];
      if (g.trans_b && g.ldb == g.K && g.packed_b == nullptr && active_packed_weights != nullptr)
        g.packed_b = active_packed_weights->packed(g.B, g.N, g.K);
      units[n] = gemm_units(g, threads);
      runs[n].reset(units[n].units);
      ++n;
    }
    if (n == 0) continue;
#pragma omp parallel num_threads(threads)
    {
      const int me = omp_get_thread_num();
      for (int q = 0; q < n; ++q)
        run_units(runs[q], me, [&](int unit) { gemm_float_unit(blocked[q], units[q], unit); });
    }
  }
}

void gemm_float(const FloatGemm& g) { gemm_float_group(&g, 1); }

}  // namespace

void PackedWeights::add(const float* weight, int out, int in) { entries_.try_emplace(weight, Entry{out, in, 0, {}, {}, nullptr}); }

const float* PackedWeights::packed(const float* weight, int out, int in) {
  const auto it = entries_.find(weight);
  if (it == entries_.end() || it->second.out != out || it->second.in != in) return nullptr;
  Entry& e = it->second;
  // Packed on first use, and again if the kernel's panel width changed since (simd::force_target,
  // in tests): panels of another width would be read as a permutation of the weights.
  const int W = simd::tile_panel_width();
  if (e.values.empty() || e.panel_width != W) {
    bytes_ -= e.values.size() * sizeof(float);
    e.values.assign(size_t(out) * size_t(in), 0.0f);
    for (int p0 = 0; p0 < in; p0 += kInnerBlock)
      pack_b_block(e.values.data() + int64_t(p0) * out, true, weight, in, p0, std::min(kInnerBlock, in - p0), 0, out, W);
    e.panel_width = W;
    bytes_ += e.values.size() * sizeof(float);
  }
  return e.values.data();
}

const uint16_t* PackedWeights::bf16(const float* weight, int out, int in) {
  const auto it = entries_.find(weight);
  if (it == entries_.end() || it->second.out != out || it->second.in != in) return nullptr;
  Entry& e = it->second;
  if (e.bf16_values.empty()) {
    e.bf16_values.resize(size_t(out) * size_t(in));
    round_to_bf16(e.bf16_values.data(), weight, int64_t(out) * in);
    bytes_ += e.bf16_values.size() * sizeof(uint16_t);
  }
  return e.bf16_values.data();
}

OnednnBlockedWeights* PackedWeights::onednn_blocked(const float* weight, int out, int in) {
  const auto it = entries_.find(weight);
  if (it == entries_.end() || it->second.out != out || it->second.in != in) return nullptr;
  if (!it->second.onednn) it->second.onednn = std::make_unique<OnednnBlockedWeights>();
  return it->second.onednn.get();
}

size_t PackedWeights::bytes() const {
  size_t n = bytes_;
  for (const auto& [weight, e] : entries_) n += e.onednn ? e.onednn->bytes() : 0;
  return n;
}

size_t PackedWeights::count() const {
  size_t n = 0;
  for (const auto& [weight, e] : entries_)
    n += e.values.empty() && e.bf16_values.empty() && !(e.onednn && e.onednn->bytes() > 0) ? 0 : 1;
  return n;
}

PackedWeightsScope::PackedWeightsScope(PackedWeights* packed) : previous_(active_packed_weights) {
  active_packed_weights = packed;
}
PackedWeightsScope::~PackedWeightsScope() { active_packed_weights = previous_; }

template <>
void gemm<float>(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  gemm_float({trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc});
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
  if constexpr (std::is_same_v<T, float>) {
    // Blocks of 128 columns (512 bytes of each row, read in order; 8 AVX-512 accumulators).
    constexpr int kBlock = 128;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += kBlock) simd::column_sums_add(out + c0, in + c0, N, std::min(kBlock, C - c0), C);
    return;
  }
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
void linear_forward(T* y, const T* x, const T* weight, const T* bias, int N, int in, int out, int ldy) {
  if constexpr (std::is_same_v<T, float>) {
    gemm_float({false, true, N, out, in, 1.0f, x, in, weight, in, 0.0f, y, ldy, bias});
  } else {
    if (bias != nullptr) {
      const PhaseScope phase_scope(Phase::elementwise);
#pragma omp parallel for schedule(static)
      for (int n = 0; n < N; ++n)
        for (int o = 0; o < out; ++o) y[int64_t(n) * ldy + o] = bias[o];
    }
    gemm<T>(false, true, N, out, in, T(1), x, in, weight, in, bias != nullptr ? T(1) : T(0), y, ldy);
  }
}

template <typename T>
void linear_forward_group(std::initializer_list<LinearOperands<T>> layers, int N) {
  if constexpr (std::is_same_v<T, float>) {
    FloatGemm gemms[kMaxGroup];
    int n = 0;
    for (const LinearOperands<T>& l : layers) {
      gemms[n++] = {false, true, N, l.out, l.in, 1.0f, l.x, l.in, l.weight, l.in, 0.0f, l.y, l.ldy, l.bias, l.act, l.form};
      if (n == kMaxGroup) gemm_float_group(gemms, n), n = 0;
    }
    gemm_float_group(gemms, n);
  } else {
    for (const LinearOperands<T>& l : layers) {
      linear_forward(l.y, l.x, l.weight, l.bias, N, l.in, l.out, l.ldy);
      if (l.act != nullptr) {
        for (int n = 0; n < N; ++n) {
          const T* pre = l.y + int64_t(n) * l.ldy;
          T* act = l.act + int64_t(n) * l.ldy;
          if (l.form == GeluForm::tanh)
            gelu_tanh_forward(act, pre, l.out);
          else
            gelu_erf_forward(act, pre, l.out);
        }
      }
    }
  }
}

template <typename T>
void linear_gelu_forward(T* pre, T* act, const T* x, const T* weight, const T* bias, int N, int in, int out,
                         GeluForm form) {
  if constexpr (std::is_same_v<T, float>) {
    gemm_float({false, true, N, out, in, 1.0f, x, in, weight, in, 0.0f, pre, out, bias, act, form});
  } else if (form == GeluForm::tanh) {
    gemm<T>(false, true, N, out, in, T(1), x, in, weight, in, T(0), pre, out);
    bias_gelu_tanh_forward(pre, act, bias, N, out);
  } else {
    linear_forward(pre, x, weight, bias, N, in, out);
    gelu_erf_forward(act, pre, int64_t(N) * out);
  }
}

namespace {

// mlp_forward in the bf16 precision: both products on oneDNN, the hidden activation in bf16 only.
void mlp_forward_bf16(float* y, const float* x, const float* fc_weight, const float* fc_bias, const float* proj_weight,
                      const float* proj_bias, int N, int D, int F, bool accumulate, GeluForm form) {
  const PhaseScope phase_scope(Phase::gemm);
  count_gemm_flops(2 * int64_t(N) * F * D, 1);
  count_gemm_flops(2 * int64_t(N) * D * F, 1);
  if (N <= 0) return;
  thread_local std::vector<uint16_t> hidden;  // [N, F] GELU(x Wfc^T + bfc) in bf16
  hidden.resize(size_t(N) * F);
  OnednnGemm fc{false, true, N, F, D, 1.0f, x, D, fc_weight, D, false, nullptr, F, fc_bias};
  fc.c_bf16 = hidden.data();
  fc.post_op = form == GeluForm::tanh ? OnednnPostOp::gelu_tanh : OnednnPostOp::gelu_erf;
  use_kept_weight(fc);
  onednn_gemm(fc);
  OnednnGemm proj{false, true, N, D, F, 1.0f, nullptr, F, proj_weight, F, accumulate, y, D, proj_bias};
  proj.a_bf16 = hidden.data();
  use_kept_weight(proj);
  onednn_gemm(proj);
}

}  // namespace

template <typename T>
void mlp_forward(T* y, T* pre, T* act, const T* x, const T* fc_weight, const T* fc_bias, const T* proj_weight,
                 const T* proj_bias, int N, int D, int F, bool accumulate, GeluForm form) {
  if (accumulate && proj_bias != nullptr) throw Error("mlp_forward: with accumulate, add the proj bias to y first");
  if constexpr (std::is_same_v<T, float>) {
    if (matmul_precision() == MatmulPrecision::bf16) {
      mlp_forward_bf16(y, x, fc_weight, fc_bias, proj_weight, proj_bias, N, D, F, accumulate, form);
      return;
    }
  }
  linear_gelu_forward(pre, act, x, fc_weight, fc_bias, N, D, F, form);
  if (accumulate) gemm<T>(false, true, N, D, F, T(1), act, F, proj_weight, F, T(1), y, D);
  else linear_forward(y, act, proj_weight, proj_bias, N, F, D);
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
  template void linear_forward<T>(T*, const T*, const T*, const T*, int, int, int, int);        \
  template void linear_forward_group<T>(std::initializer_list<LinearOperands<T>>, int);            \
  template void linear_gelu_forward<T>(T*, T*, const T*, const T*, const T*, int, int, int, GeluForm); \
  template void mlp_forward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int, int, int, bool, GeluForm); \
  template void linear_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int, bool);
FCA_INSTANTIATE(float)
FCA_INSTANTIATE(double)
#undef FCA_INSTANTIATE

}  // namespace fca
