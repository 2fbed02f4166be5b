// Highway's dynamic dispatch: this file is compiled once per target (foreach_target.h re-includes
// it with HWY_NAMESPACE set to each), and HWY_EXPORT / HWY_DYNAMIC_DISPATCH pick the best one at
// run time. See ops/simd.h for the numerical contract.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/simd.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>

#include "core/error.h"
#include "ops/fast_math_constants.h"
#include "ops/simd.h"

HWY_BEFORE_NAMESPACE();
namespace fca::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
constexpr int kLanes = int(HWY_LANES(float));  // 16 (AVX3), 8 (AVX2), 4 (SSE4, EMU128), 1 (SCALAR)
constexpr int kVectors = 16 / kLanes;           // vectors making up the 16 virtual lanes
static_assert(16 % kLanes == 0, "16 virtual lanes must be a whole number of vectors");

// The approximations below work on U independent vectors at once, each step applied to all U
// before the next: one vector's chain of 30-40 dependent operations then overlaps the others'
// (element-wise kernels run U = 4: the GELU forward 1.3-1.5x faster than one vector at a time). Every lane goes
// through exactly the same operations whatever U, so the results do not depend on it.
template <int U, class F>
HWY_INLINE void EachU(F f) {
  for (int u = 0; u < U; ++u) f(u);
}

// exp_approx of ops/fast_math.h, lane by lane: the same operations in the same order (in place).
// kInRange: the caller knows every x is within the clamp's range [-87.3, 88.3] (the GELUs' tanh
// and erfc arguments), where the clamp changes nothing, so it is left out (2 of the GELU's ~40
// operations per vector).
template <int U, bool kInRange = false>
HWY_INLINE void ExpApproxU(D d, V (&x)[U]) {
  const hn::RebindToSigned<D> di;
  const V magic = hn::Set(d, 12582912.0f);
  V n[U], r[U];
  if constexpr (!kInRange)
    EachU<U>([&](int u) HWY_ATTR { x[u] = hn::Min(hn::Max(x[u], hn::Set(d, -87.3f)), hn::Set(d, 88.3f)); });
  EachU<U>([&](int u) HWY_ATTR { n[u] = hn::Sub(hn::Add(hn::Mul(x[u], hn::Set(d, 1.44269504088896341f)), magic), magic); });
  EachU<U>([&](int u) HWY_ATTR {
    r[u] = hn::Sub(hn::Sub(x[u], hn::Mul(n[u], hn::Set(d, 0.693359375f))), hn::Mul(n[u], hn::Set(d, -2.12194440e-4f)));
  });
  EachU<U>([&](int u) HWY_ATTR { x[u] = hn::Set(d, 1.9875691500e-4f); });
  for (const float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
    EachU<U>([&](int u) HWY_ATTR { x[u] = hn::Add(hn::Mul(x[u], r[u]), hn::Set(d, c)); });
  EachU<U>([&](int u) HWY_ATTR { x[u] = hn::Add(hn::Add(hn::Mul(hn::Mul(x[u], r[u]), r[u]), r[u]), hn::Set(d, 1.0f)); });
  EachU<U>([&](int u) HWY_ATTR {
    const auto exponent = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n[u]), hn::Set(di, 127)));
    x[u] = hn::Mul(x[u], hn::BitCast(d, exponent));
  });
}
HWY_INLINE V ExpApprox(D d, V x) {
  V one[1] = {x};
  ExpApproxU(d, one);
  return one[0];
}

// tanh_approx: x clamped to [-kTanhSaturation, kTanhSaturation] (no subnormals: ops/fast_math.h),
// then 1 - 2 / (e^{2x} + 1) (in place).
template <int U>
HWY_INLINE void TanhApproxU(D d, V (&x)[U]) {
  EachU<U>([&](int u) HWY_ATTR {
    x[u] = hn::Mul(hn::Set(d, 2.0f), hn::Min(hn::Max(x[u], hn::Set(d, -kTanhSaturation)), hn::Set(d, kTanhSaturation)));
  });
  static_assert(2.0f * kTanhSaturation <= 87.3f, "ExpApproxU's clamp is left out for 2x");
  ExpApproxU<U, true>(d, x);  // 2x in [-20, 20]
  EachU<U>([&](int u) HWY_ATTR { x[u] = hn::Sub(hn::Set(d, 1.0f), hn::Div(hn::Set(d, 2.0f), hn::Add(x[u], hn::Set(d, 1.0f)))); });
}

constexpr float kSqrt2OverPi = float(0.7978845608028654);

// one_plus_erf_approx of ops/fast_math.h, lane by lane (z in place).
template <int U>
HWY_INLINE void OnePlusErfU(D d, V (&z)[U]) {
  const V zero = hn::Zero(d), one = hn::Set(d, 1.0f), two = hn::Set(d, 2.0f);
  V b[U], t[U], q[U];
  EachU<U>([&](int u) HWY_ATTR { b[u] = hn::Min(hn::Abs(z[u]), hn::Set(d, 9.0f)); });
  EachU<U>([&](int u) HWY_ATTR { t[u] = hn::Div(one, hn::Add(one, hn::Mul(hn::Set(d, 0.5f), b[u]))); });
  EachU<U>([&](int u) HWY_ATTR { q[u] = hn::Set(d, kErfc[9]); });
  for (int k = 8; k >= 0; --k) EachU<U>([&](int u) HWY_ATTR { q[u] = hn::Add(hn::Mul(q[u], t[u]), hn::Set(d, kErfc[k])); });
  EachU<U>([&](int u) HWY_ATTR { b[u] = hn::Neg(hn::Mul(b[u], b[u])); });
  static_assert(9.0f * 9.0f <= 87.3f, "ExpApproxU's clamp is left out for -b^2");
  ExpApproxU<U, true>(d, b);  // -b^2 in [-81, 0] (b = min(|z|, 9))
  EachU<U>([&](int u) HWY_ATTR {
    const V c = hn::Mul(b[u], q[u]);
    z[u] = hn::IfThenElse(hn::Lt(z[u], zero), c, hn::Sub(two, c));
  });
}

constexpr float kInvSqrt2 = float(0.70710678118654752);
constexpr float kInvSqrt2Pi = float(0.39894228040143268);

// The exact GELU 0.5 x (1 + erf(x / sqrt 2)) (x in place) and its derivative (1 + erf) / 2 + x
// pdf(x) times dy (into dy).
template <int U>
HWY_INLINE void GeluErfForwardU(D d, V (&x)[U]) {
  V e[U];
  EachU<U>([&](int u) HWY_ATTR { e[u] = hn::Mul(x[u], hn::Set(d, kInvSqrt2)); });
  OnePlusErfU(d, e);
  EachU<U>([&](int u) HWY_ATTR { x[u] = hn::Mul(hn::Mul(hn::Set(d, 0.5f), x[u]), e[u]); });
}
template <int U>
HWY_INLINE void GeluErfBackwardU(D d, V (&dy)[U], const V (&x)[U]) {
  V cdf[U], pdf[U];
  EachU<U>([&](int u) HWY_ATTR { cdf[u] = hn::Mul(x[u], hn::Set(d, kInvSqrt2)); });
  OnePlusErfU(d, cdf);
  EachU<U>([&](int u) HWY_ATTR { pdf[u] = hn::Mul(hn::Mul(hn::Set(d, -0.5f), x[u]), x[u]); });
  ExpApproxU(d, pdf);
  EachU<U>([&](int u) HWY_ATTR {
    const V c = hn::Mul(hn::Set(d, 0.5f), cdf[u]), p = hn::Mul(hn::Set(d, kInvSqrt2Pi), pdf[u]);
    dy[u] = hn::Mul(dy[u], hn::Add(c, hn::Mul(x[u], p)));
  });
}

// GELU_tanh (x in place) and its derivative times dy (into dy).
template <int U>
HWY_INLINE void GeluForwardU(D d, V (&x)[U]) {
  V th[U];
  EachU<U>([&](int u) HWY_ATTR {
    const V cube = hn::Mul(hn::Mul(hn::Mul(hn::Set(d, 0.044715f), x[u]), x[u]), x[u]);
    th[u] = hn::Mul(hn::Set(d, kSqrt2OverPi), hn::Add(x[u], cube));
  });
  TanhApproxU(d, th);
  EachU<U>([&](int u) HWY_ATTR { x[u] = hn::Mul(hn::Mul(hn::Set(d, 0.5f), x[u]), hn::Add(hn::Set(d, 1.0f), th[u])); });
}
template <int U>
HWY_INLINE void GeluBackwardU(D d, V (&dy)[U], const V (&x)[U]) {
  const V half = hn::Set(d, 0.5f), one = hn::Set(d, 1.0f);
  V th[U];
  EachU<U>([&](int u) HWY_ATTR {
    const V cube = hn::Mul(hn::Mul(hn::Mul(hn::Set(d, 0.044715f), x[u]), x[u]), x[u]);
    th[u] = hn::Mul(hn::Set(d, kSqrt2OverPi), hn::Add(x[u], cube));
  });
  TanhApproxU(d, th);
  EachU<U>([&](int u) HWY_ATTR {
    const V dtanh_arg =
        hn::Mul(hn::Set(d, kSqrt2OverPi), hn::Add(one, hn::Mul(hn::Mul(hn::Set(d, float(3 * 0.044715)), x[u]), x[u])));
    const V left = hn::Mul(half, hn::Add(one, th[u]));
    const V right = hn::Mul(hn::Mul(hn::Mul(half, x[u]), hn::Sub(one, hn::Mul(th[u], th[u]))), dtanh_arg);
    dy[u] = hn::Mul(dy[u], hn::Add(left, right));
  });
}

// The 16 virtual lanes: accumulators stored in lane order, then summed in lane order as the scalar
// templates do.
struct Lanes16 {
  HWY_ALIGN float lane[16];
  float total() const {
    float s = 0;
    for (int k = 0; k < 16; ++k) s += lane[k];
    return s;
  }
};

HWY_INLINE void StoreLanes(D d, const V* acc, Lanes16& out) {
  for (int k = 0; k < kVectors; ++k) hn::Store(acc[k], d, out.lane + k * kLanes);
}

// Loads and stores of the first m lanes (m <= kLanes; m == kLanes is a plain unaligned access, and
// folds to one where m is a constant). A tail is read with a masked load where the target has one
// that cannot fault (AVX2, AVX-512): the padded copy it replaces stalled on store forwarding, which
// cost softmax rows of arbitrary length about a sixth of their time. Masked-off lanes read as zero.
HWY_INLINE V LoadFirst(D d, const float* p, int m) {
  if (m == kLanes) return hn::LoadU(d, p);
#if HWY_TARGET <= HWY_AVX2
  return hn::MaskedLoad(hn::FirstN(d, size_t(m)), d, p);
#else
  HWY_ALIGN float buf[kLanes] = {};
  std::memcpy(buf, p, sizeof(float) * size_t(m));
  return hn::Load(d, buf);
#endif
}

HWY_INLINE void StoreFirst(D d, V v, float* p, int m) {
  if (m == kLanes) return hn::StoreU(v, d, p);
  hn::BlendedStore(v, hn::FirstN(d, size_t(m)), d, p);
}

// The 16-lane sums of kSums terms over i < n: `vector_terms(i, m, t)` sets t[s] to the vector of
// term s for positions i .. i + m - 1 (m = kLanes but in the tail; it loads and stores with
// LoadFirst/StoreFirst, and each position is visited once, in order). A tail lane's term lands on
// the lane of its position, as in the scalar templates; masked-off lanes add exactly zero (an
// accumulator that starts at +0 is never -0, so x + 0 == x bit for bit).
template <int kSums, class VectorTerms>
HWY_INLINE void LaneAccumulateN(int n, VectorTerms vector_terms, Lanes16* lanes) {
  const D d;
  V acc[kSums][kVectors];
  for (auto& per_sum : acc)
    for (auto& a : per_sum) a = hn::Zero(d);
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < kVectors; ++k) {
      V t[kSums];
      vector_terms(i + k * kLanes, kLanes, t);
      for (int s = 0; s < kSums; ++s) acc[s][k] = hn::Add(acc[s][k], t[s]);
    }
  for (int k = 0; i < n; ++k, i += kLanes) {
    const int m = n - i < kLanes ? n - i : kLanes;
    V t[kSums];
    vector_terms(i, m, t);
    const auto live = hn::FirstN(d, size_t(m));
    for (int s = 0; s < kSums; ++s) acc[s][k] = hn::Add(acc[s][k], hn::IfThenElseZero(live, t[s]));
  }
  for (int s = 0; s < kSums; ++s) StoreLanes(d, acc[s], lanes[s]);
}
template <int kSums, class VectorTerms>
HWY_INLINE void LaneReduceN(int n, VectorTerms vector_terms, float (&sums)[kSums]) {
  Lanes16 l[kSums];
  LaneAccumulateN<kSums>(n, vector_terms, l);
  for (int s = 0; s < kSums; ++s) sums[s] = l[s].total();
}

// Lanes16::total() of `rows` (<= kMaxNormRows) rows' lanes, the same additions in the same order for
// each row, the rows' chains interleaved: a short row's 16 dependent additions are most of its
// time when summed alone (about 45 cycles of latency for 8 vectors of work at D 128), and
// independent chains overlap.
HWY_INLINE void InterleavedTotals(const Lanes16* l, int rows, float* sums) {
  float s[kMaxNormRows] = {};
  for (int k = 0; k < 16; ++k)
    for (int r = 0; r < rows; ++r) s[r] += l[r].lane[k];
  for (int r = 0; r < rows; ++r) sums[r] = s[r];
}

// One sum: `vector_term(i, m)` returns the term's vector (see LaneReduceN).
template <class VectorTerm>
HWY_INLINE float LaneReduce(int n, VectorTerm vector_term) {
  float sum[1];
  LaneReduceN<1>(n, [&](int i, int m, V* t) HWY_ATTR { t[0] = vector_term(i, m); }, sum);
  return sum[0];
}

float LaneSum(const float* x, int n) {
  const D d;
  return LaneReduce(n, [&](int i, int m) HWY_ATTR { return LoadFirst(d, x + i, m); });
}

float LaneDot(const float* x, const float* y, int n) {
  const D d;
  return LaneReduce(n, [&](int i, int m) HWY_ATTR { return hn::Mul(LoadFirst(d, x + i, m), LoadFirst(d, y + i, m)); });
}

float LaneMax(const float* x, int n) {
  const D d;
  V acc[kVectors];
  for (auto& a : acc) a = hn::Set(d, x[0]);
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < kVectors; ++k) acc[k] = hn::Max(acc[k], hn::LoadU(d, x + i + k * kLanes));
  for (int k = 0; i < n; ++k, i += kLanes) {  // the tail: masked-off lanes keep their maximum
    const int m = n - i < kLanes ? n - i : kLanes;
    acc[k] = hn::IfThenElse(hn::FirstN(d, size_t(m)), hn::Max(acc[k], LoadFirst(d, x + i, m)), acc[k]);
  }
  Lanes16 l;
  StoreLanes(d, acc, l);
  float mx = l.lane[0];
  for (int k = 1; k < 16; ++k) mx = mx < l.lane[k] ? l.lane[k] : mx;
  return mx;
}

// row[i] = exp_approx(row[i] - shift), and shifted[i] = row[i] - shift on entry when shifted is not
// null; returns the 16-lane sum of the exponentials.
HWY_INLINE float ExpShiftedSumStore(float* row, float* shifted, int n, float shift) {
  const D d;
  const V s = hn::Set(d, shift);
  return LaneReduce(n, [&](int i, int m) HWY_ATTR {
    const V x = hn::Sub(LoadFirst(d, row + i, m), s);
    if (shifted != nullptr) StoreFirst(d, x, shifted + i, m);
    const V e = ExpApprox(d, x);
    StoreFirst(d, e, row + i, m);
    return e;
  });
}

float ExpShiftedSum(float* row, int n, float shift) { return ExpShiftedSumStore(row, nullptr, n, shift); }

// (x[i] - mean)^2 for the `live` positions from i: the term of LayerNorm's two-pass variance.
HWY_INLINE V SquaredDeviation(D d, const float* x, int i, int live, V mean) {
  const V dev = hn::Sub(LoadFirst(d, x + i, live), mean);
  return hn::Mul(dev, dev);
}

float LaneSquaredDeviationSum(const float* x, int n, float mean) {
  const D d;
  const V m = hn::Set(d, mean);
  return LaneReduce(n, [&](int i, int live) HWY_ATTR { return SquaredDeviation(d, x, i, live, m); });
}

float LaneCenteredProductSum(const float* a, const float* b, const float* x, int n, float mean, float scale) {
  const D d;
  const V m = hn::Set(d, mean), s = hn::Set(d, scale);
  return LaneReduce(n, [&](int i, int live) HWY_ATTR {
    const V ab = hn::Mul(LoadFirst(d, a + i, live), LoadFirst(d, b + i, live));
    return hn::Mul(hn::Mul(ab, hn::Sub(LoadFirst(d, x + i, live), m)), s);
  });
}

// Element-wise over n values: `f(d, v)` maps the loaded inputs v[k][u] (input k < kIn, vector u <
// U) to the outputs, written into v[0]. Four vectors at a time (the approximations' chains overlap,
// above), then one at a time, the tail through LoadFirst/StoreFirst (the same lane operations).
template <int kIn, class F>
HWY_INLINE void MapN(float* out, const float* const (&in)[kIn], int64_t n, F f) {
  const D d;
  constexpr int U = 4;
  int64_t i = 0;
  for (; i + U * kLanes <= n; i += U * kLanes) {
    V v[kIn][U];
    for (int k = 0; k < kIn; ++k)
      for (int u = 0; u < U; ++u) v[k][u] = hn::LoadU(d, in[k] + i + u * kLanes);
    f(d, v);
    for (int u = 0; u < U; ++u) hn::StoreU(v[0][u], d, out + i + u * kLanes);
  }
  for (; i < n; i += kLanes) {
    const int m = n - i < kLanes ? int(n - i) : kLanes;
    V v[kIn][1];
    for (int k = 0; k < kIn; ++k) v[k][0] = LoadFirst(d, in[k] + i, m);
    f(d, v);
    StoreFirst(d, v[0][0], out + i, m);
  }
}

void GeluTanhForward(float* out, const float* inp, int64_t n) {
  const float* const in[1] = {inp};
  MapN<1>(out, in, n, [](D d, auto& v) HWY_ATTR { GeluForwardU(d, v[0]); });
}

void GeluTanhBackward(float* dinp, const float* dout, const float* inp, int64_t n) {
  const float* const in[2] = {dout, inp};
  MapN<2>(dinp, in, n, [](D d, auto& v) HWY_ATTR { GeluBackwardU(d, v[0], v[1]); });
}

void GeluErfForward(float* out, const float* inp, int64_t n) {
  const float* const in[1] = {inp};
  MapN<1>(out, in, n, [](D d, auto& v) HWY_ATTR { GeluErfForwardU(d, v[0]); });
}

void GeluErfBackward(float* dinp, const float* dout, const float* inp, int64_t n) {
  const float* const in[2] = {dout, inp};
  MapN<2>(dinp, in, n, [](D d, auto& v) HWY_ATTR { GeluErfBackwardU(d, v[0], v[1]); });
}

void LayerNormRows(float* y, int64_t ldy, const float* x, int64_t ldx, const float* weight, const float* bias,
                   int rows, int n, float eps, float* mean, float* rstd) {
  const D d;
  Lanes16 l[kMaxNormRows];
  float m[kMaxNormRows], var[kMaxNormRows];
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    LaneAccumulateN<1>(n, [&](int i, int live, V* t) HWY_ATTR { t[0] = LoadFirst(d, xr + i, live); }, l + r);
  }
  InterleavedTotals(l, rows, m);
  for (int r = 0; r < rows; ++r) {
    m[r] /= float(n);
    const float* xr = x + r * ldx;
    const V mr = hn::Set(d, m[r]);
    LaneAccumulateN<1>(n, [&](int i, int live, V* t) HWY_ATTR { t[0] = SquaredDeviation(d, xr, i, live, mr); }, l + r);
  }
  InterleavedTotals(l, rows, var);
  for (int r = 0; r < rows; ++r) {
    const float mr = m[r], rs = 1.0f / std::sqrt(var[r] / float(n) + eps);
    const float* const in[3] = {x + r * ldx, weight, bias};
    MapN<3>(y + r * ldy, in, n, [mr, rs](D d, auto& v) HWY_ATTR {
      for (size_t u = 0; u < std::size(v[0]); ++u)
        v[0][u] = hn::Add(hn::Mul(hn::Mul(hn::Sub(v[0][u], hn::Set(d, mr)), hn::Set(d, rs)), v[1][u]), v[2][u]);
    });
    mean[r] = mr;
    rstd[r] = rs;
  }
}

void RmsNormRows(float* y, const float* x, int64_t ld, const float* scale, int rows, int n, float eps, float* rstd) {
  const D d;
  Lanes16 l[kMaxNormRows];
  float sq[kMaxNormRows];
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * ld;
    LaneAccumulateN<1>(
        n,
        [&](int i, int live, V* t) HWY_ATTR {
          const V v = LoadFirst(d, xr + i, live);
          t[0] = hn::Mul(v, v);
        },
        l + r);
  }
  InterleavedTotals(l, rows, sq);
  for (int r = 0; r < rows; ++r) {
    const float rs = 1.0f / std::sqrt(sq[r] / float(n) + eps);
    if (scale == nullptr) {
      const float* const in[1] = {x + r * ld};
      MapN<1>(y + r * ld, in, n, [rs](D d, auto& v) HWY_ATTR {
        for (V& x : v[0]) x = hn::Mul(x, hn::Set(d, rs));
      });
    } else {
      const float* const in[2] = {x + r * ld, scale};
      MapN<2>(y + r * ld, in, n, [rs](D d, auto& v) HWY_ATTR {
        for (size_t u = 0; u < std::size(v[0]); ++u) v[0][u] = hn::Mul(hn::Mul(v[0][u], hn::Set(d, rs)), v[1][u]);
      });
    }
    if (rstd != nullptr) rstd[r] = rs;
  }
}

void Scale(float* y, const float* x, float a, int64_t n) {
  const float* const in[1] = {x};
  MapN<1>(y, in, n, [a](D d, auto& v) HWY_ATTR {
    for (V& x : v[0]) x = hn::Mul(hn::Set(d, a), x);
  });
}

void ResidualRow(float* y, const float* h, float a, const float* f, int64_t n) {
  const float* const in[2] = {h, f};
  MapN<2>(y, in, n, [a](D d, auto& v) HWY_ATTR {
    for (size_t u = 0; u < std::size(v[0]); ++u) v[0][u] = hn::Add(v[0][u], hn::Mul(hn::Set(d, a), v[1][u]));
  });
}

// f32_to_bf16 of core/half.h, branch-free: round to nearest, ties to even, on the bits (a carry
// into the exponent is right; the largest finite values round to inf); a NaN keeps its top bits
// and is made quiet. Integer operations only, so every target gives the same bits.
HWY_INLINE uint16_t RoundToBf16Scalar(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof x);
  const uint32_t rounded = (x + 0x7FFF + ((x >> 16) & 1)) >> 16;
  return uint16_t((x & 0x7FFFFFFF) > 0x7F800000 ? (x >> 16) | 0x40 : rounded);
}

void RoundToBf16(uint16_t* out, const float* in, int64_t n) {
  const D d;
  const hn::RebindToUnsigned<D> du;  // the bits (ShiftRight on unsigned lanes is logical)
  const hn::RebindToSigned<D> di;    // the NaN test and the narrowing, on values 0 .. 0x7FFFFFFF
  const hn::Rebind<uint16_t, D> du16;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const auto x = hn::BitCast(du, hn::LoadU(d, in + i));
    const auto high = hn::ShiftRight<16>(x);
    const auto rounded = hn::ShiftRight<16>(hn::Add(hn::Add(x, hn::Set(du, 0x7FFF)), hn::And(high, hn::Set(du, 1))));
    const auto magnitude = hn::BitCast(di, hn::And(x, hn::Set(du, 0x7FFFFFFF)));
    const auto is_nan = hn::RebindMask(du, hn::Gt(magnitude, hn::Set(di, 0x7F800000)));
    const auto bits = hn::IfThenElse(is_nan, hn::Or(high, hn::Set(du, 0x40)), rounded);  // 0 .. 0xFFFF
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, bits)), du16, out + i);
  }
  for (; i < n; ++i) out[i] = RoundToBf16Scalar(in[i]);
}

void ColumnSumsAdd(float* out, const float* in, int64_t N, int C, int64_t ld) {
  const D d;
  constexpr int kGroup = 8;  // vectors of columns per pass over the rows
  for (int j0 = 0; j0 < C; j0 += kGroup * kLanes) {
    const int vectors = std::min(kGroup, (C - j0 + kLanes - 1) / kLanes);
    V acc[kGroup];
    for (auto& a : acc) a = hn::Zero(d);
    auto live = [&](int v) { return std::min(kLanes, C - j0 - v * kLanes); };
    for (int64_t n = 0; n < N; ++n) {
      const float* row = in + n * ld + j0;
      for (int v = 0; v < vectors; ++v) acc[v] = hn::Add(acc[v], LoadFirst(d, row + v * kLanes, live(v)));
    }
    for (int v = 0; v < vectors; ++v) {
      float* o = out + j0 + v * kLanes;
      StoreFirst(d, hn::Add(LoadFirst(d, o, live(v)), acc[v]), o, live(v));
    }
  }
}

void MixStreams(float* const* y, int streams, const float* const* x, int sources, const float* alpha, int64_t n) {
  const D d;
  constexpr int kMaxStreams = kMixStreamsMaxOutputs;
  auto mix = [&](int64_t i, int m) HWY_ATTR {
    V acc[kMaxStreams];
    const V x0 = LoadFirst(d, x[0] + i, m);
    for (int s = 0; s < streams; ++s) acc[s] = hn::Mul(hn::Set(d, alpha[s * sources]), x0);
    for (int j = 1; j < sources; ++j) {
      const V xj = LoadFirst(d, x[j] + i, m);
      for (int s = 0; s < streams; ++s) acc[s] = hn::Add(acc[s], hn::Mul(hn::Set(d, alpha[s * sources + j]), xj));
    }
    for (int s = 0; s < streams; ++s) StoreFirst(d, acc[s], y[s] + i, m);
  };
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) mix(i, kLanes);
  if (i < n) mix(i, int(n - i));
}

// One pass: m, v and p of each vector are updated together (a single read and write of each), for
// the first `live` lanes.
HWY_INLINE void AdamWVector(D d, float* p, const float* g, float* m, float* v, const AdamWConstants& k, int live) {
  const V gv = hn::Mul(LoadFirst(d, g, live), hn::Set(d, k.grad_scale));
  const V m0 = LoadFirst(d, m, live), v0 = LoadFirst(d, v, live);
  const V p0 = LoadFirst(d, p, live);
  const V m1 = hn::Add(hn::Mul(hn::Set(d, k.b1), m0), hn::Mul(hn::Set(d, 1.0f - k.b1), gv));
  const V v1 = hn::Add(hn::Mul(hn::Set(d, k.b2), v0), hn::Mul(hn::Mul(hn::Set(d, 1.0f - k.b2), gv), gv));
  const V denominator = hn::Add(hn::Mul(hn::Sqrt(v1), hn::Set(d, k.inv_sqrt_bias2)), hn::Set(d, k.eps));
  const V p1 = hn::Sub(hn::Mul(p0, hn::Set(d, k.decay)), hn::Div(hn::Mul(hn::Set(d, k.step_size), m1), denominator));
  StoreFirst(d, m1, m, live), StoreFirst(d, v1, v, live), StoreFirst(d, p1, p, live);
}

void AdamWUpdate(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConstants& k) {
  const D d;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) AdamWVector(d, p + i, g + i, m + i, v + i, k, kLanes);
  if (i < n) AdamWVector(d, p + i, g + i, m + i, v + i, k, int(n - i));
}

// The softmax row of ops/simd.h in three passes over the row (maximum; shift, exponential and sum;
// normalisation with the statistics' products), each operation the one of the separate kernels.
SoftmaxRowStats SoftmaxRow(float* row, int n, float* logp, const float* prev_logp) {
  const D d;
  SoftmaxRowStats st;
  st.max = LaneMax(row, n);
  st.sum = ExpShiftedSumStore(row, logp, n, st.max);
  const float inv = 1.0f / st.sum;
  if (logp == nullptr) {
    Scale(row, row, inv, n);
    return st;
  }
  st.log_sum = std::log(st.sum);
  const V vinv = hn::Set(d, inv), vlog_sum = hn::Set(d, st.log_sum);
  // p = inv * e (Scale's product), logp -= log_sum, then the products p * logp and p * prev_logp.
  auto normalise = [&](int i, int m) HWY_ATTR {
    const V p = hn::Mul(vinv, LoadFirst(d, row + i, m));
    const V lp = hn::Sub(LoadFirst(d, logp + i, m), vlog_sum);
    StoreFirst(d, p, row + i, m);
    StoreFirst(d, lp, logp + i, m);
    return std::pair<V, V>(p, lp);
  };
  if (prev_logp == nullptr) {
    float sums[1];
    LaneReduceN<1>(
        n,
        [&](int i, int m, V* t) HWY_ATTR {
          const auto [p, lp] = normalise(i, m);
          t[0] = hn::Mul(p, lp);
        },
        sums);
    st.neg_entropy = sums[0];
    return st;
  }
  float sums[2];
  LaneReduceN<2>(
      n,
      [&](int i, int m, V* t) HWY_ATTR {
        const auto [p, lp] = normalise(i, m);
        t[0] = hn::Mul(p, lp);
        t[1] = hn::Mul(p, LoadFirst(d, prev_logp + i, m));
      },
      sums);
  st.neg_entropy = sums[0];
  st.cross = sums[1];
  return st;
}

int64_t CurrentTarget() { return HWY_TARGET; }

}  // namespace fca::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fca::simd {

HWY_EXPORT(LaneSum);
HWY_EXPORT(LaneDot);
HWY_EXPORT(LaneMax);
HWY_EXPORT(ExpShiftedSum);
HWY_EXPORT(SoftmaxRow);
HWY_EXPORT(LaneSquaredDeviationSum);
HWY_EXPORT(LaneCenteredProductSum);
HWY_EXPORT(GeluTanhForward);
HWY_EXPORT(GeluTanhBackward);
HWY_EXPORT(GeluErfForward);
HWY_EXPORT(GeluErfBackward);
HWY_EXPORT(LayerNormRows);
HWY_EXPORT(RmsNormRows);
HWY_EXPORT(Scale);
HWY_EXPORT(ResidualRow);
HWY_EXPORT(MixStreams);
HWY_EXPORT(ColumnSumsAdd);
HWY_EXPORT(RoundToBf16);
HWY_EXPORT(AdamWUpdate);
HWY_EXPORT(CurrentTarget);

std::string dispatched_target() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(CurrentTarget)()); }

std::vector<Target> available_targets() {
  std::vector<Target> out;
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) out.push_back({t, hwy::TargetName(t)});
  return out;
}

void force_target(int64_t bit) { hwy::SetSupportedTargetsForTest(bit); }

float lane_sum(const float* x, int n) { return HWY_DYNAMIC_DISPATCH(LaneSum)(x, n); }
float lane_dot(const float* x, const float* y, int n) { return HWY_DYNAMIC_DISPATCH(LaneDot)(x, y, n); }
float lane_max(const float* x, int n) { return HWY_DYNAMIC_DISPATCH(LaneMax)(x, n); }
float lane_centered_product_sum(const float* a, const float* b, const float* x, int n, float mean, float scale) {
  return HWY_DYNAMIC_DISPATCH(LaneCenteredProductSum)(a, b, x, n, mean, scale);
}
float exp_shifted_sum(float* row, int n, float shift) { return HWY_DYNAMIC_DISPATCH(ExpShiftedSum)(row, n, shift); }
SoftmaxRowStats softmax_row(float* row, int n, float* logp, const float* prev_logp) {
  return HWY_DYNAMIC_DISPATCH(SoftmaxRow)(row, n, logp, prev_logp);
}
float lane_squared_deviation_sum(const float* x, int n, float mean) {
  return HWY_DYNAMIC_DISPATCH(LaneSquaredDeviationSum)(x, n, mean);
}
void round_to_bf16(uint16_t* out, const float* in, int64_t n) { HWY_DYNAMIC_DISPATCH(RoundToBf16)(out, in, n); }
void column_sums_add(float* out, const float* in, int64_t N, int C, int64_t ld) {
  HWY_DYNAMIC_DISPATCH(ColumnSumsAdd)(out, in, N, C, ld);
}
void gelu_tanh_forward(float* out, const float* inp, int64_t n) { HWY_DYNAMIC_DISPATCH(GeluTanhForward)(out, inp, n); }
void gelu_tanh_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  HWY_DYNAMIC_DISPATCH(GeluTanhBackward)(dinp, dout, inp, n);
}

void gelu_erf_forward(float* out, const float* inp, int64_t n) { HWY_DYNAMIC_DISPATCH(GeluErfForward)(out, inp, n); }
void gelu_erf_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  HWY_DYNAMIC_DISPATCH(GeluErfBackward)(dinp, dout, inp, n);
}
void layernorm_rows(float* y, int64_t ldy, const float* x, int64_t ldx, const float* weight, const float* bias,
                    int rows, int n, float eps, float* mean, float* rstd) {
  for (int r0 = 0; r0 < rows; r0 += kMaxNormRows)
    HWY_DYNAMIC_DISPATCH(LayerNormRows)(y + r0 * ldy, ldy, x + r0 * ldx, ldx, weight, bias,
                                        std::min(kMaxNormRows, rows - r0), n, eps, mean + r0, rstd + r0);
}
void rmsnorm_rows(float* y, const float* x, int64_t ld, const float* scale, int rows, int n, float eps, float* rstd) {
  for (int r0 = 0; r0 < rows; r0 += kMaxNormRows)
    HWY_DYNAMIC_DISPATCH(RmsNormRows)(y + r0 * ld, x + r0 * ld, ld, scale, std::min(kMaxNormRows, rows - r0), n, eps,
                                      rstd != nullptr ? rstd + r0 : nullptr);
}
void scale(float* y, const float* x, float a, int64_t n) { HWY_DYNAMIC_DISPATCH(Scale)(y, x, a, n); }
// y += a x is the residual row with h = y (each value is loaded before it is stored).
void axpy(float* y, const float* x, float a, int64_t n) { HWY_DYNAMIC_DISPATCH(ResidualRow)(y, y, a, x, n); }
void residual_row(float* y, const float* h, float a, const float* f, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ResidualRow)(y, h, a, f, n);
}
void mix_streams(float* const* y, int streams, const float* const* x, int sources, const float* alpha, int64_t n) {
  if (streams < 1 || streams > 4 || sources < 1)
    throw Error("mix_streams: " + std::to_string(streams) + " streams and " + std::to_string(sources) +
                " sources, expected 1..4 streams and at least one source");
  HWY_DYNAMIC_DISPATCH(MixStreams)(y, streams, x, sources, alpha, n);
}
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConstants& k) {
  HWY_DYNAMIC_DISPATCH(AdamWUpdate)(p, g, m, v, n, k);
}

}  // namespace fca::simd
#endif  // HWY_ONCE
