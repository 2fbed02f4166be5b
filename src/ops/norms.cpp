#include "ops/norms.h"

#include <cmath>
#include <cstring>

namespace fca {

void rmsnorm_forward(float* out, const float* x, const float* scale, int64_t N, int C, int64_t stride, double eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * stride;
    float* yr = out + n * stride;
    float sq = 0;
    for (int c = 0; c < C; ++c) sq += xr[c] * xr[c];
    const float r = 1.0f / std::sqrt(sq / float(C) + float(eps));
    if (scale != nullptr)
      for (int c = 0; c < C; ++c) yr[c] = (xr[c] * r) * scale[c];
    else
      for (int c = 0; c < C; ++c) yr[c] = xr[c] * r;
  }
}

void gelu_erf_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = 0.5f * inp[i] * (1.0f + std::erf(inp[i] * 0.70710678118654752f));
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

void rope_tables(float* cos_table, float* sin_table, int positions, int rot, double base) {
  const int half = rot / 2;
  for (int m = 0; m < half; ++m) {
    const float exponent = float(2 * m) / float(rot);
    const float w = 1.0f / std::pow(float(base), exponent);
    for (int t = 0; t < positions; ++t) {
      const float theta = float(t) * w;
      cos_table[int64_t(t) * half + m] = round_to_half(std::cos(theta));
      sin_table[int64_t(t) * half + m] = round_to_half(std::sin(theta));
    }
  }
}

void rope_forward(float* x, const float* cos_table, const float* sin_table, int B, int T, int H, int dh, int rot) {
  const int half = rot / 2;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < int64_t(B) * T; ++n) {
    const int t = int(n % T);
    const float* c = cos_table + int64_t(t) * half;
    const float* s = sin_table + int64_t(t) * half;
    for (int h = 0; h < H; ++h) {
      float* v = x + n * int64_t(H) * dh + int64_t(h) * dh;
      for (int m = 0; m < half; ++m) {
        const float a = v[m], b = v[m + half];
        v[m] = a * c[m] - b * s[m];
        v[m + half] = b * c[m] + a * s[m];
      }
    }
  }
}

}  // namespace fca
