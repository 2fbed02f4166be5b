// Interleaved timing and paired latency ratios (exec/timing.h), on synthetic timing sources: a
// machine that slows down as it runs must not flip a ratio, and two equal configurations must never
// be called different.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "core/undefined_statistic.h"
#include "exec/timing.h"

namespace fca {
namespace {

// A synthetic machine: configuration i takes base[i] seconds times a drift factor that grows
// linearly from 1 to 1 + drift over `expected_calls` calls, times multiplicative noise (uniform in
// [1 - noise, 1 + noise]), and now and then (spike_rate) a 3x stall.
struct SyntheticMachine {
  explicit SyntheticMachine(std::vector<double> base_s, double drift_ = 0, double noise_ = 0, double spike_rate_ = 0, int calls_ = 1)
      : base(std::move(base_s)), drift(drift_), noise(noise_), spike_rate(spike_rate_), expected_calls(calls_) {}
  std::vector<double> base;
  double drift = 0, noise = 0, spike_rate = 0;
  int expected_calls = 1;
  Rng rng{1};
  int calls = 0;
  std::vector<size_t> order;  // configurations in the order they ran

  double operator()(size_t i) {
    order.push_back(i);
    const double d = 1.0 + drift * double(calls++) / double(expected_calls);
    double t = base[i] * d * (1.0 + noise * (2.0 * rng.uniform() - 1.0));
    if (rng.uniform() < spike_rate) t *= 3.0;
    return t;
  }
};

InterleavedOptions fixed_rounds(int rounds) {
  InterleavedOptions o;
  o.warmup = 0;
  o.min_rounds = o.max_rounds = rounds;
  return o;
}

TEST(InterleavedTiming, DriftCancelsWhereSequentialTimingIsFooled) {
  // B is 25% slower than A; the machine slows down 3x over the measurement.
  SyntheticMachine m({0.010, 0.0125}, 2.0, 0.05, 0.0, 2 * 40);
  const InterleavedTiming t = time_interleaved(2, std::ref(m), {{1, 0}}, fixed_rounds(40));
  const PairedRatio r = paired_ratio(t.seconds[1], t.seconds[0]);
  ASSERT_TRUE(r.defined);
  EXPECT_NEAR(r.estimate, 1.25, 0.05);
  EXPECT_LT(r.low, 1.25);
  EXPECT_GT(r.high, 1.25);
  EXPECT_EQ(latency_difference(r, 0.05), LatencyDifference::slower);

  // The same machine timed one configuration after the other (A's runs, then B's): B pays for the
  // slowdown, and the ratio of medians is far from 1.25. This is the failure interleaving removes.
  SyntheticMachine seq({0.010, 0.0125}, 2.0, 0.05, 0.0, 2 * 40);
  std::vector<double> a, b;
  for (int i = 0; i < 40; ++i) a.push_back(seq(0));
  for (int i = 0; i < 40; ++i) b.push_back(seq(1));
  EXPECT_GT(timing_stats(b).median / timing_stats(a).median, 1.25 * 1.5);
}

TEST(InterleavedTiming, EqualConfigurationsAreNeverCalledDifferent) {
  // 100 noisy (+-10%, wider than the p10-p90 spread exec sees on a quiet machine), drifting, stalling machines on which A and B take the same time, timed as
  // exec times (at least 20 rounds, more until the interval is narrower than the margin): never
  // "faster" or "slower".
  InterleavedOptions o;
  o.warmup = 1;
  o.min_rounds = 20;
  o.max_rounds = 400;
  o.time_budget_s = 1e9;
  o.margin = 0.05;
  int rounds = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    SyntheticMachine m({0.02, 0.02}, 1.0, 0.10, 0.05, 2 * 100);
    m.rng = Rng(seed);
    const InterleavedTiming t = time_interleaved(2, std::ref(m), {{1, 0}}, o);
    const PairedRatio r = paired_ratio(t.seconds[1], t.seconds[0], seed);
    EXPECT_EQ(latency_difference(r, 0.05), LatencyDifference::none) << "seed " << seed << ": " << r.estimate << " [" << r.low << ", " << r.high << "]";
    rounds += t.rounds;
  }
  EXPECT_GT(rounds, 100 * 20);  // the noise needs more than the minimum: the adaptive rounds were exercised
}

TEST(InterleavedTiming, RoundsRotateTheOrderAndWarmEveryConfiguration) {
  SyntheticMachine m({1, 1, 1});
  InterleavedOptions o = fixed_rounds(3);
  o.warmup = 2;
  const InterleavedTiming t = time_interleaved(3, std::ref(m), {}, o);
  const std::vector<size_t> expected{0, 0, 1, 1, 2, 2,  // warm-up
                                     0, 1, 2, 1, 2, 0, 2, 0, 1};
  EXPECT_EQ(m.order, expected);
  EXPECT_EQ(t.rounds, 3);
  for (const auto& s : t.seconds) EXPECT_EQ(s.size(), 3u);
}

TEST(InterleavedTiming, SaysWhyItStopped) {
  InterleavedOptions o;
  o.warmup = 0;
  o.min_rounds = 10;
  o.max_rounds = 1000;
  o.margin = 0.05;
  o.time_budget_s = 1e9;
  {  // No noise: every interval is a point at the minimum.
    SyntheticMachine m({0.01, 0.02});
    const InterleavedTiming t = time_interleaved(2, std::ref(m), {{1, 0}}, o);
    EXPECT_EQ(t.rounds, 10);
    EXPECT_NE(t.stopped_because.find("narrower than the 0.05 margin"), std::string::npos) << t.stopped_because;
  }
  {  // Heavy noise and a small budget: the budget ends it.
    SyntheticMachine m({0.01, 0.01}, 0.0, 0.9);
    o.time_budget_s = 0.5;
    const InterleavedTiming t = time_interleaved(2, std::ref(m), {{1, 0}}, o);
    EXPECT_NE(t.stopped_because.find("time budget of 0.5 s"), std::string::npos) << t.stopped_because;
    EXPECT_GE(t.timed_s, 0.5);
    EXPECT_LT(t.rounds, 1000);
  }
  {  // Heavy noise, no budget to speak of, few rounds allowed: the maximum ends it.
    SyntheticMachine m({0.01, 0.01}, 0.0, 0.9);
    o.time_budget_s = 1e9;
    o.max_rounds = 12;
    const InterleavedTiming t = time_interleaved(2, std::ref(m), {{1, 0}}, o);
    EXPECT_EQ(t.rounds, 12);
    EXPECT_NE(t.stopped_because.find("maximum of 12 rounds"), std::string::npos) << t.stopped_because;
  }
  {  // Noise that more rounds resolve: it goes past the minimum and ends on the margin.
    SyntheticMachine m({0.01, 0.01}, 0.0, 0.3);
    o.max_rounds = 1000;
    const InterleavedTiming t = time_interleaved(2, std::ref(m), {{1, 0}}, o);
    EXPECT_GT(t.rounds, 10);
    EXPECT_NE(t.stopped_because.find("narrower"), std::string::npos) << t.stopped_because;
    const PairedRatio r = paired_ratio(t.seconds[1], t.seconds[0], 1, 500);  // the stopping rule's interval
    EXPECT_LE(r.high - r.low, 0.05);
  }
}

TEST(PairedRatio, IsDeterministicAndUndefinedWhenTheReferenceMeasuredNothing) {
  const std::vector<double> a{1.0, 1.1, 0.9, 1.2, 1.05}, b{1.0, 1.0, 1.0, 1.0, 1.0};
  const PairedRatio r1 = paired_ratio(a, b), r2 = paired_ratio(a, b);
  EXPECT_EQ(r1.estimate, 1.05);
  EXPECT_EQ(r1.low, r2.low);
  EXPECT_EQ(r1.high, r2.high);
  EXPECT_LE(r1.low, r1.estimate);
  EXPECT_GE(r1.high, r1.estimate);

  const PairedRatio zero = paired_ratio(a, {1.0, 0.0, 1.0, 1.0, 1.0});
  EXPECT_FALSE(zero.defined);
  EXPECT_EQ(latency_difference(zero, 0.05), LatencyDifference::none);
  const auto j = paired_ratio_json(zero, 0.05);
  EXPECT_TRUE(j["estimate"].is_null());
  EXPECT_TRUE(is_undefined_statistic(j));
  EXPECT_NE(undefined_reason(j).find("divides by 0"), std::string::npos);
  EXPECT_NO_THROW(check_statistics(nlohmann::json{{"r", j}, {"d", paired_ratio_json(r1, 0.05)}}, "test"));
  EXPECT_THROW(paired_ratio(a, {1.0}), Error);
}

TEST(PairedRatio, NamesADifferenceOnlyBeyondTheMargin) {
  PairedRatio r;
  r.defined = true;
  r.runs = 20;
  auto words = [&](double est, double lo, double hi) {
    r.estimate = est, r.low = lo, r.high = hi;
    return std::string(latency_difference_words(latency_difference(r, 0.05)));
  };
  EXPECT_EQ(words(1.20, 1.10, 1.30), "slower");
  EXPECT_EQ(words(0.80, 0.70, 0.90), "faster");
  EXPECT_EQ(words(1.03, 1.01, 1.05), "no measurable difference at this size");  // excludes 1, within the margin
  EXPECT_EQ(words(1.054, 1.033, 1.068), "no measurable difference at this size");  // estimate beyond, interval straddles 1.05
  EXPECT_EQ(words(1.20, 0.95, 1.40), "no measurable difference at this size");  // includes 1
  EXPECT_EQ(words(0.97, 0.95, 0.99), "no measurable difference at this size");
  EXPECT_EQ(words(0.93, 0.92, 0.951), "no measurable difference at this size");  // straddles 0.95
}

}  // namespace
}  // namespace fca
