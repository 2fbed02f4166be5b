// The audit's statistics against independent computations: the bootstrap on a fixed seed, exact
// sign-flip p-values enumerated by hand, Holm on a textbook example, and the functional ANOVA on
// synthetic tensors built from known effects whose shares are known exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "audit/statistics.h"
#include "core/rng.h"
#include "core/threads.h"

namespace fca {
namespace {

TEST(AuditStatistics, BootstrapMatchesDirectResampling) {
  std::vector<double> x;
  Rng data(1);
  for (int i = 0; i < 50; ++i) x.push_back(data.normal() + 0.3);
  set_threads(2);
  const Interval ci = bootstrap_mean_ci(x, 2000, 77);
  // Direct: resamples 256 k .. 256 k + 255 draw from Rng(derive_seed(77, k)); sort the means;
  // interpolate.
  std::vector<double> means;
  Rng rng(0);
  for (int b = 0; b < 2000; ++b) {
    if (b % 256 == 0) rng = Rng(derive_seed(77, uint64_t(b / 256)));
    double s = 0;
    for (size_t k = 0; k < x.size(); ++k) s += x[rng.below(x.size())];
    means.push_back(s / double(x.size()));
  }
  std::sort(means.begin(), means.end());
  auto q = [&](double p) {
    const double pos = p * double(means.size() - 1);
    const size_t lo = size_t(pos);
    return means[lo] + (pos - double(lo)) * (means[lo + 1] - means[lo]);
  };
  EXPECT_DOUBLE_EQ(ci.low, q(0.025));
  EXPECT_DOUBLE_EQ(ci.high, q(0.975));
  // The same interval on one thread.
  set_threads(1);
  const Interval one = bootstrap_mean_ci(x, 2000, 77);
  set_threads(2);
  EXPECT_EQ(one.low, ci.low);
  EXPECT_EQ(one.high, ci.high);
  // And it is a sensible interval: it contains the sample mean, width about 2 * 1.96 * sd / sqrt(n).
  EXPECT_LT(ci.low, mean(x));
  EXPECT_GT(ci.high, mean(x));
  EXPECT_NEAR(ci.high - ci.low, 2 * 1.96 * sample_sd(x) / std::sqrt(50.0), 0.1);
}

TEST(AuditStatistics, RetentionIntervalUsesPairedResamples) {
  const std::vector<double> num{0.1, 0.2, 0.1, 0.2}, den{1.0, 2.0, 1.0, 2.0};  // ratio is 0.1 in every resample
  const Interval ci = bootstrap_retention_ci(num, den, 500, 3);
  EXPECT_NEAR(ci.low, 0.9, 1e-12);
  EXPECT_NEAR(ci.high, 0.9, 1e-12);
}

TEST(AuditStatistics, SignFlipByHand) {
  // {1, 2, 3}: sums over the 8 sign patterns are +-6, +-4, +-2, 0, 0; |sum| >= 6 for 2 of 8.
  EXPECT_DOUBLE_EQ(sign_flip_p_value({1, 2, 3}), 0.25);
  // {1, -1}: observed mean 0, every pattern counts.
  EXPECT_DOUBLE_EQ(sign_flip_p_value({1, -1}), 1.0);
  // All positive, n = 5: only the all-plus and all-minus patterns reach |mean|: 2/32.
  EXPECT_DOUBLE_EQ(sign_flip_p_value({1, 1, 1, 1, 1}), 2.0 / 32);
  // {2, 1, 1}: |sum| >= 4 for (+,+,+), (-,-,-) only: 2/8.
  EXPECT_DOUBLE_EQ(sign_flip_p_value({2, 1, 1}), 0.25);
}

TEST(AuditStatistics, HolmTextbookExample) {
  // p = (0.01, 0.04, 0.03, 0.005): sorted 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06,
  // 0.04*1 = 0.04 -> raised to the running maximum 0.06.
  const std::vector<double> adj = holm_adjust({0.01, 0.04, 0.03, 0.005});
  EXPECT_NEAR(adj[0], 0.03, 1e-15);
  EXPECT_NEAR(adj[1], 0.06, 1e-15);
  EXPECT_NEAR(adj[2], 0.06, 1e-15);
  EXPECT_NEAR(adj[3], 0.02, 1e-15);
  EXPECT_DOUBLE_EQ(holm_adjust({0.5, 0.9})[1], 1.0);  // running maximum of min(1, 2 * 0.5) = 1
}

TEST(AuditStatistics, AnovaRecoversKnownShares) {
  // A[c, i, t] = a_c + b_i + d_t + e_{c,i} with every effect summing to zero over each index, so
  // the sums of squares are known exactly: SS_c = I T sum a^2, SS_i = C T sum b^2,
  // SS_t = C I sum d^2, SS_ci = T sum e^2, and the other terms vanish.
  const int C = 2, I = 4, T = 3;
  const double a[C] = {1.0, -1.0}, b[I] = {0.5, -0.5, 0.25, -0.25}, d[T] = {0.2, -0.1, -0.1};
  const double e[C][I] = {{0.3, -0.3, 0.1, -0.1}, {-0.3, 0.3, -0.1, 0.1}};
  CoefficientTensor A(I, CoefficientShape{C, T, 1, 1});
  for (int c = 0; c < C; ++c)
    for (int i = 0; i < I; ++i)
      for (int t = 0; t < T; ++t) A.at(i, c, t) = float(2.0 + a[c] + b[i] + d[t] + e[c][i]);
  double ss_c = 0, ss_i = 0, ss_t = 0, ss_ci = 0;
  for (double v : a) ss_c += I * T * v * v;
  for (double v : b) ss_i += C * T * v * v;
  for (double v : d) ss_t += C * I * v * v;
  for (auto& row : e)
    for (double v : row) ss_ci += T * v * v;
  const double total = ss_c + ss_i + ss_t + ss_ci;
  const VarianceDecomposition v = functional_anova(A.view());
  const double tol = 1e-6;  // inputs are floats: relative rounding ~1e-7
  EXPECT_NEAR(v.coordinate, ss_c / total, tol);
  EXPECT_NEAR(v.input, ss_i / total, tol);
  EXPECT_NEAR(v.token, ss_t / total, tol);
  EXPECT_NEAR(v.coordinate_input, ss_ci / total, tol);
  EXPECT_NEAR(v.coordinate_token, 0.0, tol);
  EXPECT_NEAR(v.input_token, 0.0, tol);
  EXPECT_NEAR(v.residual, 0.0, tol);
  EXPECT_NEAR(v.total_variance, total / (C * I * T), 1e-6);
}

TEST(AuditStatistics, AnovaIgnoresInvalidCoordinates) {
  // Two valid coordinates with a known main effect; the invalid one holds garbage.
  CoefficientTensor A(2, CoefficientShape{1, 2, 1, 3});
  A.set_valid(0, 0, 2, false);
  for (int i = 0; i < 2; ++i)
    for (int t = 0; t < 2; ++t) {
      A.at(i, 0, t, 0, 0) = 1.0f;
      A.at(i, 0, t, 0, 1) = -1.0f;
      A.at(i, 0, t, 0, 2) = 1000.0f * float(i + t);
    }
  const VarianceDecomposition v = functional_anova(A.view());
  EXPECT_EQ(v.coordinates, 2);
  EXPECT_NEAR(v.coordinate, 1.0, 1e-12);
  EXPECT_NEAR(v.total_variance, 1.0, 1e-12);
}

}  // namespace
}  // namespace fca
