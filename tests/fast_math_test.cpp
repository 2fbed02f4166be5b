// The vectorised exp and tanh against the C library over their whole useful range.
#include <gtest/gtest.h>

#include <cmath>

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

TEST(FastMath, LaneReductionsAreExactOnIntegers) {
  std::vector<float> x(37);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i);
  EXPECT_EQ(lane_sum(x.data(), 37), 666.0f);
  EXPECT_EQ(lane_max(x.data(), 37), 36.0f);
  EXPECT_EQ(lane_dot(x.data(), x.data(), 3), 5.0f);
}

}  // namespace
}  // namespace fca
