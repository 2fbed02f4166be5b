#include "exec/timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/bootstrap.h"
#include "core/error.h"
#include "core/undefined_statistic.h"
#include "ops/gemm.h"
#include "ops/onednn_matmul.h"

namespace fca {

nlohmann::ordered_json TimingStats::to_json() const {
  return {{"runs", runs}, {"median_s", median}, {"p10_s", p10}, {"p90_s", p90},
          {"mean_s", mean}, {"sd_s", sd}, {"min_s", min}};
}

TimingStats timing_stats(const std::vector<double>& t) {
  TimingStats s;
  s.runs = int(t.size());
  if (t.empty()) return s;
  s.median = quantile(t, 0.5);
  s.p10 = quantile(t, 0.1);
  s.p90 = quantile(t, 0.9);
  s.min = *std::min_element(t.begin(), t.end());
  for (double v : t) s.mean += v;
  s.mean /= double(t.size());
  for (double v : t) s.sd += (v - s.mean) * (v - s.mean);
  s.sd = t.size() > 1 ? std::sqrt(s.sd / double(t.size() - 1)) : 0;
  return s;
}

double time_once(const std::function<void()>& fn) {
  const auto a = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

TimingStats time_runs(const std::function<void()>& fn, int warmup, int runs) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) t.push_back(time_once(fn));
  return timing_stats(t);
}

double measure_sgemm_peak_gflops() {
  // The fp32 peak whatever the process's precision: bf16 figures are quoted against it too.
  const MatmulPrecisionScope fp32(MatmulPrecision::fp32);
  const int n = 2048;
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n, 0.0f);
  // The faster of fca's GEMM (oneDNN's at this shape, ops/onednn_matmul.h) and OpenBLAS's: the
  // best SGEMM this machine runs. Best of 4 after one
  // warm-up: the minimum of a warm 17-GFLOP product is stable to about 1% on this project's machine.
  const double blas = time_runs([&] { openblas_sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); }, 1, 4).min;
#if defined(__SANITIZE_ADDRESS__)
  // Under AddressSanitizer fca's GEMM is instrumented (several times slower) and cannot be the
  // faster one; OpenBLAS is not instrumented. Timing it would cost minutes per call and change nothing.
  const double ours = blas;
#else
  const double ours = time_runs([&] { gemm<float>(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); }, 1, 4).min;
#endif
  return 2.0 * n * double(n) * n / std::min(ours, blas) / 1e9;
}

PairedRatio paired_ratio(const std::vector<double>& a, const std::vector<double>& b, uint64_t seed, int resamples) {
  if (a.size() != b.size()) throw Error("paired ratio: the two configurations were timed in different rounds");
  PairedRatio r;
  r.runs = int(a.size());
  if (a.empty()) {
    r.reason = "no timed rounds";
    return r;
  }
  std::vector<double> ratios(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(b[i] > 0) || !std::isfinite(a[i]) || !std::isfinite(b[i])) {
      r.reason = "a round of the reference measured " + std::to_string(b[i]) + " s, so the ratio divides by 0";
      return r;
    }
    ratios[i] = a[i] / b[i];
  }
  r.defined = true;
  r.estimate = quantile(ratios, 0.5);
  const auto medians = bootstrap(ratios.size(), resamples, seed, [&](const std::vector<size_t>& idx) {
    std::vector<double> v(idx.size());
    for (size_t i = 0; i < idx.size(); ++i) v[i] = ratios[idx[i]];
    return median_in_place(v);
  });
  r.low = quantile(medians, 0.025);
  r.high = quantile(medians, 0.975);
  return r;
}

LatencyDifference latency_difference(const PairedRatio& r, double margin) {
  if (!r.defined) return LatencyDifference::none;
  if (r.low > 1.0 + margin) return LatencyDifference::slower;
  if (r.high < 1.0 - margin) return LatencyDifference::faster;
  return LatencyDifference::none;
}

const char* latency_difference_words(LatencyDifference d) {
  switch (d) {
    case LatencyDifference::slower: return "slower";
    case LatencyDifference::faster: return "faster";
    case LatencyDifference::none: break;
  }
  return "no measurable difference at this size";
}

nlohmann::ordered_json paired_ratio_json(const PairedRatio& r, double margin) {
  if (!r.defined) {
    nlohmann::ordered_json j = undefined_statistic("estimate", r.reason);
    j["runs"] = r.runs;
    return j;
  }
  return {{"estimate", r.estimate}, {"ci95", {r.low, r.high}}, {"runs", r.runs}, {"margin", margin},
          {"difference", latency_difference_words(latency_difference(r, margin))}};
}

std::string latency_change_words(const nlohmann::json& r, const std::string& reference) {
  if (r["estimate"].is_null())
    return "latency against " + reference + " undefined (" + r.value("note", std::string("no reason given")) + ")";
  const double estimate = r["estimate"].get<double>(), low = r["ci95"][0].get<double>(), high = r["ci95"][1].get<double>();
  const bool slower = estimate >= 1.0;
  // Slower: (ratio - 1) in per cent, the interval in the same order; faster: (1 - ratio), the
  // interval's ends swapped (the higher ratio is the smaller saving).
  const double change = slower ? estimate - 1.0 : 1.0 - estimate;
  const double from = slower ? low - 1.0 : 1.0 - high, to = slower ? high - 1.0 : 1.0 - low;
  const bool clear = r["difference"] == (slower ? "slower" : "faster");
  char buf[200];
  std::snprintf(buf, sizeof buf, clear ? "%.1f%% %s than %s [%.1f%%, %.1f%%]" : "%.1f%% %s than %s [%+.1f%%, %+.1f%%]", 100 * change,
                slower ? "slower" : "faster", reference.c_str(), 100 * from, 100 * to);
  return clear ? std::string(buf) : std::string(buf) + ": " + r["difference"].get<std::string>();
}

InterleavedTiming time_interleaved(size_t count, const std::function<double(size_t)>& measure,
                                   const std::vector<std::pair<size_t, size_t>>& ratios, const InterleavedOptions& o,
                                   const std::function<void(int)>& on_round) {
  if (o.min_rounds < 1 || o.max_rounds < o.min_rounds || o.warmup < 0 || !(o.margin > 0) || !(o.time_budget_s >= 0))
    throw Error("interleaved timing: need 1 <= min rounds <= max rounds, warm-up >= 0, a positive margin and a budget >= 0");
  for (const auto& [a, b] : ratios)
    if (a >= count || b >= count) throw Error("interleaved timing: a ratio names a configuration that is not timed");
  InterleavedTiming t;
  t.seconds.assign(count, {});
  if (count == 0) {
    t.stopped_because = "nothing to time";
    return t;
  }
  for (size_t i = 0; i < count; ++i)
    for (int w = 0; w < o.warmup; ++w) (void)measure(i);
  // Every ratio's interval narrower than the margin: more rounds would not change what can be said.
  // A stopping rule needs a coarser interval than the reported one: 500 resamples.
  auto intervals_narrow = [&] {
    for (const auto& [a, b] : ratios) {
      const PairedRatio r = paired_ratio(t.seconds[a], t.seconds[b], 1, 500);
      if (r.defined && r.high - r.low > o.margin) return false;
    }
    return true;
  };
  // The stopping check costs a bootstrap per ratio: after the minimum it runs at rounds growing by
  // about 10% (at least 2), so that hundreds of rounds cost tens of checks.
  int next_check = o.min_rounds;
  while (true) {
    for (size_t i = 0; i < count; ++i) {
      const size_t arm = (size_t(t.rounds) + i) % count;
      const double s = measure(arm);
      t.seconds[arm].push_back(s);
      t.timed_s += s;
    }
    ++t.rounds;
    if (on_round) on_round(t.rounds);
    if (t.rounds < o.min_rounds) continue;
    if (t.rounds >= o.max_rounds) {
      t.stopped_because = "the maximum of " + std::to_string(o.max_rounds) + " rounds was reached";
      break;
    }
    const bool check = t.rounds >= next_check;
    if (check) next_check = t.rounds + std::max(2, t.rounds / 10);
    if (check && intervals_narrow()) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "every ratio's 95%% interval is narrower than the %.3g margin", o.margin);
      t.stopped_because = buf;
      break;
    }
    if (t.timed_s >= o.time_budget_s) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "the time budget of %.3g s of timed runs was spent", o.time_budget_s);
      t.stopped_because = buf;
      break;
    }
  }
  return t;
}

}  // namespace fca
