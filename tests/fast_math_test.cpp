// The vectorised exp and tanh against the C library over their whole useful range.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ops/fast_math.h"

namespace fca {
namespace {

TEST(FastMath, ExpRelativeErrorWithinThreeUlp) {
  double worst = 0;
  for (double x = -87.0; x <= 88.0; x += 0.000731) {
    const double exact = std::exp(double(float(x)));
    worst = std::max(worst, std::abs(double(exp_approx(float(x))) - exact) / exact);
  }
  EXPECT_LT(worst, 3.6e-7);  // 3 ulp of float (2^-23 = 1.19e-7)
  EXPECT_EQ(exp_approx(0.0f), 1.0f);
  EXPECT_GT(exp_approx(-1000.0f), 0.0f);  // clamped, never NaN
  EXPECT_TRUE(std::isfinite(exp_approx(1000.0f)));
}

TEST(FastMath, TanhAbsoluteError) {
  double worst = 0;
  for (double x = -20.0; x <= 20.0; x += 0.000377) worst = std::max(worst, std::abs(double(tanh_approx(float(x))) - std::tanh(double(float(x)))));
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(tanh_approx(100.0f), 1.0f);
  EXPECT_EQ(tanh_approx(-100.0f), -1.0f);
}

TEST(FastMath, TanhSaturationClampChangesNoValue) {
  // From 9 up (and the negatives) by steps of 1/512 to 64 (past 44, where the unclamped formula's
  // values turn subnormal), then by factors of 1.01 to the largest float: tanh_approx (clamped at
  // 10) is bitwise the unclamped formula, +-1 beyond 10.
  std::vector<float> xs;
  for (double x = 9.0; x < 64.0; x += 1.0 / 512) xs.push_back(float(x));
  for (float x = 64.0f; std::isfinite(x); x *= 1.01f) xs.push_back(x);
  xs.push_back(std::numeric_limits<float>::max());
  xs.push_back(std::numeric_limits<float>::infinity());
  for (const float x : xs)
    for (const float v : {x, -x}) {
      ASSERT_EQ(std::bit_cast<uint32_t>(tanh_approx(v)), std::bit_cast<uint32_t>(tanh_approx_unclamped(v))) << v;
      if (std::abs(v) >= kTanhSaturation) {
        ASSERT_EQ(std::abs(tanh_approx(v)), 1.0f) << v;
      }
    }
}

TEST(FastMath, LaneReductionsAreExactOnIntegers) {
  std::vector<float> x(37);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i);
  EXPECT_EQ(lane_sum(x.data(), 37), 666.0f);
  EXPECT_EQ(lane_max(x.data(), 37), 36.0f);
  EXPECT_EQ(lane_dot(x.data(), x.data(), 3), 5.0f);
}

}  // namespace
}  // namespace fca
