// The Highway kernels of ops/simd.h on every SIMD target compiled in and supported here: each
// target is forced in turn and its results must be bitwise equal to the scalar definitions
// (ops/fast_math.h templates and the GELU formulas), for lengths that exercise whole 16-lane
// blocks, whole vectors and every tail.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/elementwise.h"
#include "ops/fast_math.h"
#include "ops/layernorm.h"
#include "ops/simd.h"

namespace fca {
namespace {

std::vector<float> random_values(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

constexpr float kSqrt2OverPi = float(0.7978845608028654);
float gelu_scalar(float x) { return 0.5f * x * (1.0f + tanh_approx(kSqrt2OverPi * (x + 0.044715f * x * x * x))); }
float gelu_grad_scalar(float dy, float x) {
  const float th = tanh_approx(kSqrt2OverPi * (x + 0.044715f * x * x * x));
  const float dtanh_arg = kSqrt2OverPi * (1.0f + float(3 * 0.044715) * x * x);
  return dy * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * dtanh_arg);
}

class SimdTargets : public ::testing::Test {
 protected:
  void TearDown() override { simd::force_target(0); }
};

TEST_F(SimdTargets, EveryTargetIsBitwiseTheScalarDefinition) {
  const auto targets = simd::available_targets();
  ASSERT_FALSE(targets.empty());
  std::string names;
  for (const auto& t : targets) names += t.name + " ";
  std::printf("SIMD targets compiled in and supported here: %s(best: %s)\n", names.c_str(), simd::dispatched_target().c_str());
  const std::vector<int> lengths = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 255, 256, 257, 1000};
  for (const auto& target : targets) {
    simd::force_target(target.bit);
    ASSERT_EQ(simd::dispatched_target(), target.name);
    SCOPED_TRACE(target.name);
    for (int n : lengths) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const auto x = random_values(size_t(n), 3.0f, uint32_t(n));
      const auto y = random_values(size_t(n), 2.0f, uint32_t(n) + 7);
      EXPECT_EQ(bits(simd::lane_sum(x.data(), n)), bits(lane_sum<float>(x.data(), n)));
      EXPECT_EQ(bits(simd::lane_dot(x.data(), y.data(), n)), bits(lane_dot<float>(x.data(), y.data(), n)));
      EXPECT_EQ(bits(simd::lane_max(x.data(), n)), bits(lane_max<float>(x.data(), n)));
      EXPECT_EQ(bits(simd::lane_squared_deviation_sum(x.data(), n, 0.25f)),
                bits(lane_squared_deviation_sum<float>(x.data(), n, 0.25f)));
      EXPECT_EQ(bits(simd::lane_centered_product_sum(x.data(), y.data(), x.data(), n, 0.25f, 1.7f)),
                bits(lane_centered_product_sum<float>(x.data(), y.data(), x.data(), n, 0.25f, 1.7f)));
      // LayerNorm and RMSNorm rows against their scalar definitions (ops/layernorm.cpp's and
      // ops/norms.cpp's double paths, in float), row by row: 11 rows (more than one block of
      // kMaxNormRows), rows ld = n + 3 apart, the output in place for RMSNorm.
      {
        const int rows = 11;
        const int64_t ld = n + 3;
        const auto xs = random_values(size_t(rows * ld), 3.0f, uint32_t(n) + 29);
        const auto w = random_values(size_t(n), 1.0f, uint32_t(n) + 31), b = random_values(size_t(n), 1.0f, uint32_t(n) + 37);
        std::vector<float> got(xs.size()), mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
        simd::layernorm_rows(got.data(), ld, xs.data(), ld, w.data(), b.data(), rows, n, float(kLayerNormEps), mean.data(), rstd.data());
        for (const bool scaled : {false, true}) {
          std::vector<float> normed = xs, rms(static_cast<size_t>(rows));
          simd::rmsnorm_rows(normed.data(), normed.data(), ld, scaled ? w.data() : nullptr, rows, n, 1e-6f, rms.data());
          for (int r = 0; r < rows; ++r) {
            const float* xr = xs.data() + r * ld;
            const float want_r = 1.0f / std::sqrt(lane_dot<float>(xr, xr, n) / float(n) + 1e-6f);
            ASSERT_EQ(bits(rms[size_t(r)]), bits(want_r)) << "rmsnorm row " << r;
            for (int i = 0; i < n; ++i)
              ASSERT_EQ(bits(normed[size_t(r * ld + i)]), bits(scaled ? (xr[i] * want_r) * w[size_t(i)] : xr[i] * want_r))
                  << "rmsnorm row " << r << " at " << i;
          }
        }
        for (int r = 0; r < rows; ++r) {
          const float* xr = xs.data() + r * ld;
          const float m = lane_sum<float>(xr, n) / float(n);
          const float rs = 1.0f / std::sqrt(lane_squared_deviation_sum<float>(xr, n, m) / float(n) + float(kLayerNormEps));
          ASSERT_EQ(bits(mean[size_t(r)]), bits(m)) << "layernorm row " << r;
          ASSERT_EQ(bits(rstd[size_t(r)]), bits(rs)) << "layernorm row " << r;
          for (int i = 0; i < n; ++i)
            ASSERT_EQ(bits(got[size_t(r * ld + i)]), bits((xr[i] - m) * rs * w[size_t(i)] + b[size_t(i)]))
                << "layernorm row " << r << " at " << i;
        }
      }
      // exp over the clamped range and beyond it (softmax rows shifted by their max are <= 0).
      auto row = random_values(size_t(n), 100.0f, uint32_t(n) + 11);
      auto expected = row;
      for (auto& v : expected) v = exp_approx(v - 1.5f);
      const float sum = simd::exp_shifted_sum(row.data(), n, 1.5f);
      for (int i = 0; i < n; ++i) ASSERT_EQ(bits(row[size_t(i)]), bits(expected[size_t(i)])) << "exp at " << i;
      EXPECT_EQ(bits(sum), bits(lane_sum<float>(expected.data(), n)));
      // The fused softmax row against the separate scalar definitions, without and with statistics.
      {
        const auto scores = random_values(size_t(n), 8.0f, uint32_t(n) + 23);
        const auto prev = random_values(size_t(n), 4.0f, uint32_t(n) + 29);
        std::vector<float> want_p = scores;
        std::vector<float> want_logp(static_cast<size_t>(n));
        const float mx = lane_max<float>(want_p.data(), n);
        for (int i = 0; i < n; ++i) want_logp[size_t(i)] = want_p[size_t(i)] - mx;
        const float want_sum = exp_shifted_sum<float>(want_p.data(), want_p.data(), n, mx);
        for (auto& v : want_p) v = (1.0f / want_sum) * v;
        const float log_sum = std::log(want_sum);
        for (auto& v : want_logp) v -= log_sum;
        for (int with_prev = 0; with_prev < 2; ++with_prev) {
          std::vector<float> p = scores;
          std::vector<float> logp(static_cast<size_t>(n));
          const simd::SoftmaxRowStats st = simd::softmax_row(p.data(), n, logp.data(), with_prev ? prev.data() : nullptr);
          ASSERT_EQ(0, std::memcmp(p.data(), want_p.data(), sizeof(float) * size_t(n))) << "softmax p";
          ASSERT_EQ(0, std::memcmp(logp.data(), want_logp.data(), sizeof(float) * size_t(n))) << "softmax logp";
          EXPECT_EQ(bits(st.max), bits(mx));
          EXPECT_EQ(bits(st.sum), bits(want_sum));
          EXPECT_EQ(bits(st.log_sum), bits(log_sum));
          EXPECT_EQ(bits(st.neg_entropy), bits(lane_dot<float>(want_p.data(), want_logp.data(), n)));
          EXPECT_EQ(bits(st.cross), bits(with_prev ? lane_dot<float>(want_p.data(), prev.data(), n) : 0.0f));
        }
        std::vector<float> p = scores;
        const simd::SoftmaxRowStats st = simd::softmax_row(p.data(), n, nullptr, nullptr);
        ASSERT_EQ(0, std::memcmp(p.data(), want_p.data(), sizeof(float) * size_t(n))) << "softmax p without stats";
        EXPECT_EQ(bits(st.sum), bits(want_sum));
      }
      // Mixing, residual and AdamW, element by element.
      {
        std::vector<float> got(static_cast<size_t>(n)), want(static_cast<size_t>(n));
        simd::scale(got.data(), x.data(), 0.3f, n);
        for (int i = 0; i < n; ++i) want[size_t(i)] = 0.3f * x[size_t(i)];
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * size_t(n)));
        simd::axpy(got.data(), y.data(), -1.7f, n);
        for (int i = 0; i < n; ++i) want[size_t(i)] += -1.7f * y[size_t(i)];
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * size_t(n)));
        simd::residual_row(got.data(), x.data(), 0.8f, y.data(), n);
        for (int i = 0; i < n; ++i) want[size_t(i)] = x[size_t(i)] + 0.8f * y[size_t(i)];
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * size_t(n)));
        const simd::AdamWConstants k{0.9f, 0.95f, 0.999f, 3e-4f, 1.02f, 1e-8f, 0.75f};
        auto p = x, m = y, v = random_values(size_t(n), 1.0f, uint32_t(n) + 17);
        for (auto& e : v) e = e * e;
        auto p2 = p, m2 = m, v2 = v;
        const auto g = random_values(size_t(n), 0.5f, uint32_t(n) + 19);
        simd::adamw_update(p.data(), g.data(), m.data(), v.data(), n, k);
        for (size_t i = 0; i < size_t(n); ++i) {  // the scalar step, on a gradient clipped first
          const float gi = g[i] * k.grad_scale;
          m2[i] = k.b1 * m2[i] + (1.0f - k.b1) * gi;
          v2[i] = k.b2 * v2[i] + (1.0f - k.b2) * gi * gi;
          p2[i] = p2[i] * k.decay - k.step_size * m2[i] / (std::sqrt(v2[i]) * k.inv_sqrt_bias2 + k.eps);
        }
        ASSERT_EQ(0, std::memcmp(p.data(), p2.data(), sizeof(float) * size_t(n))) << "AdamW p";
        ASSERT_EQ(0, std::memcmp(m.data(), m2.data(), sizeof(float) * size_t(n))) << "AdamW m";
        ASSERT_EQ(0, std::memcmp(v.data(), v2.data(), sizeof(float) * size_t(n))) << "AdamW v";
      }
      // GELU forward and backward, element by element.
      const auto a = random_values(size_t(n), 6.0f, uint32_t(n) + 13);
      std::vector<float> out(static_cast<size_t>(n)), grad(static_cast<size_t>(n));
      simd::gelu_tanh_forward(out.data(), a.data(), n);
      simd::gelu_tanh_backward(grad.data(), y.data(), a.data(), n);
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(bits(out[size_t(i)]), bits(gelu_scalar(a[size_t(i)]))) << "GELU at " << i;
        ASSERT_EQ(bits(grad[size_t(i)]), bits(gelu_grad_scalar(y[size_t(i)], a[size_t(i)]))) << "GELU' at " << i;
      }
      // The erf GELU, forward and backward, over a range that crosses both signs and the clamp.
      const auto wide = random_values(size_t(n), 14.0f, uint32_t(n) + 31);
      simd::gelu_erf_forward(out.data(), wide.data(), n);
      simd::gelu_erf_backward(grad.data(), y.data(), wide.data(), n);
      for (int i = 0; i < n; ++i) {
        const float x = wide[size_t(i)], z = x * float(0.70710678118654752);
        const float cdf = 0.5f * one_plus_erf_approx(z);
        const float pdf = float(0.39894228040143268) * exp_approx(-0.5f * x * x);
        ASSERT_EQ(bits(out[size_t(i)]), bits(0.5f * x * one_plus_erf_approx(z))) << "erf GELU at " << i;
        ASSERT_EQ(bits(grad[size_t(i)]), bits(y[size_t(i)] * (cdf + x * pdf))) << "erf GELU' at " << i;
      }
    }
  }
}

// The erf GELU's 1 + erf(z) = erfc(-z) against libm in double: within a few float ulp of the value, relative,
// near 0, in the bulk and far into the negative tail where 1 + erf is tiny.
TEST(ErfApprox, OnePlusErfIsWithinAFewUlpOfLibm) {
  double worst = 0;
  float worst_z = 0;
  for (int i = -900000; i <= 900000; ++i) {
    const float z = float(i) * 1e-5f;  // [-9, 9]
    const double exact = std::erfc(-double(z));  // 1 + erf(z), without cancellation for z < 0
    if (exact < 1e-30) continue;  // below float's normal range the value is flushed anyway
    const double err = std::abs(double(one_plus_erf_approx(z)) - exact) / exact;
    if (err > worst) worst = err, worst_z = z;
  }
  std::printf("1 + erf: max relative error %.3g at z = %g\n", worst, double(worst_z));
  // exp_approx is within about 2 ulp and the erfc polynomial is exact to 6.4e-8, but a^2 rounds
  // (relative 6e-8), which exp(-a^2) multiplies by a^2 <= 81: about 5e-6 at the far tail, where
  // the GELU's value is below 1e-30 times x. Near the bulk (|z| < 3) the error is a few ulp.
  EXPECT_LT(worst, 1e-5);
  double bulk = 0;
  for (int i = -300000; i <= 300000; ++i) {
    const float z = float(i) * 1e-5f;
    const double exact = std::erfc(-double(z));  // 1 + erf(z), without cancellation for z < 0
    bulk = std::max(bulk, std::abs(double(one_plus_erf_approx(z)) - exact) / exact);
  }
  EXPECT_LT(bulk, 1e-6);
}

TEST_F(SimdTargets, TileMatmulIsOneFusedChainPerOutputOnEveryTarget) {
  // Shapes with whole register tiles, row tails (m % 8, m % 4), vector pairs, single vectors and
  // lane tails (n % 16, n % 8), in both layouts of A, with no addend, accumulating onto C, and onto a bias row.
  const int ld = 53;
  const auto a = random_values(size_t(ld) * ld, 2.0f, 41), b = random_values(size_t(ld) * ld, 2.0f, 42);
  const auto c0 = random_values(size_t(ld) * ld, 1.0f, 43);
  for (const auto& target : simd::available_targets()) {
    simd::force_target(target.bit);
    SCOPED_TRACE(target.name);
    const bool fma = target.name.rfind("AVX", 0) == 0;  // AVX2 and AVX-512 have fused multiply-add
    for (int m : {1, 3, 4, 8, 9, 13})
      for (int n : {1, 5, 8, 16, 17, 33, 47})
        for (int k : {1, 7, 40})
          for (bool transposed : {false, true})
            for (int addend : {0, 1, 2}) {  // none, C itself (accumulate), a bias row (ld_addend 0)
              const int64_t a_row = transposed ? 1 : ld, a_col = transposed ? ld : 1;
              std::vector<float> got = c0, want = c0;
              const float* bias = b.data() + 3;
              simd::tile_matmul(got.data(), ld, a.data(), a_row, a_col, b.data(), ld, m, n, k, 0.7f,
                                addend == 0 ? nullptr : addend == 1 ? got.data() : bias, addend == 1 ? ld : 0);
              tile_matmul_reference<float>(want.data(), ld, a.data(), a_row, a_col, b.data(), ld, m, n, k, 0.7f,
                                           addend == 0 ? nullptr : addend == 1 ? want.data() : bias,
                                           addend == 1 ? ld : 0);
              for (size_t i = 0; i < got.size(); ++i) {
                if (fma) {
                  ASSERT_EQ(bits(got[i]), bits(want[i])) << "m " << m << " n " << n << " k " << k << " at " << i;
                } else {
                  // Separate rounding of each product: k roundings of terms up to 4 in sums up to
                  // about 4 sqrt(k), within k * 2^-24 * 4 * k in the worst case.
                  ASSERT_NEAR(got[i], want[i], 4e-6 * k * k + 1e-6) << "m " << m << " n " << n << " k " << k;
                }
              }
            }
  }
}

TEST_F(SimdTargets, PackersCopyEveryValueOnEveryTarget) {
  // pack_transposed: whole transpose squares (16 x 16, 8 x 8), row and column tails, panels
  // narrower than a square; pack_rows: whole vectors, lane tails, widths below one vector.
  const int64_t ldb = 71;
  const auto b = random_values(size_t(ldb) * 70, 1.0f, 44);
  using Packer = void (*)(float*, int, const float*, int64_t, int);
  struct Case {
    const char* name;
    Packer pack;
    int64_t row_step, column_step;  // panel[r * w + j] = b[3 + r * row_step + j * column_step]
  };
  for (const Case& c : {Case{"pack_transposed", simd::pack_transposed, 1, ldb}, Case{"pack_rows", simd::pack_rows, ldb, 1}})
    for (const auto& target : simd::available_targets()) {
      simd::force_target(target.bit);
      SCOPED_TRACE(std::string(c.name) + " " + target.name);
      for (int w : {1, 7, 8, 16, 17, 32, 33})
        for (int kb : {1, 8, 15, 16, 33, 64}) {
          std::vector<float> panel(size_t(w) * kb + 1, -1.0f);
          c.pack(panel.data(), w, b.data() + 3, ldb, kb);
          for (int r = 0; r < kb; ++r)
            for (int j = 0; j < w; ++j)
              ASSERT_EQ(bits(panel[size_t(r) * w + j]), bits(b[size_t(3 + r * c.row_step + j * c.column_step)]))
                  << "w " << w << " kb " << kb << " r " << r << " j " << j;
          ASSERT_EQ(panel.back(), -1.0f) << "written past the panel";
        }
    }
}

TEST_F(SimdTargets, ColumnSumsAreTheRowOrderSumsOnEveryTarget) {
  // Widths below, at and beyond one vector and one 8-vector group; a row stride wider than C.
  for (const auto& target : simd::available_targets()) {
    simd::force_target(target.bit);
    SCOPED_TRACE(target.name);
    for (int C : {1, 15, 16, 17, 128, 130, 300})
      for (int64_t N : {1, 7, 50}) {
        const int64_t ld = C + 3;
        const auto in = random_values(size_t(N * ld), 2.0f, 46);
        const auto start = random_values(size_t(C) + 1, 1.0f, 47);
        std::vector<float> got = start, want = start;
        for (int c = 0; c < C; ++c) {
          float acc = 0;
          for (int64_t n = 0; n < N; ++n) acc += in[size_t(n * ld + c)];
          want[size_t(c)] += acc;
        }
        simd::column_sums_add(got.data(), in.data(), N, C, ld);
        for (int c = 0; c <= C; ++c) ASSERT_EQ(bits(got[size_t(c)]), bits(want[size_t(c)])) << "C " << C << " N " << N << " c " << c;
      }
  }
}

TEST_F(SimdTargets, MixStreamsIsScaleThenAxpyPerStream) {
  // MUDD's fused mixing against the per-stream scale + axpy it replaces, on every target, with a
  // vector tail (n = 131) and up to 4 streams over 7 sources.
  const int64_t n = 131;
  const int S = 7;
  std::vector<std::vector<float>> x;
  for (int j = 0; j < S; ++j) x.push_back(random_values(size_t(n), 2.0f, 50 + uint32_t(j)));
  const auto alpha = random_values(size_t(4 * S), 1.5f, 60);
  for (const auto& target : simd::available_targets()) {
    simd::force_target(target.bit);
    SCOPED_TRACE(target.name);
    for (int C : {1, 4}) {
      std::vector<std::vector<float>> fused(static_cast<size_t>(C), std::vector<float>(static_cast<size_t>(n)));
      std::vector<std::vector<float>> separate = fused;
      std::vector<float*> y;
      std::vector<const float*> xs;
      for (auto& v : fused) y.push_back(v.data());
      for (auto& v : x) xs.push_back(v.data());
      simd::mix_streams(y.data(), C, xs.data(), S, alpha.data(), n);
      for (int s = 0; s < C; ++s) {
        simd::scale(separate[size_t(s)].data(), x[0].data(), alpha[size_t(s * S)], n);
        for (int j = 1; j < S; ++j) simd::axpy(separate[size_t(s)].data(), x[size_t(j)].data(), alpha[size_t(s * S + j)], n);
        EXPECT_EQ(0, std::memcmp(fused[size_t(s)].data(), separate[size_t(s)].data(), sizeof(float) * size_t(n))) << s;
      }
    }
  }
}

TEST_F(SimdTargets, TheThreadedGeluIsTheKernel) {
  // gelu_tanh_forward<float> splits the work into chunks across threads: same bits as one call.
  const int64_t n = 3 * 4096 + 77;
  const auto x = random_values(size_t(n), 5.0f, 3);
  std::vector<float> threaded(static_cast<size_t>(n)), single(static_cast<size_t>(n));
  gelu_tanh_forward(threaded.data(), x.data(), n);
  simd::gelu_tanh_forward(single.data(), x.data(), n);
  EXPECT_EQ(0, std::memcmp(threaded.data(), single.data(), sizeof(float) * size_t(n)));
}

TEST_F(SimdTargets, TheFusedBiasGeluIsBiasThenGelu) {
  const int64_t N = 37;
  const int C = 100;
  const auto x = random_values(size_t(N * C), 4.0f, 5), b = random_values(size_t(C), 1.0f, 6);
  std::vector<float> pre = x, act(x.size()), separate(x.size()), expected_pre = x;
  bias_gelu_tanh_forward(pre.data(), act.data(), b.data(), N, C);
  for (int64_t n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) expected_pre[size_t(n * C + c)] += b[size_t(c)];
  gelu_tanh_forward(separate.data(), expected_pre.data(), N * C);
  EXPECT_EQ(0, std::memcmp(pre.data(), expected_pre.data(), sizeof(float) * pre.size()));
  EXPECT_EQ(0, std::memcmp(act.data(), separate.data(), sizeof(float) * act.size()));
}

TEST_F(SimdTargets, TheFusedResidualLayerNormIsAddThenLayerNorm) {
  const int64_t N = 19;
  const int C = 72;
  const auto a = random_values(size_t(N * C), 2.0f, 7), b = random_values(size_t(N * C), 2.0f, 8);
  const auto w = random_values(size_t(C), 1.0f, 9), bias = random_values(size_t(C), 1.0f, 10);
  std::vector<float> sum(a.size()), out(a.size()), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
  std::vector<float> sum2(a.size()), out2(a.size()), mean2(static_cast<size_t>(N)), rstd2(static_cast<size_t>(N));
  residual_layernorm_forward(sum.data(), out.data(), mean.data(), rstd.data(), a.data(), b.data(), w.data(), bias.data(), N, C);
  for (size_t i = 0; i < a.size(); ++i) sum2[i] = a[i] + b[i];
  layernorm_forward(out2.data(), mean2.data(), rstd2.data(), sum2.data(), w.data(), bias.data(), N, C);
  EXPECT_EQ(0, std::memcmp(sum.data(), sum2.data(), sizeof(float) * sum.size()));
  EXPECT_EQ(0, std::memcmp(out.data(), out2.data(), sizeof(float) * out.size()));
  EXPECT_EQ(0, std::memcmp(rstd.data(), rstd2.data(), sizeof(float) * rstd.size()));
}

}  // namespace
}  // namespace fca
