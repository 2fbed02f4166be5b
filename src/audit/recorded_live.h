// The live side of exact replay, kept from the pass that recorded the cache. Stage 1 runs the model
// live over every evaluation batch to record its coefficients; exact replay then has to show that
// replaying them reproduces that live run's logits and NLL bit for bit (docs/audit.md). The
// recording pass's logits are the live logits the protocol means, so instead of running the live pass a
// second time, the rank that recorded a batch keeps its logits (poisoned before the pass, so they
// are the pass's own) and NLLs, and exact replay compares its replay against them: one live pass per
// evaluation window fewer (about 4.5% of the passes of a small audit).
//
// A batch without a kept entry runs the live pass again, as before: the cache was reused (another
// run recorded it), a distributed audit replays the batch on another rank than recorded it, or its
// logits would take the kept total over kBudgetBytes (large vocabularies and windows). A model whose
// logits stay in an adapter process keeps their SHA-256 instead, the form exact replay compares
// them in anyway. What the check then covers is the run that recorded the coefficients (for fca's
// families, the live pass with a recording coefficient source); where the pass runs again it is
// the live pass without recording. Both are "the live run" of the protocol, and both must equal the
// replay bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/auditable.h"

namespace fca {

class RecordedLiveRun {
 public:
  // The most logit bytes kept over all batches of a rank: beyond it, a batch reruns its live pass.
  static constexpr size_t kBudgetBytes = size_t(256) << 20;

  struct Batch {
    int windows = 0;                  // B
    std::vector<float> logits;        // [B, T, vocab]; empty when kept by digest
    std::string logits_sha256;        // models whose last_logits() is null (external adapters)
    std::vector<double> nll;          // [B]: the recording pass's per-window NLL
  };

  explicit RecordedLiveRun(size_t budget_bytes = kBudgetBytes) : budget_bytes_(budget_bytes) {}

  // What a cache pass over `windows` evaluation windows of T tokens in batches of `batch`, spread
  // over `ranks` ranks in rounds (work_split.h), will keep: the windows whose live pass exact replay
  // then skips, and the bytes each rank holds (at most the budget). For the plan.
  struct Estimate {
    int64_t windows = 0;
    size_t bytes_per_rank = 0;
  };
  static Estimate estimate(const AuditableModel& model, int windows, int T, int batch, int ranks,
                           size_t budget_bytes = kBudgetBytes);

  // Called right after the recording pass over evaluation windows [w0, w0 + B), whose logits were
  // poisoned before it; keeps that pass's logits (or their digest) and NLLs when they fit.
  void keep(const AuditableModel& model, int w0, int B, int T, const double* nll);
  // The kept batch starting at w0, if it has B windows; else null.
  const Batch* find(int w0, int B) const;
  // Frees every kept batch (once exact replay is done).
  void release();

 private:
  size_t budget_bytes_, kept_bytes_ = 0;
  std::map<int, Batch> batches_;  // by first window
};

}  // namespace fca
