#include "core/half.h"

#include <cstring>

namespace fca {
namespace {

uint32_t bits_of(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}

float float_of(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// q + 1 when the dropped low bits `rest` (of a field whose half is `half`) round q up: above half,
// or exactly half with q odd (ties to even).
uint32_t round_even(uint32_t q, uint32_t rest, uint32_t half) { return q + ((rest > half || (rest == half && (q & 1))) ? 1 : 0); }

}  // namespace

float bf16_to_f32(uint16_t bits) { return float_of(uint32_t(bits) << 16); }

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1F;
  uint32_t mantissa = h & 0x3FF;
  if (exponent == 0) {
    if (mantissa == 0) return float_of(sign);
    exponent = 127 - 15 + 1;  // subnormal: normalise
    while ((mantissa & 0x400) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    return float_of(sign | (exponent << 23) | ((mantissa & 0x3FF) << 13));
  }
  if (exponent == 0x1F) return float_of(sign | 0x7F800000 | (mantissa << 13));
  return float_of(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

uint16_t f32_to_bf16(float value) {
  const uint32_t x = bits_of(value);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return uint16_t((x >> 16) | 0x40);  // NaN: stays a (quiet) NaN
  return uint16_t(round_even(x >> 16, x & 0xFFFF, 0x8000));            // a carry into the exponent is right
}

uint16_t f32_to_f16(float value) {
  const uint32_t x = bits_of(value);
  const uint32_t sign = (x >> 16) & 0x8000, magnitude = x & 0x7FFFFFFF;
  if (magnitude > 0x7F800000) return uint16_t(sign | 0x7E00 | ((magnitude >> 13) & 0x3FF));  // NaN
  if (magnitude >= 0x47800000) return uint16_t(sign | 0x7C00);  // >= 65536 (or inf): inf
  if (magnitude >= 0x38800000) {                                 // normal in F16 (>= 2^-14)
    // Rebias the exponent (127 -> 15) and drop 13 mantissa bits; 65520 and above carry into inf.
    const uint32_t q = (magnitude >> 13) - ((127u - 15u) << 10);
    return uint16_t(sign | round_even(q, magnitude & 0x1FFF, 0x1000));
  }
  if (magnitude < 0x33000000) return uint16_t(sign);  // below 2^-25: rounds to zero (2^-25 ties to 0)
  // Subnormal in F16: units of 2^-24. value = m * 2^(e - 150), so m >> (126 - e) units, 14..24 bits
  // dropped; rounding up from 0x3FF gives 0x400, the smallest normal, which is right.
  const uint32_t e = magnitude >> 23, m = (magnitude & 0x7FFFFF) | 0x800000, shift = 126 - e;
  return uint16_t(sign | round_even(m >> shift, m & ((1u << shift) - 1), 1u << (shift - 1)));
}

}  // namespace fca
