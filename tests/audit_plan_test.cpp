// The audit's batch probe (audit/plan.h) on synthetic timing sources: a slow moment during one
// candidate's pass must not decide the batch, and the sweep's stopping rule (a long pass) holds.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "audit/plan.h"

namespace fca {
namespace {

// A synthetic machine: a pass of b windows takes per_window[b] * b seconds, except the passes
// listed in `stalls` (by call number, counting from 0), which take `stall` times as long.
struct SyntheticPasses {
  std::map<int, double> per_window;
  std::map<int, double> stalls;  // call number -> factor
  std::vector<int> prepared, measured;

  void prepare(int b) { prepared.push_back(b); }
  double measure(int b) {
    const int call = int(measured.size());
    measured.push_back(b);
    const auto stall = stalls.find(call);
    return per_window.at(b) * b * (stall == stalls.end() ? 1.0 : stall->second);
  }
  BatchChoice probe(const std::vector<int>& candidates) {
    return probe_batch_candidates(
        candidates, [this](int b) { prepare(b); }, [this](int b) { return measure(b); });
  }
};

TEST(BatchProbe, OneSlowPassDoesNotDecideTheBatch) {
  // Batch 8 is 20% faster per window than 1 (what a 2-core machine measures at L4 D128), but its
  // sweep pass (call 3) lands in a slow moment and takes twice as long: a probe of one timed pass
  // per candidate would choose 16. The fastest of each candidate's passes does not.
  SyntheticPasses m;
  m.per_window = {{1, 0.0012}, {2, 0.0011}, {4, 0.0011}, {8, 0.0010}, {16, 0.00105}};
  m.stalls = {{3, 2.0}};
  const BatchChoice c = m.probe({1, 2, 4, 8, 16});
  EXPECT_EQ(c.batch, 8);
  EXPECT_EQ(c.samples, kBatchProbeSamples);
  ASSERT_EQ(c.seconds_per_window.size(), 5u);
  EXPECT_DOUBLE_EQ(c.seconds_per_window[3].second, 0.0010);  // not the stalled pass
  EXPECT_EQ(m.prepared, (std::vector<int>{1, 2, 4, 8, 16}));  // each candidate readied once, in the sweep
  EXPECT_EQ(m.measured.size(), size_t(5 * kBatchProbeSamples));
  EXPECT_EQ(std::vector<int>(m.measured.begin(), m.measured.begin() + 5), (std::vector<int>{1, 2, 4, 8, 16}));
}

TEST(BatchProbe, StallsAtEveryCandidateStillLeaveTheFastest) {
  // Every candidate suffers one stall, each in a different round: the fastest passes are untouched.
  SyntheticPasses m;
  m.per_window = {{1, 0.0015}, {2, 0.0012}, {4, 0.0009}, {8, 0.0010}};
  m.stalls = {{0, 3.0}, {5, 3.0}, {3, 3.0}, {6, 3.0}};
  const BatchChoice c = m.probe({1, 2, 4, 8});
  EXPECT_EQ(c.batch, 4);
}

TEST(BatchProbe, EqualCandidatesKeepTheSmallestBatch) {
  SyntheticPasses m;
  m.per_window = {{1, 0.001}, {2, 0.001}, {4, 0.001}};
  EXPECT_EQ(m.probe({1, 2, 4}).batch, 1);
}

TEST(BatchProbe, ALongPassEndsTheSweep) {
  // A pass of 4 windows takes 0.6 s (> kBatchProbeStopS): 8 and 16 are never readied nor timed.
  SyntheticPasses m;
  m.per_window = {{1, 0.16}, {2, 0.155}, {4, 0.15}, {8, 0.1}, {16, 0.1}};
  const BatchChoice c = m.probe({1, 2, 4, 8, 16});
  EXPECT_EQ(m.prepared, (std::vector<int>{1, 2, 4}));
  for (const int b : m.measured) EXPECT_LE(b, 4);
  EXPECT_EQ(c.batch, 4);
  EXPECT_EQ(c.samples, kBatchProbeSamples);
}

TEST(BatchProbe, OneCandidateIsTimedOnce) {
  SyntheticPasses m;
  m.per_window = {{1, 0.7}};
  const BatchChoice c = m.probe({1, 2, 4});  // the first pass is longer than kBatchProbeStopS
  EXPECT_EQ(c.batch, 1);
  EXPECT_EQ(c.samples, 1);
  EXPECT_EQ(m.measured, (std::vector<int>{1}));
}

}  // namespace
}  // namespace fca
