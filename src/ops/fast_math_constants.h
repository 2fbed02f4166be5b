// The constants that the scalar definitions of ops/fast_math.h and their SIMD kernels
// (ops/simd.cpp) share, so that both compute the same operations with the same numbers; why each
// has its value is said beside its scalar definition in fast_math.h.
#pragma once

namespace fca {

// tanh_approx clamps x to [-kTanhSaturation, kTanhSaturation] (no result changes, no subnormals).
inline constexpr float kTanhSaturation = 10.0f;

// one_plus_erf_approx's polynomial Q(t) = sum_k kErfc[k] t^k (scripts/fit_erf.py).
inline constexpr float kErfc[] = {-5.8793625612e-06f, 2.8221297264e-01f, 2.8122648597e-01f, 2.4888369441e-01f,
                                  1.8488083780e-01f,  8.3187390119e-03f, 2.3422504961e-01f, -4.5316937566e-01f,
                                  2.6969495416e-01f,  -5.6267492473e-02f};

}  // namespace fca
