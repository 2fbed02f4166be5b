// The audit's plan, printed before it starts and recorded in audit.json's provenance: how many
// windows it will run live and replayed, how many tokens and FLOPs that is, and how long it should
// take, from a probe of one live and one replayed batch on this machine; and, at the end, what it
// measured (wall time, tokens/s, GFLOP/s) beside it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "audit/cache.h"
#include "core/json.h"
#include "models/auditable.h"

namespace fca {

struct AuditPlan {
  int64_t live_windows = 0;    // the cache pass (unless reused) and the live half of exact replay
  int64_t replay_windows = 0;  // the replayed half of exact replay and every condition and repetition
  int tokens = 0;              // T
  int probe_batch = 0;         // windows in each probe pass
  double live_batch_s = 0, replay_batch_s = 0;          // probe wall time per batch
  double live_batch_flops = 0, replay_batch_flops = 0;  // counted (0 for an external model)
  // Memory the audit holds at its peak, estimated from its parts: the weights as fca holds them
  // (F32, with the packed copy fca's families keep for the GEMM: ops/gemm.h; 0 for an external model,
  // whose weights live in its adapter), the run state (activations of
  // one batch), the coefficient cache of the evaluation and calibration windows, and the recording
  // pass's logits that exact replay compares with (audit/recorded_live.h; this rank's share).
  size_t weights_bytes = 0, run_state_bytes = 0, cache_bytes = 0, kept_logits_bytes = 0;
  // Ranks of a distributed audit: each runs every ranks-th window batch of every phase, in rounds
  // (audit/work_split.h), so its share of the passes is ceil(batches / ranks) of the batches. The
  // memory figures are per rank (on one node, mapped weights and the mapped cache are shared).
  int ranks = 1;
  int64_t eval_windows = 0, calib_windows = 0;

  size_t memory_bytes() const { return weights_bytes + run_state_bytes + cache_bytes + kept_logits_bytes; }

  int64_t planned_tokens() const { return (live_windows + replay_windows) * tokens; }
  double estimated_s() const;           // the whole audit's passes on one rank
  double estimated_wall_s() const;      // the slowest rank's share, on `ranks` ranks
  double rank_share() const;            // that share of the passes
  double planned_flops() const;
  nlohmann::ordered_json to_json() const;
  std::string summary() const;  // one line for the terminal
};

// The batch of an audit run with batch 0 ("auto"). For a batch-invariant model (whose results do
// not depend on the batch) it is the candidate among 1, 2, 4, 8, 16 (at most W, and whose run
// state stays within kBatchMemoryBudget) with the least time per window in the fastest of its timed
// live passes; otherwise kFixedBatch. The model's run state is left sized for the choice. Facts
// about this run, recorded in provenance.run.batch_choice.
//
// How the candidates are timed (probe_batch_candidates): first a sweep in increasing order, each
// candidate after an untimed pass at its size, which stops after a timed pass longer than
// kBatchProbeStopS (larger batches buy little once a pass is that long: its GEMMs already have
// thousands of rows); then, where more than one candidate was swept, one more round that times
// each of them again (at the largest one's run state), so that every candidate has kBatchProbeSamples timed passes.
// Why the fastest of two passes: one timed pass per candidate is as noisy as the machine, and the
// noise of a shared machine is mostly one-sided (a neighbour takes time, never gives it), so the
// faster pass is closer to the candidate's own speed and one slow moment does not decide the batch
// of the whole audit. On a 2-core Zen 4 the single-pass probe chose 1, 4 and 16 windows for the
// same MUDD audit in three runs, and whole audits at batch 1 took 6.2-7.3 s against 4.7-5.7 s at
// batch 8 (three rounds alternating every batch). More rounds cost more than they buy: each is 1-2%
// of such an audit, and batches 4 to 16 differ by less than the machine's noise (docs/audit.md).
inline constexpr size_t kBatchMemoryBudget = size_t(2) << 30;
inline constexpr double kBatchProbeStopS = 0.5;
inline constexpr int kBatchProbeSamples = 2;
inline constexpr int kFixedBatch = 8;
struct BatchChoice {
  int batch = kFixedBatch;
  std::string reason;
  // (candidate, seconds per window in its fastest timed pass), and the timed passes of each candidate.
  std::vector<std::pair<int, double>> seconds_per_window;
  int samples = 0;
  nlohmann::ordered_json to_json() const;
};
BatchChoice choose_batch(AuditableModel& model, const WindowSet& eval);

// Whether this process's audit results are independent of the batch: the model's own property
// (AuditableModel::batch_invariant) in the fp32 precision only, since oneDNN's bf16 products
// block differently for different M (ops/onednn_matmul.h).
bool results_batch_invariant(const AuditableModel& model);

// The probe above on any timing source: prepare(b) readies a pass of b windows (sizes the run state,
// runs it once untimed), measure(b) times one pass of b windows and returns its seconds. Candidates
// in increasing order; the choice's `reason` is left to the caller.
BatchChoice probe_batch_candidates(const std::vector<int>& candidates, const std::function<void(int)>& prepare,
                                   const std::function<double(int)>& measure);

// After an untimed one-window live pass (warm-up), times one live pass (recording its coefficients) and one replay of them over the first
// min(batch, W) evaluation windows, with the execution counters installed.
// cached_windows: evaluation + calibration windows whose coefficients the cache holds.
AuditPlan plan_audit(AuditableModel& model, const WindowSet& eval, int batch, int64_t live_windows, int64_t replay_windows,
                     int64_t cached_windows);

// What the audit's passes took: `flops` counted over all of them.
nlohmann::ordered_json measured_json(const AuditPlan& plan, double seconds, double flops);
std::string measured_summary(const AuditPlan& plan, double seconds, double flops);

}  // namespace fca
