// The tiled causal attention kernel against a direct double-precision implementation, at a length
// with a partial last tile (T = 150: 18 tiles of 8 query rows and one of 6, keys rounded up to 16),
// forward (output, probabilities, featuregate statistics) and backward (dq, dk, dv), in double and
// in float (the Highway products), and its independence of the batch.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/exec_counters.h"
#include "core/rng.h"
#include "core/threads.h"
#include "ops/attention.h"

namespace fca {
namespace {

constexpr int B = 2, T = 150, D = 16, H = 2, dh = D / H;

struct Naive {
  std::vector<double> out, probs, logp, feats, dqkv;
};

// Direct formulas: s = q.k / sqrt(dh) for u <= t, p = softmax, y = p v; backward by the chain rule.
Naive naive_attention(const std::vector<double>& qkv, const std::vector<double>& dout, const std::vector<double>& prev) {
  Naive r;
  r.out.assign(size_t(B) * T * D, 0);
  r.probs.assign(size_t(B) * H * T * T, 0);
  r.logp.assign(r.probs.size(), 0);
  r.feats.assign(size_t(B) * H * T * 3, 0);
  r.dqkv.assign(qkv.size(), 0);
  auto q = [&](int b, int t, int h, int i) { return qkv[size_t((b * T + t) * 3 * D + h * dh + i)]; };
  auto k = [&](int b, int t, int h, int i) { return qkv[size_t((b * T + t) * 3 * D + D + h * dh + i)]; };
  auto v = [&](int b, int t, int h, int i) { return qkv[size_t((b * T + t) * 3 * D + 2 * D + h * dh + i)]; };
  const double scale = 1.0 / std::sqrt(double(dh));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const size_t base = size_t((b * H + h) * T) * T;
      for (int t = 0; t < T; ++t) {
        std::vector<double> s(size_t(t + 1));
        double mx = -1e300;
        for (int u = 0; u <= t; ++u) {
          double dot = 0;
          for (int i = 0; i < dh; ++i) dot += q(b, t, h, i) * k(b, u, h, i);
          s[size_t(u)] = dot * scale;
          mx = std::max(mx, s[size_t(u)]);
        }
        double z = 0;
        for (int u = 0; u <= t; ++u) z += std::exp(s[size_t(u)] - mx);
        const double lse = mx + std::log(z);
        double ent = 0, kl = 0;
        for (int u = 0; u <= t; ++u) {
          const double lp = s[size_t(u)] - lse, p = std::exp(lp);
          r.probs[base + size_t(t) * T + u] = p;
          r.logp[base + size_t(t) * T + u] = lp;
          ent -= p * lp;
          kl += p * (lp - prev[base + size_t(t) * T + u]);
          for (int i = 0; i < dh; ++i) r.out[size_t((b * T + t) * D + h * dh + i)] += p * v(b, u, h, i);
        }
        double* f = &r.feats[(size_t(b * H + h) * T + t) * 3];
        f[0] = t == 0 ? 0 : ent / std::log(double(t + 1));
        f[1] = kl;
        f[2] = lse - std::log(double(t + 1));
        // Backward of y_t = sum_u p_u v_u with p = softmax(s).
        std::vector<double> dp(size_t(t + 1));
        double pdp = 0;
        for (int u = 0; u <= t; ++u) {
          double acc = 0;
          for (int i = 0; i < dh; ++i) acc += dout[size_t((b * T + t) * D + h * dh + i)] * v(b, u, h, i);
          dp[size_t(u)] = acc;
          pdp += r.probs[base + size_t(t) * T + u] * acc;
        }
        for (int u = 0; u <= t; ++u) {
          const double p = r.probs[base + size_t(t) * T + u], ds = p * (dp[size_t(u)] - pdp) * scale;
          for (int i = 0; i < dh; ++i) {
            r.dqkv[size_t((b * T + t) * 3 * D + h * dh + i)] += ds * k(b, u, h, i);
            r.dqkv[size_t((b * T + u) * 3 * D + D + h * dh + i)] += ds * q(b, t, h, i);
            r.dqkv[size_t((b * T + u) * 3 * D + 2 * D + h * dh + i)] += p * dout[size_t((b * T + t) * D + h * dh + i)];
          }
        }
      }
    }
  return r;
}

void expect_near_all(const char* what, const std::vector<double>& ours, const std::vector<double>& ref, double tol) {
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(ours[i] - ref[i]));
  EXPECT_LE(worst, tol) << what;
}

// qkv ~ 1.5 N(0, 1) (peaky enough attention), dout ~ N(0, 1), prev all zero.
struct Inputs {
  std::vector<double> qkv, dout, prev;
};
Inputs random_inputs(Rng& rng) {
  Inputs in{std::vector<double>(size_t(B) * T * 3 * D), std::vector<double>(size_t(B) * T * D),
            std::vector<double>(size_t(B) * H * T * T, 0)};
  for (auto& x : in.qkv) x = 1.5 * rng.normal();
  for (auto& x : in.dout) x = rng.normal();
  return in;
}

TEST(Attention, BlockedKernelMatchesDirectFormulas) {
  set_threads(2);
  Rng rng(9);
  auto [qkv, dout, prev] = random_inputs(rng);
  // A valid previous-layer log-softmax: from another random attention.
  std::vector<double> other(qkv.size());
  for (auto& x : other) x = rng.normal();
  prev = naive_attention(other, dout, prev).logp;
  const Naive ref = naive_attention(qkv, dout, prev);

  std::vector<double> out(ref.out.size()), probs(ref.probs.size()), logp(ref.probs.size()), feats(ref.feats.size()),
      dqkv(qkv.size()), scratch(size_t(thread_count() * attention_scratch_per_thread(T, dh, true)));
  AttentionStats<double> stats{logp.data(), prev.data(), feats.data()};
  attention_forward(out.data(), probs.data(), scratch.data(), &stats, qkv.data(), B, T, D, H);
  attention_backward(dqkv.data(), scratch.data(), dout.data(), probs.data(), qkv.data(), B, T, D, H);
  // Double precision throughout; differences are summation-order rounding, ~1e-15 relative.
  expect_near_all("out", out, ref.out, 1e-12);
  expect_near_all("probs", probs, ref.probs, 1e-12);
  expect_near_all("features", feats, ref.feats, 1e-10);
  expect_near_all("dqkv", dqkv, ref.dqkv, 1e-11);
  // Masked entries up to the tile's keys are exact zeros (the buffer started as zeros, so beyond
  // them too; the kernels never write or read there).
  for (int t = 0; t < T; ++t)
    for (int u = t + 1; u < T; ++u) ASSERT_EQ(probs[size_t(t) * T + u], 0.0);

  // Without statistics the output is bitwise the same (the replay guarantee at kernel level).
  std::vector<double> out2(out.size()), probs2(probs.size());
  attention_forward<double>(out2.data(), probs2.data(), scratch.data(), nullptr, qkv.data(), B, T, D, H);
  EXPECT_EQ(out, out2);
  EXPECT_EQ(probs, probs2);

  // An inference pass (probs null: each tile's probabilities stay in the scratch) gives bitwise the
  // same output and statistics, with and without the statistics.
  std::vector<double> out3(out.size()), logp3(logp.size()), feats3(feats.size());
  AttentionStats<double> stats3{logp3.data(), prev.data(), feats3.data()};
  attention_forward<double>(out3.data(), nullptr, scratch.data(), &stats3, qkv.data(), B, T, D, H);
  EXPECT_EQ(out, out3);
  EXPECT_EQ(feats, feats3);
  for (int t = 0; t < T; ++t)  // logp is written for u <= t only
    for (int u = 0; u <= t; ++u) ASSERT_EQ(logp[size_t(t) * T + u], logp3[size_t(t) * T + u]);
  std::fill(out3.begin(), out3.end(), 0.0);
  attention_forward<double>(out3.data(), nullptr, scratch.data(), nullptr, qkv.data(), B, T, D, H);
  EXPECT_EQ(out, out3);
}

TEST(Attention, FloatKernelsMatchDirectFormulasAndDoNotDependOnTheBatch) {
  set_threads(2);
  Rng rng(11);
  const auto [qkv, dout, prev] = random_inputs(rng);
  const Naive ref = naive_attention(qkv, dout, prev);
  const std::vector<float> qkv_f(qkv.begin(), qkv.end()), dout_f(dout.begin(), dout.end());
  auto run = [&](int batch, const float* q, const float* dy, std::vector<float>& out, std::vector<float>& probs,
                 std::vector<float>& dqkv, float probs_before = 0.0f) {
    out.assign(size_t(batch) * T * D, 0);
    probs.assign(size_t(batch) * H * T * T, probs_before);
    dqkv.assign(size_t(batch) * T * 3 * D, 0);
    std::vector<float> scratch(size_t(thread_count() * attention_scratch_per_thread(T, dh, true)));
    attention_forward<float>(out.data(), probs.data(), scratch.data(), nullptr, q, batch, T, D, H);
    attention_backward<float>(dqkv.data(), scratch.data(), dy, probs.data(), q, batch, T, D, H);
  };
  std::vector<float> out, probs, dqkv;
  run(B, qkv_f.data(), dout_f.data(), out, probs, dqkv);
  // Float rounding of sums over up to T = 150 terms of size ~1 (inputs rounded to float too):
  // errors of a few 1e-6 on values of order 1; 1e-4 leaves headroom without hiding a wrong term.
  auto widened = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  expect_near_all("out", widened(out), ref.out, 1e-4);
  expect_near_all("probs", widened(probs), ref.probs, 1e-5);
  expect_near_all("dqkv", widened(dqkv), ref.dqkv, 1e-4);
  for (int t = 0; t < T; ++t)
    for (int u = t + 1; u < T; ++u) ASSERT_EQ(probs[size_t(t) * T + u], 0.0f);

  // What the probabilities buffer held beyond each tile's keys is never read: NaN there changes
  // nothing.
  {
    std::vector<float> out_nan, probs_nan, dqkv_nan;
    run(B, qkv_f.data(), dout_f.data(), out_nan, probs_nan, dqkv_nan, std::nanf(""));
    EXPECT_EQ(0, std::memcmp(out_nan.data(), out.data(), sizeof(float) * out.size()));
    EXPECT_EQ(0, std::memcmp(dqkv_nan.data(), dqkv.data(), sizeof(float) * dqkv.size()));
  }

  // Without probs (an inference pass) the output is bitwise the same.
  {
    std::vector<float> out_inference(out.size(), 0.0f);
    std::vector<float> scratch(size_t(thread_count() * attention_scratch_per_thread(T, dh, false)));
    attention_forward<float>(out_inference.data(), nullptr, scratch.data(), nullptr, qkv_f.data(), B, T, D, H);
    EXPECT_EQ(0, std::memcmp(out_inference.data(), out.data(), sizeof(float) * out.size()));
    // Called by one thread of a parallel region (nested parallelism off: a team of one), the
    // (window, head) units are still cut for thread_count() threads, so that thread must take the
    // other thread's run too (UnitRuns); a unit left untaken keeps the fill value.
    const int levels = omp_get_max_active_levels();
    omp_set_max_active_levels(1);
    std::vector<float> out_nested(out.size(), 7.0f);
#pragma omp parallel num_threads(2)
    if (omp_get_thread_num() == 0)
      attention_forward<float>(out_nested.data(), nullptr, scratch.data(), nullptr, qkv_f.data(), B, T, D, H);
    omp_set_max_active_levels(levels);
    ASSERT_GE(thread_count(), 2);
    EXPECT_EQ(0, std::memcmp(out_nested.data(), out.data(), sizeof(float) * out.size()));
  }

  // The second window alone (batch 1) gives bitwise its results in the batch of two: each (window,
  // head) is computed the same way whatever the batch.
  std::vector<float> out1, probs1, dqkv1;
  run(1, qkv_f.data() + size_t(T) * 3 * D, dout_f.data() + size_t(T) * D, out1, probs1, dqkv1);
  EXPECT_EQ(0, std::memcmp(out1.data(), out.data() + size_t(T) * D, sizeof(float) * out1.size()));
  EXPECT_EQ(0, std::memcmp(probs1.data(), probs.data() + size_t(H) * T * T, sizeof(float) * probs1.size()));
  EXPECT_EQ(0, std::memcmp(dqkv1.data(), dqkv.data() + size_t(T) * 3 * D, sizeof(float) * dqkv1.size()));
}

TEST(Attention, ExecutedPairsCountTheTiles) {
  // Tiles of 8 query rows; tile [r0, r1) runs keys [0, r1) rounded up to 16 and capped at T.
  auto by_rule = [](int Tn) {
    int64_t pairs = 0;
    for (int r0 = 0; r0 < Tn; r0 += 8) {
      const int r1 = std::min(Tn, r0 + 8);
      pairs += int64_t(r1 - r0) * std::min(Tn, (r1 + 15) / 16 * 16);
    }
    return pairs;
  };
  EXPECT_EQ(attention_executed_pairs(64), 8 * 2 * (16 + 32 + 48 + 64));
  EXPECT_EQ(attention_executed_pairs(256), 8 * 2 * 16 * (16 * 17 / 2));
  EXPECT_EQ(attention_executed_pairs(150), 8 * 2 * 16 * (9 * 10 / 2) + 6 * 150);
  for (int Tn : {1, 7, 9, 31, 128, 2048}) EXPECT_EQ(attention_executed_pairs(Tn), by_rule(Tn)) << Tn;
  // Close to the causal triangle T (T + 1) / 2 at long windows.
  EXPECT_LT(double(attention_executed_pairs(2048)), 1.01 * 2048.0 * 2049.0 / 2.0);
}

// The kernels count their FLOPs from the tiles they ran (not from the formula exec checks them
// against): forward 2 products over the executed pairs, backward dP and dQ over the same pairs and
// dV and dK over each key tile's queries t >= u0, per (window, head).
TEST(Attention, CountedFlopsAreTheTilesThatRan) {
  set_threads(2);
  const int B = 2, H = 2, D = 16, dh = D / H;
  for (int T : {1, 9, 40, 150}) {
    Rng rng(static_cast<uint64_t>(T));
    std::vector<float> qkv(size_t(B) * T * 3 * D), out(size_t(B) * T * D), probs(size_t(B) * H * T * T),
        dout(out.size()), dqkv(qkv.size()), scratch(size_t(thread_count() * attention_scratch_per_thread(T, dh, true)));
    for (auto& x : qkv) x = float(rng.normal());
    for (auto& x : dout) x = float(rng.normal());
    ExecCounters counters;
    {
      const CountingScope scope(counters);
      attention_forward(out.data(), probs.data(), scratch.data(), static_cast<const AttentionStats<float>*>(nullptr),
                        qkv.data(), B, T, D, H);
    }
    EXPECT_EQ(counters.gemm_flops, 2 * 2 * int64_t(B) * H * attention_executed_pairs(T) * dh) << T;
    EXPECT_EQ(counters.gemm_calls, 2 * B * H) << T;
    counters.reset();
    {
      const CountingScope scope(counters);
      attention_backward(dqkv.data(), scratch.data(), dout.data(), probs.data(), qkv.data(), B, T, D, H);
    }
    int64_t key_tile_pairs = 0;
    for (int u0 = 0; u0 < T; u0 += 8) key_tile_pairs += int64_t(std::min(T, u0 + 8) - u0) * (T - u0);
    EXPECT_EQ(counters.gemm_flops, 2 * 2 * int64_t(B) * H * (attention_executed_pairs(T) + key_tile_pairs) * dh) << T;
    EXPECT_EQ(counters.gemm_calls, 4 * B * H) << T;
  }
}

}  // namespace
}  // namespace fca
