#include "ops/norms.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/phase_timer.h"
#include "ops/fast_math.h"
#include "ops/simd.h"

namespace fca {

namespace {

// One group of C values at xr (out may alias): the rmsnorm_forward of one (token, head); returns r.
template <typename T>
inline T rmsnorm_group(T* yr, const T* xr, const T* scale, int C, double eps) {
  const T sq = lane_dot(xr, xr, C);  // 16-lane sum of squares (ops/fast_math.h): vectorised, fixed order
  const T r = T(1) / std::sqrt(sq / T(C) + T(eps));
  if (scale != nullptr)
    for (int c = 0; c < C; ++c) yr[c] = (xr[c] * r) * scale[c];
  else
    for (int c = 0; c < C; ++c) yr[c] = xr[c] * r;
  return r;
}

// G consecutive groups of C values of one token (out may alias x), r of group g to rstd[g] unless
// rstd is null. Float: the same operations at the CPU's vector width, the groups' reductions
// overlapping (simd::rmsnorm_rows; this file is built for baseline x86-64 unless FCA_NATIVE).
template <typename T>
inline void rmsnorm_groups(T* out, const T* x, const T* scale, int G, int C, double eps, T* rstd) {
  if constexpr (std::is_same_v<T, float>) {
    simd::rmsnorm_rows(out, x, C, scale, G, C, float(eps), rstd);
  } else {
    for (int g = 0; g < G; ++g) {
      const T r = rmsnorm_group(out + int64_t(g) * C, x + int64_t(g) * C, scale, C, eps);
      if (rstd != nullptr) rstd[g] = r;
    }
  }
}

// The rotation of one token's H heads (row x) at position t, by `direction` (1 forward, -1 the
// inverse).
template <typename T>
inline void rotate_token(T* x, const T* cos_table, const T* sin_table, int t, int H, int dh, int rot, T direction) {
  const int half = rot / 2;
  const T* c = cos_table + int64_t(t) * half;
  const T* s = sin_table + int64_t(t) * half;
  for (int h = 0; h < H; ++h) {
    T* v = x + int64_t(h) * dh;
    for (int m = 0; m < half; ++m) {
      const T a = v[m], b = v[m + half], sn = direction * s[m];
      v[m] = a * c[m] - b * sn;
      v[m + half] = b * c[m] + a * sn;
    }
  }
}

}  // namespace

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* scale, int64_t N, int G, int C, int64_t stride, double eps) {
  const PhaseScope phase_scope(Phase::elementwise);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    rmsnorm_groups(out + n * stride, x + n * stride, scale, G, C, eps, rstd != nullptr ? rstd + n * G : nullptr);
}

template <typename T>
void rmsnorm_rope_forward(T* x, T* rstd, const T* scale, const T* cos_table, const T* sin_table, int B, int Tn, int H,
                          int dh, int rot, int64_t stride, double eps) {
  const PhaseScope phase_scope(Phase::elementwise);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < int64_t(B) * Tn; ++n) {
    T* row = x + n * stride;
    rmsnorm_groups(row, row, scale, H, dh, eps, rstd != nullptr ? rstd + n * H : nullptr);
    rotate_token(row, cos_table, sin_table, int(n % Tn), H, dh, rot, T(1));
  }
}

template <typename T>
void rmsnorm_backward(T* dx, T* dscale, const T* dy, const T* x, const T* rstd, const T* scale, int64_t N, int G, int C,
                      int64_t stride) {
  const PhaseScope phase_scope(Phase::elementwise);
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < N * G; ++row) {
    const int64_t off = (row / G) * stride + (row % G) * C;
    const T* xr = x + off;
    const T* dyr = dy + off;
    const T r = rstd[row];
    T dot = 0;  // sum of (s dy) * xhat
    for (int c = 0; c < C; ++c) dot += (scale ? scale[c] : T(1)) * dyr[c] * xr[c] * r;
    const T mean_dot = dot / T(C);
    T* dxr = dx + off;
    for (int c = 0; c < C; ++c) dxr[c] += r * ((scale ? scale[c] : T(1)) * dyr[c] - xr[c] * r * mean_dot);
  }
  if (dscale == nullptr) return;
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; ++c) {
    T s = 0;
    for (int64_t row = 0; row < N * G; ++row) {
      const int64_t off = (row / G) * stride + (row % G) * C;
      s += dy[off + c] * x[off + c] * rstd[row];
    }
    dscale[c] += s;
  }
}

// Float runs the SIMD kernels (one_plus_erf_approx, within a few ulp of libm's erf) in chunks of
// a fixed size, so the split over threads never changes a value; double keeps std::erf and
// std::exp (the finite-difference checks).
constexpr int64_t kGeluChunk = 4096;

template <typename T>
void gelu_erf_forward(T* out, const T* inp, int64_t n) {
  const PhaseScope phase_scope(Phase::elementwise);
  if constexpr (std::is_same_v<T, float>) {
    const int64_t chunks = (n + kGeluChunk - 1) / kGeluChunk;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c)
      simd::gelu_erf_forward(out + c * kGeluChunk, inp + c * kGeluChunk, std::min(kGeluChunk, n - c * kGeluChunk));
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = T(0.5) * inp[i] * (T(1) + std::erf(inp[i] * T(0.70710678118654752)));
  }
}

template <typename T>
void gelu_erf_backward(T* dinp, const T* dout, const T* inp, int64_t n) {
  const PhaseScope phase_scope(Phase::elementwise);
  if constexpr (std::is_same_v<T, float>) {
    const int64_t chunks = (n + kGeluChunk - 1) / kGeluChunk;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c)
      simd::gelu_erf_backward(dinp + c * kGeluChunk, dout + c * kGeluChunk, inp + c * kGeluChunk,
                              std::min(kGeluChunk, n - c * kGeluChunk));
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const T x = inp[i];
      const T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752)));
      const T pdf = T(0.39894228040143268) * std::exp(T(-0.5) * x * x);
      dinp[i] = dout[i] * (cdf + x * pdf);
    }
  }
}

namespace {
// Round a float to the nearest IEEE half-precision value (ties to even), returned as float.
float round_to_half(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint32_t sign = bits & 0x80000000u;
  const float a = std::fabs(f);
  if (a >= 65520.0f) return sign ? -INFINITY : INFINITY;
  if (a < 6.103515625e-05f) {  // subnormal halves: multiples of 2^-24
    const float q = std::nearbyint(a * 16777216.0f) / 16777216.0f;
    return sign ? -q : q;
  }
  // Normal: keep 10 mantissa bits, round half to even on the 13 dropped bits.
  uint32_t m = bits & 0x7FFFFFFFu;
  const uint32_t dropped = m & 0x1FFFu, keep_lsb = (m >> 13) & 1u;
  m &= ~0x1FFFu;
  if (dropped > 0x1000u || (dropped == 0x1000u && keep_lsb)) m += 0x2000u;
  const uint32_t out_bits = sign | m;
  float r;
  std::memcpy(&r, &out_bits, 4);
  return r;
}
}  // namespace

template <typename T>
void rope_tables(T* cos_table, T* sin_table, int positions, int rot, double base) {
  const int half = rot / 2;
  for (int m = 0; m < half; ++m) {
    const float exponent = float(2 * m) / float(rot);
    const float w = 1.0f / std::pow(float(base), exponent);
    for (int t = 0; t < positions; ++t) {
      const float theta = float(t) * w;
      cos_table[int64_t(t) * half + m] = T(round_to_half(std::cos(theta)));
      sin_table[int64_t(t) * half + m] = T(round_to_half(std::sin(theta)));
    }
  }
}

template <typename T>
void rope_backward(T* dx, const T* cos_table, const T* sin_table, int B, int Tn, int H, int dh, int rot,
                   int64_t stride) {
  const PhaseScope phase_scope(Phase::elementwise);
  // The transpose of a rotation is the inverse.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < int64_t(B) * Tn; ++n)
    rotate_token(dx + n * stride, cos_table, sin_table, int(n % Tn), H, dh, rot, T(-1));
}

#define FCA_INSTANTIATE(T)                                                                                        \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int64_t, int, int, int64_t, double);              \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int, int, int64_t); \
  template void gelu_erf_forward<T>(T*, const T*, int64_t);                                                       \
  template void gelu_erf_backward<T>(T*, const T*, const T*, int64_t);                                            \
  template void rmsnorm_rope_forward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int, int, int64_t, double); \
  template void rope_backward<T>(T*, const T*, const T*, int, int, int, int, int, int64_t);                       \
  template void rope_tables<T>(T*, T*, int, int, double);
FCA_INSTANTIATE(float)
FCA_INSTANTIATE(double)
#undef FCA_INSTANTIATE

}  // namespace fca
