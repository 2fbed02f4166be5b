// exp and tanh for float in plain arithmetic, and the lane-blocked reductions used by softmax rows
// and LayerNorm: the scalar definitions. For float, the reductions are overloaded by the Highway
// kernels of ops/simd.h, which do the same operations in the same order on every SIMD target
// (call lane_sum<float> to get the scalar template itself, as the tests do).
//
// exp_approx: Cephes-style range reduction x = n ln2 + r (ln2 split into a hi/lo pair) and a
// degree-6 polynomial for e^r on |r| <= ln2/2; measured max relative error 2.4e-7 (about 2 ulp) on
// [-87, 88] (tests/fast_math_test.cpp). Inputs are clamped to [-87.3, 88.3]: e^-87.3 ~ 1.2e-38
// stands in for smaller values (harmless in softmax, where they are negligible against the max).
// The double versions forward to the C library: double is only used for gradient checks.
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "ops/fast_math_constants.h"
#include "ops/simd.h"

namespace fca {

inline float exp_approx(float x) {
  x = std::min(std::max(x, -87.3f), 88.3f);
  // Round x / ln2 to the nearest integer by the 1.5 * 2^23 trick (exact in round-to-nearest mode).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return y * scale;
}

// tanh(x) = 1 - 2 / (e^{2x} + 1): absolute error below 3e-7 everywhere (relative error grows near 0,
// where the absolute error is what GELU needs). x is clamped to [-kTanhSaturation, kTanhSaturation]
// first, which changes no result: beyond 10, 2 / (e^20 + 1) = 4.1e-9 is under half an ulp below 1
// (2^-25 = 3.0e-8), so 1 - it rounds to 1, and below -10, 1 + e^-20 rounds to 1, giving -1; the
// same two values the unclamped formula gives there (tests/fast_math_test.cpp checks it). Without
// it, |x| beyond 44 makes the quotient (or the exponential) subnormal, and on x86 each subnormal
// result costs a microcode assist: GELU over the fc layer of a model with weights N(0, 1) ran 3x
// slower (fca_kernels_bench BM_GeluForward/16 against /1).
// kTanhSaturation = 10 (ops/fast_math_constants.h).
inline float tanh_approx_unclamped(float x) { return 1.0f - 2.0f / (exp_approx(2.0f * x) + 1.0f); }
inline float tanh_approx(float x) {
  return tanh_approx_unclamped(std::min(std::max(x, -kTanhSaturation), kTanhSaturation));
}

// 1 + erf(z), the factor of the exact (erf) GELU, 0.5 x (1 + erf(x / sqrt 2)), in float, from
// c = erfc(a), a = |z| clamped to 9 (erfc(9) is below float's smallest normal):
//   c = exp_approx(-a^2) Q(1 / (1 + a/2)), and 1 + erf(z) = c for z < 0, 2 - c for z >= 0.
// One formula for every z (no branch for small |z|: the SIMD kernel would compute both and
// select). The polynomial comes from scripts/fit_erf.py (relative error 6.4e-8 with its float
// coefficients); the float evaluation stays within a few ulp of 1 + erf, relative also for
// negative z, where 1 + erf is small (tests/simd_test.cpp).
// Its coefficients are kErfc (ops/fast_math_constants.h).

inline float one_plus_erf_approx(float z) {
  const float a = z < 0.0f ? -z : z;
  const float b = a < 9.0f ? a : 9.0f;
  const float t = 1.0f / (1.0f + 0.5f * b);
  float q = kErfc[9];
  for (int k = 8; k >= 0; --k) q = q * t + kErfc[k];
  const float c = exp_approx(-(b * b)) * q;
  return z < 0.0f ? c : 2.0f - c;
}

template <typename T>
inline T fast_exp(T x) {
  if constexpr (std::is_same_v<T, float>) return exp_approx(x);
  else return std::exp(x);
}

template <typename T>
inline T fast_tanh(T x) {
  if constexpr (std::is_same_v<T, float>) return tanh_approx(x);
  else return std::tanh(x);
}

// Sum and max of x[0..n) over 16 interleaved lanes combined in lane order: a fixed summation order
// the compiler can vectorise, so results are identical run to run.
template <typename T>
inline T lane_sum(const T* x, int n) {
  T acc[16] = {};
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] += x[i + k];
  for (; i < n; ++i) acc[i & 15] += x[i];
  T s = 0;
  for (int k = 0; k < 16; ++k) s += acc[k];
  return s;
}

template <typename T>
inline T lane_dot(const T* x, const T* y, int n) {
  T acc[16] = {};
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] += x[i + k] * y[i + k];
  for (; i < n; ++i) acc[i & 15] += x[i] * y[i];
  T s = 0;
  for (int k = 0; k < 16; ++k) s += acc[k];
  return s;
}

template <typename T>
inline T lane_max(const T* x, int n) {
  T acc[16];
  for (int k = 0; k < 16; ++k) acc[k] = x[0];
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] = std::max(acc[k], x[i + k]);
  for (; i < n; ++i) acc[i & 15] = std::max(acc[i & 15], x[i]);
  T m = acc[0];
  for (int k = 1; k < 16; ++k) m = std::max(m, acc[k]);
  return m;
}

// Sum of (x[i] - mean)^2 over the same 16 lanes (LayerNorm's two-pass variance).
template <typename T>
inline T lane_squared_deviation_sum(const T* x, int n, T mean) {
  T acc[16] = {};
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] += (x[i + k] - mean) * (x[i + k] - mean);
  for (; i < n; ++i) acc[i & 15] += (x[i] - mean) * (x[i] - mean);
  T s = 0;
  for (int k = 0; k < 16; ++k) s += acc[k];
  return s;
}

// 16-lane sum of ((a[i] * b[i]) * (x[i] - mean)) * scale: LayerNorm backward's sum of dxhat * xhat.
template <typename T>
inline T lane_centered_product_sum(const T* a, const T* b, const T* x, int n, T mean, T scale) {
  T acc[16] = {};
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] += ((a[i + k] * b[i + k]) * (x[i + k] - mean)) * scale;
  for (; i < n; ++i) acc[i & 15] += ((a[i] * b[i]) * (x[i] - mean)) * scale;
  T s = 0;
  for (int k = 0; k < 16; ++k) s += acc[k];
  return s;
}

// out[i] = exp(x[i] - shift) for i < n (out may alias x); returns lane_sum(out, n).
template <typename T>
inline T exp_shifted_sum(T* out, const T* x, int n, T shift) {
  for (int i = 0; i < n; ++i) out[i] = fast_exp(x[i] - shift);
  return lane_sum(out, n);
}

// The small matrix product of simd::tile_matmul (see ops/simd.h for the operands): each output a
// chain of fused multiply-adds over p in order from zero, times alpha, added to the addend if any.
template <typename T>
void tile_matmul_reference(T* c, int64_t ldc, const T* a, int64_t a_row, int64_t a_col, const T* b, int64_t ldb, int m,
                           int n, int k, T alpha, const T* addend, int64_t ld_addend) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      T acc = 0;
      for (int p = 0; p < k; ++p) acc = std::fma(a[i * a_row + p * a_col], b[p * ldb + j], acc);
      c[i * ldc + j] = addend != nullptr ? addend[i * ld_addend + j] + alpha * acc : alpha * acc;
    }
}
template <typename T>
void tile_matmul(T* c, int64_t ldc, const T* a, int64_t a_row, int64_t a_col, const T* b, int64_t ldb, int m, int n,
                 int k, T alpha, const T* addend, int64_t ld_addend) {
  tile_matmul_reference(c, ldc, a, a_row, a_col, b, ldb, m, n, k, alpha, addend, ld_addend);
}

// Float: the dispatched SIMD kernels (bitwise equal to the templates above).
inline float lane_sum(const float* x, int n) { return simd::lane_sum(x, n); }
inline float lane_dot(const float* x, const float* y, int n) { return simd::lane_dot(x, y, n); }
inline float lane_max(const float* x, int n) { return simd::lane_max(x, n); }
inline float lane_squared_deviation_sum(const float* x, int n, float mean) {
  return simd::lane_squared_deviation_sum(x, n, mean);
}

inline float exp_shifted_sum(float* out, const float* x, int n, float shift) {
  if (out != x) std::copy(x, x + n, out);
  return simd::exp_shifted_sum(out, n, shift);
}

inline float lane_centered_product_sum(const float* a, const float* b, const float* x, int n, float mean, float scale) {
  return simd::lane_centered_product_sum(a, b, x, n, mean, scale);
}

inline void tile_matmul(float* c, int64_t ldc, const float* a, int64_t a_row, int64_t a_col, const float* b,
                        int64_t ldb, int m, int n, int k, float alpha, const float* addend, int64_t ld_addend) {
  simd::tile_matmul(c, ldc, a, a_row, a_col, b, ldb, m, n, k, alpha, addend, ld_addend);
}

}  // namespace fca
