#include "audit/audit.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "audit/phases.h"
#include "audit/plan.h"
#include "audit/work_split.h"
#include "core/error.h"
#include "core/exec_counters.h"
#include "core/file_io.h"
#include "models/record_kind.h"
#include "ops/onednn_matmul.h"
#include "ops/provenance.h"
#include "models/capabilities.h"

namespace fca {
namespace {

// The batch: a resumed journal's, else batch 0 chosen for throughput where the results do not
// depend on it (plan.h), else the one given; rank 0's on every rank (the units must agree).
void decide_batch(AuditableModel& model, AuditSetup& s, const Communicator& comm) {
  AuditOptions& o = s.options;
  if (o.batch < 0) throw Error("--batch must be 0 (chosen for throughput) or positive, found " + std::to_string(o.batch));
  const std::optional<int> journal_batch = o.plan_only ? std::nullopt : AuditJournal::recorded_batch(s.journal_path);
  if (journal_batch && (o.batch == 0 || results_batch_invariant(model))) {
    // Resuming: keep the batch the journal's records were made with (for a batch-invariant model a
    // different --batch would give the same results, but the records are per batch of windows).
    s.batch_choice = BatchChoice{*journal_batch, "resumed: the batch of " + s.journal_path, {}};
    o.batch = *journal_batch;
  } else if (o.batch == 0) {
    s.batch_choice = choose_batch(model, s.eval);  // on every rank at once: each probes under the others' load
    o.batch = s.batch_choice->batch;
  }
  if (comm.size() > 1) {
    std::string batch = std::to_string(o.batch);
    comm.broadcast(batch);
    o.batch = std::stoi(batch);
    if (s.batch_choice) s.batch_choice->batch = o.batch;
  }
  if (s.batch_choice && comm.root())
    std::fprintf(stderr, "audit batch: %d windows per pass (%s)\n", o.batch, s.batch_choice->reason.c_str());
  if (o.batch > model.max_batch()) model.set_max_batch(o.batch);
  if (o.batch > model.max_batch())
    throw Error("--batch " + std::to_string(o.batch) + " does not fit the model's run state of " +
                std::to_string(model.max_batch()) + " windows");
}

// The conditions to run: `correct` always (it is the baseline and the exact-replay pass). The
// kind's table (audit_kind.h) lists them; those that do not apply to this model are left out of the
// default list, with why, and refused when asked for; the model's own conditions (its switchable
// groups) follow the table's by default.
void select_conditions(const AuditableModel& model, AuditSetup& s) {
  const AuditOptions& o = s.options;
  const AuditKindRow& kind = s.kind();
  s.conditions = o.conditions.empty() ? kind.condition_names : o.conditions;
  s.skipped_reasons = nlohmann::ordered_json::object();
  for (const auto& [name, reason] : kind.skipped(model, model.make_coefficients(1, s.tokens).view())) {
    const bool listed = std::find(s.conditions.begin(), s.conditions.end(), name) != s.conditions.end();
    if (!o.conditions.empty()) {
      if (listed) throw Error("--conditions " + name + ": " + reason);
      continue;
    }
    s.conditions.erase(std::remove(s.conditions.begin(), s.conditions.end(), name), s.conditions.end());
    s.skipped.push_back(name);
    s.skipped_reasons[name] = reason;
  }
  if (o.conditions.empty() && kind.model_conditions != nullptr)
    for (const auto& name : kind.model_conditions(model)) s.conditions.push_back(name);
  s.conditions.erase(std::remove(s.conditions.begin(), s.conditions.end(), "correct"), s.conditions.end());
}

// What the cache must match, and what every result records.
void describe_run(const AuditableModel& model, const Corpus& corpus, const TextSplit& test, const TextSplit& valid,
                  AuditSetup& s) {
  CacheManifest& m = s.manifest;
  m.family = model.family();
  m.model_description = model.description();
  m.controller_setting = controller_setting_of(model);
  m.model_sha256 = model.content_hash();
  m.eval_split = test.path();
  m.eval_split_sha256 = test.content_hash();
  m.calib_split = valid.path();
  m.calib_split_sha256 = valid.content_hash();
  m.eval_windows = s.eval.indices;
  m.calib_windows = s.calib.indices;
  m.tokens = s.tokens;
  m.batch = s.options.batch;
  m.batch_invariant = results_batch_invariant(model);
  m.precision = matmul_precision_name(matmul_precision());
  m.shape = model.make_coefficients(1, s.tokens).shape();
  m.seed = s.options.seed;
  m.build = build_description();

  s.provenance = provenance_base();
  s.provenance["model"] = s.options.model_path;
  if (!s.options.adapter_command.empty()) s.provenance["adapter_command"] = s.options.adapter_command;
  s.provenance["model_sha256"] = model.content_hash();
  s.provenance["data"] = {{"dir", corpus.dir()},
                          {"eval_split", test.path()},
                          {"eval_split_sha256", test.content_hash()},
                          {"calib_split", valid.path()},
                          {"calib_split_sha256", valid.content_hash()}};
  s.provenance["seed"] = s.options.seed;
}

// Writes the cache when absent (every rank takes part), then opens it on this rank.
CoefficientCache cached_coefficients(AuditableModel& model, const AuditSetup& s, const Communicator& comm,
                                     RecordedLiveRun& recorded_live) {
  if (!s.cache_reused)
    write_coefficient_cache(s.cache_path, s.manifest, model, s.eval, s.calib, s.options.batch, s.options.progress,
                            s.provenance, comm, &recorded_live);
  return open_cache(s.cache_path, s.manifest, comm);
}

}  // namespace

nlohmann::ordered_json AuditSetup::batch_choice_json() const {
  return batch_choice ? batch_choice->to_json() : nlohmann::ordered_json{{"batch", options.batch}, {"reason", "given (--batch)"}};
}

AuditSetup prepare_audit(AuditableModel& model, const Corpus& corpus, const AuditOptions& options, const Communicator& comm) {
  AuditSetup s;
  AuditOptions& o = s.options = options;
  o.progress = o.progress && comm.root();
  for (const auto& [key, value] : o.family_settings) set_controller_setting(model, key, value);
  s.tokens = o.tokens > 0 ? o.tokens : model.max_tokens();
  const int T = s.tokens;
  if (T > model.max_tokens())
    throw Error("--seq " + std::to_string(T) + " is longer than the model's " + std::to_string(model.max_tokens()) + " positions");
  if (o.reps < 2) throw Error("--reps must be at least 2 (the Monte-Carlo SE needs two randomisations), found " + std::to_string(o.reps));
  if (o.out_dir.empty() && !o.plan_only) throw Error("--out is required (the output folder; only --plan runs without one)");
  const TextSplit& test = corpus.split("test");
  const TextSplit& valid = corpus.split("valid");
  s.eval = make_windows(model.tokenize(test.name(), {test.bytes(), test.size()}), test, T, o.eval_windows);
  s.calib = make_windows(model.tokenize(valid.name(), {valid.bytes(), valid.size()}), valid, T, o.calib_windows);
  s.journal_path = o.out_dir + "/journal.jsonl";
  decide_batch(model, s, comm);
  describe_run(model, corpus, test, valid, s);
  s.routing = record_kind_row(s.manifest.shape.kind).discrete;
  select_conditions(model, s);
  if (!o.plan_only && comm.root()) ensure_folder(o.out_dir, "--out");
  // A plan without --out or --cache knows no cache: it plans the live passes that write one.
  s.cache_path = !o.cache_path.empty() ? o.cache_path : o.out_dir.empty() ? "" : o.out_dir + "/cache.safetensors";
  std::string cache_found = !s.cache_path.empty() && file_exists(s.cache_path) ? "1" : "0";
  comm.broadcast(cache_found);  // as rank 0, which writes it, sees it
  s.cache_reused = cache_found == "1";
  return s;
}

AuditPlan plan_passes(AuditableModel& model, const AuditSetup& s, const Communicator& comm) {
  const int W = s.windows(), batch = s.options.batch;
  // Exact replay's replayed half, and the sensitivity probe's replays of its calibration windows:
  // once as cached, once per probe group.
  const int64_t probe_replays = 1 + int64_t(probe_groups(model.make_coefficients(1, s.tokens).view()).size());
  int64_t replay_windows = W + probe_replays * probe_windows(s);
  for (const auto& n : s.conditions) replay_windows += int64_t(W) * (s.randomized(n) ? s.options.reps : 1);
  // The cache's recording pass over D and C, unless reused; exact replay's own live pass over the
  // windows whose recording pass is not kept for it (recorded_live.h).
  const RecordedLiveRun::Estimate kept =
      s.cache_reused ? RecordedLiveRun::Estimate{} : RecordedLiveRun::estimate(model, W, s.tokens, batch, comm.size());
  // Where the recording pass is kept, each rank also runs one batch's plain live pass to check it.
  const int64_t recording_checks = kept.windows > 0 ? int64_t(std::min(batch, W)) * std::min<int64_t>(comm.size(), (W + batch - 1) / batch) : 0;
  const int64_t live_windows = (s.cache_reused ? 0 : int64_t(W) + s.calib.count()) + (W - kept.windows) + recording_checks;
  AuditPlan plan = plan_audit(model, s.eval, batch, live_windows, replay_windows, int64_t(W) + s.calib.count());
  plan.ranks = comm.size();
  plan.kept_logits_bytes = kept.bytes_per_rank;
  if (comm.root()) std::fprintf(stderr, "%s\n", plan.summary().c_str());
  return plan;
}

AuditInputs::AuditInputs(AuditableModel& model, const AuditSetup& s, const Communicator& comm)
    : cache(cached_coefficients(model, s, comm, recorded_live)),
      cache_from_other_build(cache.manifest().build != s.manifest.build),
      evaluation(cache.evaluation()),
      profiles(s.kind().prepare(model, cache.calibration())),
      randomness(s.options.seed, s.windows(), s.tokens, s.options.reps, s.options.joint_token_shuffle) {
  for (const auto& n : s.conditions) {
    conditions.push_back(profiles->make(n, evaluation, randomness));
    if (conditions.back()->randomized() != s.randomized(n))
      throw Error("internal error: condition " + n + " and the plan disagree on whether it is randomized");
  }
}

nlohmann::ordered_json run_audit(AuditableModel& model, const Corpus& corpus, const AuditOptions& options) {
  // A distributed audit (docs/cluster.md): every rank runs this function; rank 0 keeps the journal,
  // gathers every batch's results, computes the statistics and writes the outputs.
  const Communicator& comm = options.communicator != nullptr ? *options.communicator : single_process();
  const AuditSetup s = prepare_audit(model, corpus, options, comm);
  const AuditOptions& o = s.options;

  // The plan, before any pass; --plan stops here and writes nothing.
  const AuditPlan plan = plan_passes(model, s, comm);
  if (o.plan_only)
    return {{"plan", plan.to_json()}, {"batch_choice", s.batch_choice_json()}, {"conditions", s.conditions},
            {"cache_reused", s.cache_reused}};

  ExecCounters pass_counters;  // every pass from here on: the cache, the replays, the probe
  const auto passes_start = std::chrono::steady_clock::now();
  std::optional<CountingScope> counting(std::in_place, pass_counters);
  AuditInputs in(model, s, comm);
  ReplayUnits units(s, in, comm);
  int64_t done = 0;
  ExactReplayResult exact = run_exact_replay(model, s, in, units, done);
  in.recorded_live.release();  // only exact replay reads it
  const ReplayProbe probe = probe_replay(model, s, in, units);
  ConditionResults conditions = run_conditions(model, s, in, units, done);
  if (!conditions.finished) return {{"stopped_after_batches", o.stop_after_batches}};
  std::vector<ConditionRun> runs;
  if (const auto* compute = capability<RecordDependentCompute>(model))
    exact.correct.compute = compute->record_compute(in.evaluation, in.evaluation.windows);  // the cache, unchanged
  runs.push_back(std::move(exact.correct));
  for (auto& run : conditions.runs) runs.push_back(std::move(run));
  for (const auto& run : runs)
    if (run.controller_evaluations != 0)
      throw Error("the controller was evaluated " + std::to_string(run.controller_evaluations) + " times while replaying " +
                  run.name + "; a frozen-controller condition must never reach it");
  units.finish_progress();
  counting.reset();
  const double passes_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - passes_start).count();
  double pass_flops = 0;  // counted on every rank, summed in rank order
  for (double f : comm.all_gather(double(pass_counters.gemm_flops.load()) + double(pass_counters.controller_flops.load()) +
                                  double(pass_counters.mixing_flops.load())))
    pass_flops += f;
  if (!comm.root()) return {};  // rank 0 has every result; the statistics and outputs are its own
  std::fprintf(stderr, "%s\n", measured_summary(plan, passes_s, pass_flops).c_str());
  // The plan and what the passes took: run facts, so they live in the provenance (like its
  // timestamp), never in the results, which stay bitwise reproducible.
  nlohmann::ordered_json provenance = s.provenance;
  provenance["run"] = {{"plan", plan.to_json()},
                       {"measured", measured_json(plan, passes_s, pass_flops)},
                       {"prefix_reuse", {{"enabled", o.prefix_reuse}, {"replays_reusing_block_0", conditions.prefix_reuses}}},
                       // Which live run exact replay compared with, batch by batch (recorded_live.h):
                       // a run fact (a reused cache or another layout changes it), not a result.
                       {"exact_replay_live_pass",
                        {{"recording_pass", exact.exact.live_from_recording},
                         {"rerun", exact.exact.batches - exact.exact.live_from_recording},
                         {"recording_pass_checked_against_plain_live", exact.exact.recording_checks}}}};
  provenance["run"]["ranks"] = comm.size();
  provenance["run"]["batch_choice"] = s.batch_choice_json();

  const nlohmann::ordered_json document = audit_document(model, s, in, runs, exact.exact, probe, provenance);
  write_audit_outputs(s, document, runs);
  units.remove_journal();  // everything it held is in the results now
  return document;
}

}  // namespace fca
