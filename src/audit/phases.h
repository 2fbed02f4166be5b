// The phases of run_audit (audit.h), each a function with plain inputs and a plain result, so that
// each can be run and tested alone:
//   prepare_audit      windows, batch, manifest, provenance, the conditions that apply, the cache path;
//   plan_passes        the plan from a one-batch probe (all that --plan runs);
//   AuditInputs        the coefficient cache (written when absent), calibration profiles, conditions;
//   run_exact_replay   the cached coefficients replayed unchanged, batch by batch, against the live run;
//   probe_replay       the replay must depend on the coefficients it is handed;
//   run_conditions     every condition's replays, batch by batch;
//   audit_document     the statistics and audit.json;
//   write_audit_outputs  audit.json and windows.csv, atomically.
// Distribution (core/communicator.h) and the journal of finished work (journal.h) live in the
// replay phases, the only ones that split work over ranks or resume it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "audit/audit_options.h"
#include "audit/audit_kind.h"
#include "audit/cache.h"
#include "audit/conditions.h"
#include "audit/exact_replay.h"
#include "audit/journal.h"
#include "audit/plan.h"
#include "audit/replay_probe.h"
#include "core/communicator.h"
#include "core/json.h"
#include "core/progress.h"
#include "models/capabilities.h"

namespace fca {

// Phase 1: everything decided before any pass.
struct AuditSetup {
  AuditOptions options;  // as given, with the batch decided (never 0 after prepare_audit)
  int tokens = 0;        // T
  WindowSet eval, calib;
  std::optional<BatchChoice> batch_choice;  // how batch 0 was resolved (probe or journal); none when given
  std::string journal_path;
  CacheManifest manifest;
  nlohmann::ordered_json provenance;
  bool routing = false;                       // records with a discrete field (MoE, MoD, exit), not continuous coefficients
  // The audit's row of the records' kind (audit_kind.h): conditions, profiles, JSON.
  const AuditKindRow& kind() const { return audit_kind_row(manifest.shape.kind); }
  // Whether the condition of this name draws a new randomisation per repetition, in the kind's
  // table: what the plan counts before any condition exists (checked against each condition made).
  bool randomized(const std::string& name) const { return kind().is_randomized(name); }
  std::vector<std::string> conditions;        // to run, "correct" excluded (it is exact replay)
  std::vector<std::string> skipped;           // default conditions that do not apply to this model
  nlohmann::ordered_json skipped_reasons;     // {name: why}
  std::string cache_path;                     // "" for a plan without --out or --cache
  bool cache_reused = false;                  // the cache exists (as rank 0 sees it)
  int windows() const { return eval.count(); }
  nlohmann::ordered_json batch_choice_json() const;
};
AuditSetup prepare_audit(AuditableModel& model, const Corpus& corpus, const AuditOptions& options, const Communicator& comm);

// Phase 2: the plan (windows, tokens, FLOPs, time from a one-batch probe; plan.h).
AuditPlan plan_passes(AuditableModel& model, const AuditSetup& s, const Communicator& comm);

// Phase 3: the coefficient cache (written first when absent), the calibration profiles and the
// conditions over them. Not copyable or movable: the conditions refer to the cache and profiles.
struct AuditInputs {
  AuditInputs(AuditableModel& model, const AuditSetup& s, const Communicator& comm);
  AuditInputs(const AuditInputs&) = delete;
  AuditInputs& operator=(const AuditInputs&) = delete;
  // The recording pass's logits and NLLs of the evaluation batches this rank ran, when this run
  // wrote the cache (exact replay compares against them; recorded_live.h). Before `cache`, which
  // fills it.
  RecordedLiveRun recorded_live;
  CoefficientCache cache;
  // A cache written by another build (other instruction sets or flags) holds that build's rounding;
  // it is used only if exact replay reproduces its NLLs bit for bit.
  bool cache_from_other_build;
  CoefficientView evaluation;  // A, the cached evaluation coefficients
  // The calibration profiles of the records' kind, and the conditions' factory over them.
  std::unique_ptr<KindConditions> profiles;
  AuditRandomness randomness;
  std::vector<std::unique_ptr<Condition>> conditions;  // in the order of AuditSetup::conditions
};

// Per-window NLL of one condition: [reps][windows].
struct ConditionRun {
  std::string name;
  bool randomized = false;
  std::vector<std::vector<double>> nll;
  int64_t controller_evaluations = 0;
  // Families whose records change how much runs (RecordDependentCompute, models/capabilities.h): over every
  // replay of the condition, the GEMM FLOPs counted as they ran (null for correct, whose replay is
  // the exact replay) and by the records' formulas, and blocks run summed over tokens.
  std::optional<RecordCompute> compute;
  std::optional<double> counted_gemm_flops;
  double reused_prefix_gemm_flops = 0;  // what its replays did not run because they reused the kept prefix
  // Kinds whose records shorten tokens (AuditKindRow::shortened_tokens; exit depths), on the kind's
  // full-computation condition only (identity, FullDepth): of the tokens that ran fewer blocks in the
  // live records, how many have the same argmax there as with every block (docs/exit.md, exit_agreement).
  int64_t exit_agreeing = 0, exited = 0;
};

// The window batches (the units of work, the same on every rank: work_split.h), rank 0's journal
// of finished work, and the progress bar over both replay phases.
class ReplayUnits {
 public:
  ReplayUnits(const AuditSetup& s, const AuditInputs& in, const Communicator& comm);
  int count() const { return int(starts_.size()); }
  int first_window(int unit) const { return starts_[size_t(unit)]; }
  int windows(int unit) const;
  // The units whose record of `kind` the journal lacks: rank 0 reads them off, every rank gets them.
  std::vector<int> pending(const char* kind) const;
  // The journal's record of `kind` for a unit, or null (rank 0 only; null elsewhere).
  const nlohmann::json* recorded(const char* kind, int unit) const;
  void append(const nlohmann::json& record) { journal_->append(record); }
  // Deletes the journal (rank 0): after a failed check, or once the results are written.
  void remove_journal();
  void progress(int64_t windows_done, const std::string& phase);
  void finish_progress();
  const Communicator& comm() const { return comm_; }

 private:
  const Communicator& comm_;
  bool show_progress_;
  std::vector<int> starts_;
  int batch_, total_windows_;
  std::optional<AuditJournal> journal_;
  Progress bar_;
};

// Phase 4: exact replay. Returns the "correct" run (the replayed NLL of every window) with the merged
// comparison; throws Error (after removing the journal) when replay is not exact or evaluated the
// controller. `done` counts the windows finished, for the progress.
struct ExactReplayResult {
  ConditionRun correct;
  ExactReplay exact;
};
ExactReplayResult run_exact_replay(AuditableModel& model, const AuditSetup& s, const AuditInputs& in, ReplayUnits& units,
                                   int64_t& done);

// The calibration windows the replay sensitivity probe replays (replay_probe.h).
inline int probe_windows(const AuditSetup& s) { return std::min({kProbeWindows, s.options.batch, s.calib.count()}); }

// Phase 5: the replay sensitivity probe on rank 0; throws Error on every rank when it fails (unless
// allowed) or when it reached the controller.
ReplayProbe probe_replay(AuditableModel& model, const AuditSetup& s, const AuditInputs& in, ReplayUnits& units);

// Phase 6: every condition, window batch by window batch. `finished` is false when the test hook
// stop_after_batches stopped it.
struct ConditionResults {
  std::vector<ConditionRun> runs;  // in the order of the conditions
  int64_t prefix_reuses = 0;       // condition replays that reused block 0
  bool finished = true;
};
ConditionResults run_conditions(AuditableModel& model, const AuditSetup& s, const AuditInputs& in, ReplayUnits& units,
                                int64_t& done);

// Phase 7: the statistics of the runs ("correct" first) as the audit.json document.
nlohmann::ordered_json audit_document(const AuditableModel& model, const AuditSetup& s, const AuditInputs& in,
                                      const std::vector<ConditionRun>& runs, const ExactReplay& exact,
                                      const ReplayProbe& probe, const nlohmann::ordered_json& provenance);

// Phase 8: audit.json and windows.csv in the output folder, each written to a temporary name and renamed.
void write_audit_outputs(const AuditSetup& s, const nlohmann::ordered_json& document, const std::vector<ConditionRun>& runs);

}  // namespace fca
