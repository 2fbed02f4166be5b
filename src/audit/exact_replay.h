// Exact replay (docs/audit.md, "Stage 2"): the live run and the replay of its cached coefficients,
// unchanged, side by side, one window batch at a time. "Exact" means bit patterns: a difference of
// NaN or of -0 against +0 is a difference, and a non-finite logit or NLL in either pass fails the
// check whatever the tolerance. Batches are checked independently (on whichever rank runs them)
// and merged; the merge is exact (maxima and counts), so the result does not depend on the order.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "audit/cache.h"
#include "audit/recorded_live.h"
#include "core/json.h"
#include "models/auditable.h"

namespace fca {

struct ExactReplay {
  double max_abs_delta_logit = 0, max_abs_delta_nll = 0, max_abs_delta_nll_cache = 0;  // over finite pairs
  int64_t differing_logits = 0;       // elements whose bit pattern differs
  int64_t differing_nll_windows = 0;  // windows whose replayed NLL differs in bits from the live or cached one
  int64_t non_finite = 0;             // NaN or infinite logits and NLLs, either pass
  int64_t controller_evaluations = 0;
  // Models whose logits stay in an adapter process are compared by the SHA-256 of the logits bytes:
  // equal digests mean bitwise-equal logits (max |delta logit| 0); any other digest is a failure.
  bool by_digest = false;
  int digest_mismatches = 0, batches = 0;
  // Batches compared against the pass that recorded the cache (recorded_live.h); the others ran
  // their live pass again.
  int live_from_recording = 0;
  // The recording pass is a live pass with a recording coefficient source; that it equals the plain
  // live pass (no recording) is checked in every run, not assumed: the first batch each rank
  // compares with its recording pass also runs the plain live pass, and the two must agree as the
  // replay must (bitwise at tolerance 0). The figures of that comparison:
  int recording_checks = 0;                      // batches whose recording pass met a plain live pass
  int64_t recording_differing_logits = 0;        // bits (by digest: 1 per batch whose digests differ)
  int64_t recording_differing_nll_windows = 0;
  double recording_max_abs_delta = 0;            // logits and NLLs, over finite pairs

  bool passed(double tolerance) const;
  void merge(const ExactReplay& batch);
  // The figures and the verdict passed(tolerance) they give, as audit.json's "exact_replay".
  nlohmann::ordered_json to_json(double tolerance) const;
  // Why it failed, for the error that stops the audit.
  std::string failure(double tolerance) const;
};

// Windows [w0, w0 + B) replayed from the cache's coefficients A and compared with their live run:
// `recorded` (the recording pass's logits and NLLs, kept by the cache phase) when given, else a live
// pass run here first. With `recorded` and check_recording, the plain live pass runs too and the
// recording pass is compared with it (ExactReplay::recording_*). Their replayed NLLs go to
// replayed_nll[0 .. B).
ExactReplay exact_replay_batch(AuditableModel& model, const WindowSet& eval, const CoefficientView& A,
                               const std::vector<double>& cached_nll, int w0, int B, double* replayed_nll,
                               const RecordedLiveRun::Batch* recorded = nullptr, bool check_recording = false);

// One batch's check as a journal record (journal.h) {kind "exact_replay", w0, B, ..., nll}, and back.
nlohmann::json exact_replay_record(const ExactReplay& r, int w0, int B, const double* replayed_nll);
ExactReplay exact_replay_from_record(const nlohmann::json& record, int B, double* replayed_nll, const std::string& where);

}  // namespace fca
