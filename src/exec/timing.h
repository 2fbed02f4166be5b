// Timing for benchmarks and `fca exec`: order statistics of a sample of run times, the machine's
// measured SGEMM peak, and interleaved timing of several configurations with paired ratio intervals.
//
// Why interleaved: timing configurations one after the other lets a slow period (a noisy neighbour,
// a frequency change) or whatever the first configuration pays for (page faults, thread start-up)
// land on one side only. Measured on this project's machine, five runs of the same sequential
// Dense-vs-FeatureGate exec gave latency ratios from 0.68 to 1.60, each with a tight within-run
// spread. Timed in rounds (every configuration once per round, the order rotated each round), drift
// lands on every configuration alike, and the ratio of two configurations is estimated from the
// per-round ratios, which drift cancels out of.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"

namespace fca {

struct TimingStats {
  int runs = 0;
  double median = 0, p10 = 0, p90 = 0, mean = 0, sd = 0, min = 0;  // seconds
  nlohmann::ordered_json to_json() const;
};

// Order statistics (linear interpolation, numpy's default), mean and sd (n - 1) of run times.
TimingStats timing_stats(const std::vector<double>& seconds);

// Runs fn `warmup` times untimed, then `runs` times timed (steady clock). One configuration alone:
// for comparisons use time_interleaved.
TimingStats time_runs(const std::function<void()>& fn, int warmup, int runs);

// Seconds of one run of fn (steady clock).
double time_once(const std::function<void()>& fn);

// Best achieved SGEMM GFLOP/s on this machine with the current thread count: square n x n x n
// products (n = 2048), best of several, warm, by fca's GEMM or OpenBLAS's, whichever is faster.
// The reference for "fraction of peak".
double measure_sgemm_peak_gflops();

// The latency ratio of configuration a to configuration b, timed in the same rounds: the median
// over rounds of a_r / b_r, with the 95% percentile interval of that median under a paired
// bootstrap of the rounds (both sides resampled together, 2,000 resamples, a fixed seed: the same
// times give the same interval). Undefined (`defined` false, `reason` says why) when a round of b
// measured 0 s.
struct PairedRatio {
  bool defined = false;
  double estimate = 0, low = 0, high = 0;
  int runs = 0;
  std::string reason;
};
inline constexpr int kRatioResamples = 2000;
PairedRatio paired_ratio(const std::vector<double>& a, const std::vector<double>& b, uint64_t seed = 1,
                         int resamples = kRatioResamples);

// What a ratio lets one say, with `margin` the smallest practical difference (0.05 = 5%): "slower"
// only where the whole interval lies above 1 + margin, "faster" only where it lies below
// 1 - margin; else no measurable difference at this size. Why the whole interval and not the
// estimate: five runs of the same Dense-vs-FeatureGate exec estimated 1.028 to 1.054 with
// overlapping intervals; a rule on the estimate called one of them "slower" and four "no
// difference". Two runs can now disagree only where their intervals sit on both sides of the
// margin's edge, which narrow intervals make rare.
enum class LatencyDifference { slower, faster, none };
LatencyDifference latency_difference(const PairedRatio& r, double margin);
// "slower", "faster", "no measurable difference at this size".
const char* latency_difference_words(LatencyDifference d);

// A ratio in a result document: {"estimate", "ci95": [low, high], "runs", "margin", "difference"},
// or the undefined-statistic shape (estimate and ci95 null, "note": "undefined: ...").
nlohmann::ordered_json paired_ratio_json(const PairedRatio& r, double margin);

// A ratio object (paired_ratio_json) as a change in per cent against `reference`: "30.8% slower than
// Dense [25.1%, 36.0%]", "12.0% faster than Dense [8.0%, 15.1%]", or, where the interval does not
// clear the margin, "3.0% slower than Dense [-1.2%, +7.1%]: no measurable difference at this size";
// the interval is the ratio's, converted the same way. Undefined ratios: "latency against <reference>
// undefined (<note>)".
std::string latency_change_words(const nlohmann::json& ratio, const std::string& reference);

struct InterleavedOptions {
  int warmup = 3;           // untimed runs of each configuration before the first round
  int min_rounds = 20;      // rounds always timed
  int max_rounds = 200;     // rounds at most
  double time_budget_s = 60;  // timed seconds (the sum of every timed run) after which no round starts
  double margin = 0.05;     // the practical margin; more rounds until every interval is narrower
};

struct InterleavedTiming {
  std::vector<std::vector<double>> seconds;  // [configuration][round]
  int rounds = 0;
  double timed_s = 0;            // the sum of every timed run
  std::string stopped_because;   // which rule ended the rounds, in words
};

// Times `count` configurations in rounds: round r runs configuration (r + i) mod count for i = 0,
// 1, ..., each once, after `warmup` untimed runs of each. measure(i) runs configuration i once and
// returns its seconds (time_once around a pass; tests pass a synthetic source). After min_rounds,
// rounds go on until the interval of every ratio in `ratios` (pairs of configuration indices, a
// over b) is narrower than the margin, the time budget is spent, or max_rounds is reached;
// `stopped_because` says which.
InterleavedTiming time_interleaved(size_t count, const std::function<double(size_t)>& measure,
                                   const std::vector<std::pair<size_t, size_t>>& ratios, const InterleavedOptions& options,
                                   const std::function<void(int rounds)>& on_round = {});

}  // namespace fca
