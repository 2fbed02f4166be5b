#include "ops/onednn_matmul.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "ops/simd.h"

namespace fca {
namespace {

std::atomic<MatmulPrecision> process_precision{MatmulPrecision::fp32};

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// oneDNN's ISA values are bit masks in which each ISA holds its predecessors' bits
// (dnnl_types.h: avx2 0x7, avx512_core 0x27, ...).
bool isa_includes(dnnl::cpu_isa isa, dnnl::cpu_isa wanted) { return (int(isa) & int(wanted)) == int(wanted); }

const char* isa_name(dnnl::cpu_isa isa) {
  using I = dnnl::cpu_isa;
  for (const auto& [value, name] : {std::pair{I::avx512_core_amx, "avx512_core_amx"}, {I::avx512_core_bf16, "avx512_core_bf16"},
                                    {I::avx512_core_vnni, "avx512_core_vnni"}, {I::avx512_core, "avx512_core"},
                                    {I::avx2_vnni, "avx2_vnni"}, {I::avx2, "avx2"}, {I::avx, "avx"}, {I::sse41, "sse41"}})
    if (isa_includes(isa, value)) return name;
  return "no simd";
}

dnnl::cpu_isa effective_isa() {
  static const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa;
}

// A primitive for each distinct (precision, shape, layout, fusion): created once, then executed
// from any thread, on the thread count of the call (oneDNN reads OpenMP's at execution:
// Precision.OnednnRunsOnTheThreadCountOfTheCall); each execution gets this thread's own scratchpad
// (a primitive's own would be shared by threads executing it at once).
// (bf16, M, N, K, lda and ldb negated when transposed, ldc, bias, accumulate, alpha's bits, B
// blocked, post-op, C in bf16)
using PrimitiveKey = std::tuple<bool, int, int, int, int64_t, int64_t, int, bool, bool, uint32_t, bool, OnednnPostOp, bool>;
struct Primitive {
  dnnl::matmul matmul;
  dnnl::memory::desc scratchpad;
  dnnl::memory::desc weights;  // the layout B is read in (a blocked one when B is a kept weight)
};

struct Layout {
  dnnl::memory::desc a, b, c, bias;
};

// B's layout is the plain one of its leading dimension, or oneDNN's choice (format any) when
// `blocked`: a kept weight, reordered into that choice once (OnednnBlockedWeights).
Layout layout_of(const OnednnGemm& g, dnnl::memory::data_type in_type, int lda, int ldb, bool blocked) {
  using dt = dnnl::memory::data_type;
  Layout l;
  l.a = dnnl::memory::desc({g.M, g.K}, in_type, g.trans_a ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
  l.b = blocked ? dnnl::memory::desc({g.K, g.N}, in_type, dnnl::memory::format_tag::any)
                : dnnl::memory::desc({g.K, g.N}, in_type, g.trans_b ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
  l.c = dnnl::memory::desc({g.M, g.N}, g.c_bf16 != nullptr ? dt::bf16 : dt::f32, dnnl::memory::dims{g.ldc, 1});
  if (g.bias != nullptr) l.bias = dnnl::memory::desc({1, g.N}, dt::f32, dnnl::memory::dims{g.N, 1});
  return l;
}

const Primitive& primitive_for(const OnednnGemm& g, const Layout& l, bool bf16, int lda, int ldb, bool blocked) {
  static std::mutex mutex;
  static std::map<PrimitiveKey, Primitive> primitives;
  uint32_t alpha_bits;
  std::memcpy(&alpha_bits, &g.alpha, sizeof alpha_bits);
  const PrimitiveKey key{bf16, g.M, g.N, g.K, int64_t(lda) * (g.trans_a ? -1 : 1), int64_t(ldb) * (g.trans_b ? -1 : 1),
                         g.ldc, g.bias != nullptr, g.accumulate, alpha_bits, blocked, g.post_op, g.c_bf16 != nullptr};
  const std::lock_guard<std::mutex> lock(mutex);
  const auto it = primitives.find(key);
  if (it != primitives.end()) return it->second;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (g.alpha != 1.0f) attr.set_output_scales(0, {g.alpha});
  if (g.accumulate || g.post_op != OnednnPostOp::none) {
    dnnl::post_ops ops;
    if (g.accumulate) ops.append_sum(1.0f);
    if (g.post_op != OnednnPostOp::none)
      ops.append_eltwise(1.0f, g.post_op == OnednnPostOp::gelu_tanh ? dnnl::algorithm::eltwise_gelu_tanh : dnnl::algorithm::eltwise_gelu_erf,
                         0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  try {
    const dnnl::matmul::desc desc = g.bias != nullptr ? dnnl::matmul::desc(l.a, l.b, l.bias, l.c) : dnnl::matmul::desc(l.a, l.b, l.c);
    const dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
    return primitives.emplace(key, Primitive{dnnl::matmul(pd), pd.scratchpad_desc(), pd.weights_desc()}).first->second;
  } catch (const dnnl::error& e) {
    throw Error(std::string("oneDNN has no ") + (bf16 ? "bf16" : "fp32") + " matmul for " + std::to_string(g.M) + " x " +
                std::to_string(g.N) + " x " + std::to_string(g.K) + " on this CPU (" + isa_name(effective_isa()) + "): " + e.what());
  }
}

// op(X) of rows x cols (row-major with leading dimension ld, transposed when `trans`) rounded to
// bf16 into a dense buffer of the same orientation: returns its leading dimension.
int round_operand(std::vector<uint16_t>& out, const float* x, bool trans, int rows, int cols, int ld) {
  const int stored_rows = trans ? cols : rows, stored_cols = trans ? rows : cols;
  out.resize(size_t(stored_rows) * stored_cols);
  if (ld == stored_cols) {
    round_to_bf16(out.data(), x, int64_t(stored_rows) * stored_cols);
  } else {
    for (int r = 0; r < stored_rows; ++r) round_to_bf16(out.data() + int64_t(r) * stored_cols, x + int64_t(r) * ld, stored_cols);
  }
  return stored_cols;
}

// `rows` rows of `cols` values from src (rows ld_src apart) to dst (rows ld_dst apart).
void copy_rows(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int rows, int cols) {
#pragma omp parallel for schedule(static) if (int64_t(rows) * cols >= (int64_t(1) << 16) && !omp_in_parallel())
  for (int r = 0; r < rows; ++r) std::memcpy(dst + r * ld_dst, src + r * ld_src, sizeof(float) * size_t(cols));
}

// x itself when its stored rows are dense (ld == cols), else a dense copy in `buffer`; ld becomes cols.
const float* dense_operand(std::vector<float>& buffer, const float* x, int rows, int cols, int& ld) {
  if (ld == cols) return x;
  buffer.resize(size_t(rows) * cols);
  copy_rows(buffer.data(), cols, x, ld, rows, cols);
  ld = cols;
  return buffer.data();
}

}  // namespace

struct OnednnBlockedWeights::Copies {
  std::mutex mutex;  // GEMMs on several threads may ask for a layout at once
  std::vector<std::pair<dnnl::memory::desc, dnnl::memory>> by_layout;
  // The copy in `layout`, reordered now from `plain` (W as the product reads it unblocked, at
  // `values`) if this layout was not asked for before.
  const void* in(const dnnl::memory::desc& layout, const dnnl::memory::desc& plain, const void* values) {
    const std::lock_guard<std::mutex> lock(mutex);
    for (const auto& [desc, copy] : by_layout)
      if (desc == layout) return copy.get_data_handle();
    dnnl::engine& engine = cpu_engine();
    dnnl::memory source(plain, engine, const_cast<void*>(values)), copy(layout, engine);
    dnnl::stream stream(engine);
    dnnl::reorder(source, copy).execute(stream, source, copy);
    stream.wait();
    by_layout.emplace_back(layout, copy);
    return copy.get_data_handle();
  }
};

OnednnBlockedWeights::OnednnBlockedWeights() : copies_(std::make_unique<Copies>()) {}
OnednnBlockedWeights::~OnednnBlockedWeights() = default;
size_t OnednnBlockedWeights::bytes() const {
  const std::lock_guard<std::mutex> lock(copies_->mutex);
  size_t n = 0;
  for (const auto& [desc, copy] : copies_->by_layout) n += desc.get_size();
  return n;
}

const char* matmul_precision_name(MatmulPrecision p) { return p == MatmulPrecision::bf16 ? "bf16" : "fp32"; }

MatmulPrecision parse_matmul_precision(const std::string& text, const std::string& what) {
  if (text == "fp32") return MatmulPrecision::fp32;
  if (text == "bf16") return MatmulPrecision::bf16;
  throw Error(what + ": expected fp32 or bf16, found '" + text + "'");
}

void set_matmul_precision(MatmulPrecision p) {
  if (p == MatmulPrecision::bf16 && !isa_includes(effective_isa(), dnnl::cpu_isa::avx512_core))
    throw Error(std::string("--precision bf16 needs AVX-512 (oneDNN's bf16 matmul); this CPU's oneDNN ISA is ") +
                isa_name(effective_isa()));
  process_precision.store(p, std::memory_order_relaxed);
}

MatmulPrecision matmul_precision() { return process_precision.load(std::memory_order_relaxed); }

bool onednn_runs_gemm(int N, int K) {
  if (K <= 0 || N <= 0) return false;
  if (matmul_precision() == MatmulPrecision::bf16) return true;
  return N >= 64 && K >= 64 && isa_includes(effective_isa(), dnnl::cpu_isa::avx2);
}

void round_to_bf16(uint16_t* out, const float* in, int64_t n) {
  // Blocks of 64 Ki values over the threads outside a parallel region (each value is rounded on
  // its own, so the split changes nothing), in the calling thread inside one.
  constexpr int64_t kBlock = int64_t(1) << 16;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1 && !omp_in_parallel())
  for (int64_t b = 0; b < blocks; ++b) simd::round_to_bf16(out + b * kBlock, in + b * kBlock, std::min(kBlock, n - b * kBlock));
}

// oneDNN's blocking depends on the operands' leading dimensions (measured: a Linear writing a
// column block of a wider buffer differed in the last bit from the same Linear written alone), so
// it only ever sees dense operands: a strided A or B is copied (rounded, in bf16) into a dense
// buffer of this thread, and a strided C is computed in one and copied back. The results then
// depend on the values, the shape and the transpositions alone.
void onednn_gemm(const OnednnGemm& g) {
  const bool bf16 = matmul_precision() == MatmulPrecision::bf16;
  thread_local std::vector<uint16_t> a_bf16, b_bf16;  // per thread: GEMMs run inside parallel regions too
  thread_local std::vector<float> a_dense, b_dense, c_dense;
  const void* a = g.A;
  const void* b = g.B;
  int lda = g.lda, ldb = g.ldb;
  if ((g.a_bf16 != nullptr || g.c_bf16 != nullptr || g.post_op != OnednnPostOp::none) && !bf16)
    throw Error("oneDNN GEMM: bf16 operands, a bf16 result and post-ops are for the bf16 precision only");
  if (g.c_bf16 != nullptr && g.accumulate) throw Error("oneDNN GEMM: a bf16 result cannot accumulate");
  if (g.a_bf16 != nullptr) {
    if (g.trans_a) throw Error("oneDNN GEMM: a bf16 A must not be transposed");
    a = g.a_bf16, lda = g.K;
  }
  if (bf16) {
    if (g.a_bf16 == nullptr) {
      lda = round_operand(a_bf16, g.A, g.trans_a, g.M, g.K, g.lda);
      a = a_bf16.data();
    }
    if (g.b_bf16 != nullptr) {
      b = g.b_bf16, ldb = g.trans_b ? g.K : g.N;
    } else {
      ldb = round_operand(b_bf16, g.B, g.trans_b, g.K, g.N, g.ldb);
      b = b_bf16.data();
    }
  } else {
    a = dense_operand(a_dense, g.A, g.trans_a ? g.K : g.M, g.trans_a ? g.M : g.K, lda);
    b = dense_operand(b_dense, g.B, g.trans_b ? g.N : g.K, g.trans_b ? g.K : g.N, ldb);
  }
  void* c = g.c_bf16 != nullptr ? static_cast<void*>(g.c_bf16) : g.C;
  if (g.c_bf16 == nullptr && g.ldc != g.N) {
    c_dense.resize(size_t(g.M) * g.N);
    c = c_dense.data();
    if (g.accumulate) copy_rows(c_dense.data(), g.N, g.C, g.ldc, g.M, g.N);
  }
  OnednnGemm dense = g;
  dense.ldc = g.N;
  using dt = dnnl::memory::data_type;
  const dt in_type = bf16 ? dt::bf16 : dt::f32;
  const bool blocked = g.b_blocked != nullptr && g.trans_b && ldb == g.K;
  const Layout l = layout_of(dense, in_type, lda, ldb, blocked);
  const Primitive& primitive = primitive_for(dense, l, bf16, lda, ldb, blocked);
  if (blocked) b = g.b_blocked->copies().in(primitive.weights, layout_of(dense, in_type, lda, ldb, false).b, b);
  dnnl::engine& engine = cpu_engine();
  thread_local dnnl::stream stream(engine);
  thread_local std::vector<uint64_t> scratch;  // 8-byte units; the start aligned to 64 bytes below
  scratch.resize(primitive.scratchpad.get_size() / 8 + 9);
  void* scratch_start = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) & ~uintptr_t(63));
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(l.a, engine, const_cast<void*>(a))},
                                             {DNNL_ARG_WEIGHTS, dnnl::memory(primitive.weights, engine, const_cast<void*>(b))},
                                             {DNNL_ARG_DST, dnnl::memory(l.c, engine, c)},
                                             {DNNL_ARG_SCRATCHPAD, dnnl::memory(primitive.scratchpad, engine, scratch_start)}};
  if (g.bias != nullptr) args.emplace(DNNL_ARG_BIAS, dnnl::memory(l.bias, engine, const_cast<float*>(g.bias)));
  primitive.matmul.execute(stream, args);
  stream.wait();
  if (g.c_bf16 == nullptr && c != g.C) copy_rows(g.C, g.ldc, static_cast<const float*>(c), g.N, g.M, g.N);
}

std::string onednn_description() {
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         " (cpu isa " + isa_name(effective_isa()) + ")";
}

}  // namespace fca
