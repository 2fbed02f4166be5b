#include "audit/plan.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/exec_counters.h"
#include "ops/onednn_matmul.h"

namespace fca {
namespace {

double flops_of(const ExecCounters& c) {
  return double(c.gemm_flops.load()) + double(c.controller_flops.load()) + double(c.mixing_flops.load());
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

double AuditPlan::estimated_s() const {
  return (double(live_windows) * live_batch_s + double(replay_windows) * replay_batch_s) / probe_batch;
}

double AuditPlan::rank_share() const {
  // Every phase runs its batches in rounds; with batches per phase about W / probe_batch, a rank
  // runs ceil(batches / ranks) of them.
  const int64_t batches = (eval_windows + probe_batch - 1) / std::max(1, probe_batch);
  if (ranks <= 1 || batches == 0) return 1.0;
  return double((batches + ranks - 1) / ranks) / double(batches);
}

double AuditPlan::estimated_wall_s() const { return estimated_s() * rank_share(); }

double AuditPlan::planned_flops() const {
  return (double(live_windows) * live_batch_flops + double(replay_windows) * replay_batch_flops) / probe_batch;
}

BatchChoice probe_batch_candidates(const std::vector<int>& candidates, const std::function<void(int)>& prepare,
                                   const std::function<double(int)>& measure) {
  BatchChoice c;
  std::vector<int> swept;
  std::vector<std::vector<double>> seconds;  // [swept candidate][timed pass]
  for (const int b : candidates) {
    prepare(b);
    const double s = measure(b);
    swept.push_back(b);
    seconds.push_back({s});
    if (s > kBatchProbeStopS) break;
  }
  if (swept.empty()) return c;
  // The rounds after the sweep run at the largest swept candidate's run state, which every smaller
  // pass fits in: no pass in them reallocates. One candidate alone has nothing to be compared with.
  for (int round = 1; round < kBatchProbeSamples && swept.size() > 1; ++round)
    for (size_t i = 0; i < swept.size(); ++i) seconds[i].push_back(measure(swept[i]));
  double best = 0;
  for (size_t i = 0; i < swept.size(); ++i) {
    const double per_window = *std::min_element(seconds[i].begin(), seconds[i].end()) / swept[i];
    c.seconds_per_window.emplace_back(swept[i], per_window);
    if (i == 0 || per_window < best) best = per_window, c.batch = swept[i];
  }
  c.samples = int(seconds[0].size());
  return c;
}

bool results_batch_invariant(const AuditableModel& model) {
  return model.batch_invariant() && matmul_precision() == MatmulPrecision::fp32;
}

BatchChoice choose_batch(AuditableModel& model, const WindowSet& eval) {
  if (!results_batch_invariant(model)) {
    BatchChoice c;
    c.reason = matmul_precision() == MatmulPrecision::bf16 ? "fixed: bf16 products depend on the batch"
                                                           : "fixed: this model's results may depend on the batch";
    return c;
  }
  const int T = eval.tokens, W = eval.count();
  if (model.max_batch() != 1) model.set_max_batch(1);
  const size_t bytes_per_window = model.run_state_bytes();
  std::vector<int> candidates;
  for (int b = 1; b <= 16 && b <= W; b *= 2)
    if (b == 1 || bytes_per_window * size_t(b) <= kBatchMemoryBudget) candidates.push_back(b);
  std::vector<double> nll(16);
  auto prepare = [&](int b) {
    if (model.max_batch() != b) model.set_max_batch(b);
    model.run_live(eval.inputs.data(), eval.targets.data(), b, T, nullptr, 0, nll.data());  // touches the new run state
  };
  auto measure = [&](int b) {
    const auto t0 = std::chrono::steady_clock::now();
    model.run_live(eval.inputs.data(), eval.targets.data(), b, T, nullptr, 0, nll.data());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  BatchChoice c = probe_batch_candidates(candidates, prepare, measure);
  c.reason = "probed: least time per window, fastest of its passes";
  if (model.max_batch() != c.batch) model.set_max_batch(c.batch);
  return c;
}

nlohmann::ordered_json BatchChoice::to_json() const {
  nlohmann::ordered_json probe = nlohmann::ordered_json::array();
  for (const auto& [b, s] : seconds_per_window) probe.push_back({{"batch", b}, {"seconds_per_window", s}});
  nlohmann::ordered_json j = {{"batch", batch}, {"reason", reason}, {"probe", probe}};
  if (samples > 0) j["timed_passes_per_candidate"] = samples;
  return j;
}

AuditPlan plan_audit(AuditableModel& model, const WindowSet& eval, int batch, int64_t live_windows, int64_t replay_windows,
                     int64_t cached_windows) {
  AuditPlan p;
  p.run_state_bytes = model.run_state_bytes();
  p.cache_bytes = size_t(cached_windows) * model.make_coefficients(1, eval.tokens).values().size() * sizeof(float);
  p.live_windows = live_windows;
  p.eval_windows = eval.count();
  p.calib_windows = cached_windows - eval.count();
  p.replay_windows = replay_windows;
  p.tokens = eval.tokens;
  p.probe_batch = std::min(batch, eval.count());
  const int B = p.probe_batch, T = eval.tokens;
  CoefficientTensor recorded = model.make_coefficients(B, T);
  std::vector<double> nll(static_cast<size_t>(B));
  // One untimed window first: the first pass of a process pays for starting threads and touching
  // fresh buffers, which the audit's thousands of passes do not.
  model.run_live(eval.inputs.data(), eval.targets.data(), 1, T, nullptr, 0, nll.data());
  using clock = std::chrono::steady_clock;
  ExecCounters counters;
  {
    const CountingScope scope(counters);
    const auto t0 = clock::now();
    model.run_live(eval.inputs.data(), eval.targets.data(), B, T, &recorded, 0, nll.data());
    p.live_batch_s = std::chrono::duration<double>(clock::now() - t0).count();
  }
  p.live_batch_flops = flops_of(counters);
  counters.reset();
  {
    const CountingScope scope(counters);
    const auto t0 = clock::now();
    model.run_replay(eval.inputs.data(), eval.targets.data(), B, T, recorded, nll.data());
    p.replay_batch_s = std::chrono::duration<double>(clock::now() - t0).count();
  }
  p.replay_batch_flops = flops_of(counters);
  // After the passes: the packed copy of the weights is made as a pass first uses each one.
  p.weights_bytes =
      model.run_state_bytes() > 0 ? model.parameter_count() * sizeof(float) + model.packed_weights_bytes() : 0;
  return p;
}

nlohmann::ordered_json AuditPlan::to_json() const {
  return {{"live_windows", live_windows},
          {"replay_windows", replay_windows},
          {"tokens", planned_tokens()},
          {"gflop", planned_flops() / 1e9},
          {"estimated_s", estimated_s()},
          {"ranks", ranks},
          {"estimated_wall_s", estimated_wall_s()},
          {"memory_bytes",
           {{"total", memory_bytes()}, {"weights", weights_bytes}, {"run_state", run_state_bytes}, {"cache", cache_bytes},
            {"kept_live_logits", kept_logits_bytes}}},
          {"probe", {{"batch", probe_batch}, {"live_s", live_batch_s}, {"replay_s", replay_batch_s}}}};
}

std::string AuditPlan::summary() const {
  std::string s = "audit plan: " + std::to_string(live_windows) + " live + " + std::to_string(replay_windows) +
                  " replayed windows of " + std::to_string(tokens) + " tokens (" + fmt("%.3g", double(planned_tokens())) +
                  " tokens";
  if (planned_flops() > 0) s += ", " + fmt("%.4g", planned_flops() / 1e9) + " GFLOP";
  s += "); estimated " + fmt("%.1f", estimated_s()) + " s of forward passes";
  if (ranks > 1)
    s += " on one rank, " + fmt("%.1f", estimated_wall_s()) + " s on " + std::to_string(ranks) + " ranks (each runs " +
         fmt("%.0f", 100 * rank_share()) + "% of the batches; memory below is per rank)";
  s += " (probe: " + std::to_string(probe_batch) +
       " windows, " + fmt("%.3f", live_batch_s) + " s live, " + fmt("%.3f", replay_batch_s) + " s replayed); memory about " +
       fmt("%.2f", double(memory_bytes()) / double(1 << 30)) + " GiB (weights " + fmt("%.2f", double(weights_bytes) / double(1 << 30)) +
       ", activations " + fmt("%.2f", double(run_state_bytes) / double(1 << 30)) + ", coefficient cache " +
       fmt("%.2f", double(cache_bytes) / double(1 << 30)) + ", kept live logits " +
       fmt("%.2f", double(kept_logits_bytes) / double(1 << 30)) + ")";
  return s;
}

nlohmann::ordered_json measured_json(const AuditPlan& plan, double seconds, double flops) {
  return {{"seconds", seconds},
          {"tokens_per_s", double(plan.planned_tokens()) / seconds},
          {"gflop_per_s", flops / 1e9 / seconds},
          {"estimate_ratio", plan.estimated_wall_s() / seconds}};
}

std::string measured_summary(const AuditPlan& plan, double seconds, double flops) {
  std::string s = "audit passes: " + fmt("%.1f", seconds) + " s (estimated " + fmt("%.1f", plan.estimated_wall_s()) + " s), " +
                  fmt("%.0f", double(plan.planned_tokens()) / seconds) + " tokens/s";
  if (flops > 0) s += ", " + fmt("%.1f", flops / 1e9 / seconds) + " GFLOP/s";
  return s;
}

}  // namespace fca
