// The small-product kernel of ops/simd.h (simd::tile_matmul), compiled once per Highway target and
// dispatched at run time like ops/simd.cpp.
//
// Register tiling: kRows rows of C by two vectors of columns are held in accumulators while the
// inner dimension p runs; each step loads two vectors of B's row p, broadcasts A(i, p) for each row
// and does one multiply-add per accumulator. Every output is one multiply-add chain over p = 0..k-1
// in order, started from zero, then scaled by alpha (and added to the addend: C itself, or a bias row), whatever the tile, the vector
// width or the position, so a row of C depends only on its own row of A and on B: results do not
// depend on m, on how the caller splits rows, or on the target among those with fused multiply-add.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/simd_matmul.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cstdint>

#include "ops/simd.h"

HWY_BEFORE_NAMESPACE();
namespace fca::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rows per register tile: on AVX-512, 8 x 2 accumulators (16 of its 32 registers; 12 x 2 measured
// 10-25% slower); on the 16-register targets 6 x 2, so that 12 accumulators, two B vectors and a
// broadcast stay in registers. Partial tiles of 4, 2 and 1 rows handle the rest.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr int kRows = 8;
#else
constexpr int kRows = 6;
#endif

struct Operands {
  float* c;
  int64_t ldc;
  const float* a;
  int64_t a_row, a_col;  // A(i, p) = a[i * a_row + p * a_col]
  const float* b;
  int64_t ldb;  // B(p, j) = b[p * ldb + j]
  int k;
  float alpha;
  const float* addend;  // null, or Z(i, j) = addend[i * ld_addend + j] added to alpha times the chain
  int64_t ld_addend;
};

// Rows i0 .. i0 + R - 1, columns j .. j + V * Lanes(d) - 1 of C.
template <int R, int V, class DT>
HWY_INLINE void Tile(DT d, const Operands& o, int i0, int j) {
  using Vec = hn::Vec<DT>;
  const size_t N = hn::Lanes(d);
  Vec acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = hn::Zero(d);
  const float* a = o.a + i0 * o.a_row;
  const float* b = o.b + j;
  for (int p = 0; p < o.k; ++p, a += o.a_col, b += o.ldb) {
    Vec bv[V];
    for (int v = 0; v < V; ++v) bv[v] = hn::LoadU(d, b + v * N);
    for (int r = 0; r < R; ++r) {
      const Vec av = hn::Set(d, a[r * o.a_row]);
      for (int v = 0; v < V; ++v) acc[r][v] = hn::MulAdd(av, bv[v], acc[r][v]);
    }
  }
  const Vec alpha = hn::Set(d, o.alpha);
  for (int r = 0; r < R; ++r) {
    float* c = o.c + (i0 + r) * o.ldc + j;
    for (int v = 0; v < V; ++v) {
      Vec out = hn::Mul(alpha, acc[r][v]);
      if (o.addend != nullptr) out = hn::Add(hn::LoadU(d, o.addend + (i0 + r) * o.ld_addend + j + v * N), out);
      hn::StoreU(out, d, c + v * N);
    }
  }
}

// All columns of rows i0 .. i0 + R - 1: pairs of vectors, one vector, then single lanes (a
// one-lane vector of the same target, so the tail is the same multiply-add as the vector lanes).
template <int R>
HWY_INLINE void RowBlock(const Operands& o, int i0, int n) {
  const hn::ScalableTag<float> d;
  const int N = int(hn::Lanes(d));
  int j = 0;
  for (; j + 2 * N <= n; j += 2 * N) Tile<R, 2>(d, o, i0, j);
  for (; j + N <= n; j += N) Tile<R, 1>(d, o, i0, j);
  const hn::CappedTag<float, 1> d1;
  for (; j < n; ++j) Tile<R, 1>(d1, o, i0, j);
}

void TileMatmul(float* c, int64_t ldc, const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t ldb, int m,
                int n, int k, float alpha, const float* addend, int64_t ld_addend) {
  const Operands o{c, ldc, a, a_row, a_col, b, ldb, k, alpha, addend, ld_addend};
  int i = 0;
  for (; i + kRows <= m; i += kRows) RowBlock<kRows>(o, i, n);
  for (; i + 4 <= m; i += 4) RowBlock<4>(o, i, n);
  for (; i + 2 <= m; i += 2) RowBlock<2>(o, i, n);
  for (; i < m; ++i) RowBlock<1>(o, i, n);
}

int TilePanelWidth() { return 2 * int(hn::Lanes(hn::ScalableTag<float>())); }

// panel[r * w + j] = b[j * ldb + r] for r < kb, j < w: a block of a row-major weight [N, K] as
// the kernel's B panel (GEMM's op(B) = W^T). A scalar copy costs one load and one store per value
// (15% of a 1.4B-model pass at 256 rows, where each weight is packed for 256 rows); squares of
// lanes x lanes values go through an in-register transpose (16 x 16 on AVX-512, 8 x 8 on AVX2),
// the rest element by element. A copy: the values, hence the products, are the same either way.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr int kTransposeSquare = 16;
HWY_INLINE void TransposeSquare(float* out, int64_t ldo, const float* in, int64_t ldi) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(in + i * ldi);
  // Per 128-bit lane: pairs of rows interleaved, then pairs of pairs: u[4 g + c] holds, in lane
  // k, column 4 k + c of rows 4 g .. 4 g + 3.
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {
    const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
    r[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // Across lanes: output column 4 k + c gathers lane k of r[c], r[4 + c], r[8 + c], r[12 + c].
  for (int c = 0; c < 4; ++c) {
    const __m512 v_even = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88), v_odd = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
    const __m512 w_even = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
    const __m512 w_odd = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
    _mm512_storeu_ps(out + (0 + c) * ldo, _mm512_shuffle_f32x4(v_even, w_even, 0x88));
    _mm512_storeu_ps(out + (8 + c) * ldo, _mm512_shuffle_f32x4(v_even, w_even, 0xdd));
    _mm512_storeu_ps(out + (4 + c) * ldo, _mm512_shuffle_f32x4(v_odd, w_odd, 0x88));
    _mm512_storeu_ps(out + (12 + c) * ldo, _mm512_shuffle_f32x4(v_odd, w_odd, 0xdd));
  }
}
#elif HWY_TARGET == HWY_AVX2
constexpr int kTransposeSquare = 8;
HWY_INLINE void TransposeSquare(float* out, int64_t ldo, const float* in, int64_t ldi) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(in + i * ldi);
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 2; ++g) {  // u[4 g + c]: in 128-bit lane k, column 4 k + c of rows 4 g .. 4 g + 3
    r[4 * g + 0] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    r[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
    r[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    r[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
  }
  for (int c = 0; c < 4; ++c) {
    _mm256_storeu_ps(out + c * ldo, _mm256_permute2f128_ps(r[c], r[4 + c], 0x20));
    _mm256_storeu_ps(out + (4 + c) * ldo, _mm256_permute2f128_ps(r[c], r[4 + c], 0x31));
  }
}
#else
constexpr int kTransposeSquare = 0;  // element by element
HWY_INLINE void TransposeSquare(float*, int64_t, const float*, int64_t) {}
#endif

void PackTransposed(float* panel, int w, const float* b, int64_t ldb, int kb) {
  const int S = kTransposeSquare;
  int j0 = 0;
  if (S > 0)
    for (; j0 + S <= w; j0 += S) {
      int r0 = 0;
      for (; r0 + S <= kb; r0 += S) TransposeSquare(panel + int64_t(r0) * w + j0, w, b + j0 * ldb + r0, ldb);
      for (int j = j0; j < j0 + S; ++j)
        for (int r = r0; r < kb; ++r) panel[int64_t(r) * w + j] = b[j * ldb + r];
    }
  for (int j = j0; j < w; ++j)
    for (int r = 0; r < kb; ++r) panel[int64_t(r) * w + j] = b[j * ldb + r];
}

void PackRows(float* panel, int w, const float* b, int64_t ldb, int kb) {
  const hn::ScalableTag<float> d;
  const int N = int(hn::Lanes(d));
  for (int r = 0; r < kb; ++r, panel += w, b += ldb) {
    int j = 0;
    for (; j + N <= w; j += N) hn::StoreU(hn::LoadU(d, b + j), d, panel + j);
    for (; j < w; ++j) panel[j] = b[j];
  }
}

}  // namespace fca::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fca::simd {

HWY_EXPORT(TileMatmul);
HWY_EXPORT(TilePanelWidth);
HWY_EXPORT(PackTransposed);
HWY_EXPORT(PackRows);

int tile_panel_width() { return HWY_DYNAMIC_DISPATCH(TilePanelWidth)(); }

void pack_transposed(float* panel, int w, const float* b, int64_t ldb, int kb) {
  HWY_DYNAMIC_DISPATCH(PackTransposed)(panel, w, b, ldb, kb);
}

void pack_rows(float* panel, int w, const float* b, int64_t ldb, int kb) {
  HWY_DYNAMIC_DISPATCH(PackRows)(panel, w, b, ldb, kb);
}

void tile_matmul(float* c, int64_t ldc, const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t ldb,
                 int m, int n, int k, float alpha, const float* addend, int64_t ld_addend) {
  HWY_DYNAMIC_DISPATCH(TileMatmul)(c, ldc, a, a_row, a_col, b, ldb, m, n, k, alpha, addend, ld_addend);
}

}  // namespace fca::simd
#endif  // HWY_ONCE
