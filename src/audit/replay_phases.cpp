// The replay phases of the audit (phases.h): exact replay, the sensitivity probe and the conditions,
// each split over the ranks by window batch and resumable from rank 0's journal.
#include <algorithm>
#include <cstdio>

#include "audit/phases.h"


#include "core/exec_counters.h"
#include "audit/work_split.h"
#include "core/error.h"
#include "ops/provenance.h"
#include "models/capabilities.h"

namespace fca {
namespace {

// Windows the two replay phases run, for the progress bar.
int64_t replay_total(const AuditSetup& s, const AuditInputs& in) {
  int64_t total = s.windows();
  for (const auto& c : in.conditions) total += int64_t(s.windows()) * (c->randomized() ? s.options.reps : 1);
  return total;
}

// What a journal must have been written for: the cache manifest (less the batch, which has a header
// of its own: the records are per batch), the conditions, repetitions, tolerance and fca version.
nlohmann::ordered_json journal_identity(const AuditSetup& s) {
  nlohmann::ordered_json identity = s.manifest.to_json();
  identity.erase("batch");
  identity["conditions"] = s.conditions;
  identity["reps"] = s.options.reps;
  identity["joint_token_shuffle"] = s.options.joint_token_shuffle;
  identity["replay_tolerance"] = s.options.replay_tolerance;
  identity["fca"] = fca_version_string();
  return identity;
}

// Rank 0's verdict on every rank: all stop together, the journal removed (a failed check leaves no
// records to resume from).
void stop_on_verdict(std::string verdict, ReplayUnits& units) {
  units.comm().broadcast(verdict);
  if (verdict.empty()) return;
  units.remove_journal();
  throw Error(verdict);
}

// Why exact replay does not count (empty: it passed), from the merged comparison.
std::string exact_replay_verdict(const AuditSetup& s, const AuditInputs& in, const ExactReplay& exact) {
  const double tolerance = s.options.replay_tolerance;
  if (exact.by_digest && tolerance > 0)
    return "--replay-tolerance needs the logits' values, and this model gives only their SHA-256 (an external "
           "adapter): its replay must be bitwise (tolerance 0)";
  if (!exact.passed(tolerance)) {
    std::string why = "exact replay failed: replaying the cached coefficients unchanged differs from the live run (" +
                      exact.failure(tolerance) + "); no intervention counts until replay is exact";
    if (in.cache_from_other_build)
      why += ". The cache " + s.cache_path + " was written by another build (" +
             (in.cache.manifest().build.empty() ? std::string("unrecorded") : in.cache.manifest().build) + "; this one is " +
             s.manifest.build + "): delete it to rebuild it here";
    return why;
  }
  if (exact.controller_evaluations != 0)
    return "the controller was evaluated " + std::to_string(exact.controller_evaluations) + " times during replay";
  return {};
}

// One window batch of every condition and randomisation in turn, so that the replays of the batch
// share what precedes the first coefficient (prefix reuse). The record: [condition][rep] NLL bit
// patterns of its windows, the controller evaluations per condition, the replays that reused block 0.
nlohmann::json condition_batch(AuditableModel& model, const AuditSetup& s, const AuditInputs& in, int w0, int B) {
  const int T = s.tokens;
  const int64_t off = int64_t(w0) * T;
  const int64_t reuses_before = model.prefix_reuses();
  nlohmann::json record = {{"kind", "batch"}, {"w0", w0}, {"B", B}, {"nll", nlohmann::json::array()},
                           {"controller_evaluations", nlohmann::json::array()}};
  CoefficientTensor batch = model.make_coefficients(B, T);
  std::vector<double> nll(static_cast<size_t>(B));
  const ExecCounters* counters = exec_counters();
  const RecordDependentCompute* computed = capability<RecordDependentCompute>(model);
  if (computed) record["compute"] = nlohmann::json::array();
  // Kinds whose records shorten tokens (exit depths): the argmax of the unchanged records' replay
  // (bitwise the live pass), to compare with the full computation's (identity) on the tokens the
  // live records shortened (exit agreement).
  const AuditKindRow& kind = s.kind();
  const bool exits = kind.shortened_tokens != nullptr;
  const int V = model.vocab();
  auto argmax = [&](const float* logits) {
    std::vector<int32_t> best(size_t(B) * T, 0);
    for (int64_t n = 0; n < int64_t(B) * T; ++n) {
      const float* row = logits + n * V;
      for (int v = 1; v < V; ++v)
        if (row[v] > row[best[size_t(n)]]) best[size_t(n)] = v;
    }
    return best;
  };
  std::vector<int32_t> live_argmax;
  std::vector<bool> shortened;
  if (exits) {
    for (int b = 0; b < B; ++b) {
      batch.copy_window(b, in.evaluation, w0 + b);
      for (bool short_token : kind.shortened_tokens(in.evaluation, w0 + b)) shortened.push_back(short_token);
    }
    model.run_replay(s.eval.inputs.data() + off, s.eval.targets.data() + off, B, T, batch, nll.data());
    live_argmax = argmax(model.last_logits());
  }
  for (const auto& c : in.conditions) {
    nlohmann::json reps = nlohmann::json::array();
    int64_t condition_evaluations = 0;
    double counted = 0, reused = 0, formula = 0;
    int64_t token_blocks = 0, tokens = 0;
    for (int r = 0; r < (c->randomized() ? s.options.reps : 1); ++r) {
      for (int b = 0; b < B; ++b) c->coefficients(w0 + b, r, batch, b);
      const int64_t evaluations = model.replay_controller_evaluations();
      const double gemm_before = counters != nullptr ? double(counters->gemm_flops.load()) : 0.0;
      const int64_t reuses = model.prefix_reuses();
      model.run_replay(s.eval.inputs.data() + off, s.eval.targets.data() + off, B, T, batch, nll.data());
      const bool reused_prefix = model.prefix_reuses() > reuses;
      condition_evaluations += model.replay_controller_evaluations() - evaluations;
      reps.push_back(doubles_to_bits(nll.data(), size_t(B)));
      if (exits && kind.full_computation_condition != nullptr && c->name() == kind.full_computation_condition) {
        const std::vector<int32_t> full = argmax(model.last_logits());
        int64_t agreeing = 0, exited = 0;
        for (size_t n = 0; n < full.size(); ++n)
          if (shortened[n]) ++exited, agreeing += full[n] == live_argmax[n];
        record["exit_agreement"] = {agreeing, exited};
      }
      if (computed) {
        const RecordCompute f = computed->record_compute(batch.view(), B);
        counted += counters != nullptr ? double(counters->gemm_flops.load()) - gemm_before : 0.0;
        reused += reused_prefix ? f.prefix_gemm_flops : 0.0;
        formula += f.gemm_flops;
        token_blocks += f.token_blocks;
        tokens += f.tokens;
      }
    }
    record["nll"].push_back(std::move(reps));
    record["controller_evaluations"].push_back(condition_evaluations);
    if (computed)
      record["compute"].push_back({{"counted_gemm_flops", counted}, {"reused_prefix_gemm_flops", reused}, {"record_gemm_flops", formula},
                                   {"token_blocks", token_blocks}, {"tokens", tokens}});
  }
  record["prefix_reuses"] = model.prefix_reuses() - reuses_before;
  return record;
}

}  // namespace

ReplayUnits::ReplayUnits(const AuditSetup& s, const AuditInputs& in, const Communicator& comm)
    : comm_(comm),
      show_progress_(s.options.progress),
      starts_(batch_starts(s.windows(), s.options.batch)),
      batch_(s.options.batch),
      total_windows_(s.windows()),
      bar_("audit replay", replay_total(s, in), "window") {
  if (comm.root()) {
    journal_.emplace(s.journal_path, journal_identity(s), s.options.batch);
    if (journal_->resumed_records() > 0)
      std::fprintf(stderr, "audit: resuming from %s (%d finished records)\n", s.journal_path.c_str(), journal_->resumed_records());
  }
}

int ReplayUnits::windows(int unit) const { return std::min(batch_, total_windows_ - first_window(unit)); }

std::vector<int> ReplayUnits::pending(const char* kind) const {
  std::vector<int> units;
  if (comm_.root())
    for (int u = 0; u < count(); ++u)
      if (journal_->find(kind, first_window(u)) == nullptr) units.push_back(u);
  std::string bytes = encode_ints(units);
  comm_.broadcast(bytes);
  return decode_ints(bytes);
}

const nlohmann::json* ReplayUnits::recorded(const char* kind, int unit) const {
  return comm_.root() ? journal_->find(kind, first_window(unit)) : nullptr;
}

void ReplayUnits::remove_journal() {
  if (comm_.root()) journal_->remove();
}

void ReplayUnits::progress(int64_t windows_done, const std::string& phase) {
  if (show_progress_) bar_.update(windows_done, phase);
}

void ReplayUnits::finish_progress() {
  if (show_progress_) bar_.finish();
}

ExactReplayResult run_exact_replay(AuditableModel& model, const AuditSetup& s, const AuditInputs& in, ReplayUnits& units,
                                   int64_t& done) {
  ExactReplayResult r;
  r.correct.name = "correct";
  r.correct.nll.assign(1, std::vector<double>(size_t(s.windows())));
  auto apply = [&](int unit, const nlohmann::json& record) {
    const int w0 = units.first_window(unit);
    r.exact.merge(exact_replay_from_record(record, units.windows(unit), r.correct.nll[0].data() + w0,
                                           s.journal_path + " exact replay at window " + std::to_string(w0)));
    done += units.windows(unit);
  };
  const std::vector<int> pending = units.pending("exact_replay");
  for (int u = 0; u < units.count(); ++u)
    if (const nlohmann::json* rec = units.recorded("exact_replay", u)) apply(u, *rec);
  bool recording_checked = false;  // this rank's recording pass met a plain live pass (exact_replay.h)
  run_units(
      units.comm(), pending,
      [&](int unit) {
        const int w0 = units.first_window(unit), B = units.windows(unit);
        std::vector<double> nll(static_cast<size_t>(B));
        const RecordedLiveRun::Batch* recorded = in.recorded_live.find(w0, B);
        const bool check_recording = recorded != nullptr && !recording_checked;
        recording_checked = recording_checked || check_recording;
        const ExactReplay batch = exact_replay_batch(model, s.eval, in.evaluation, in.cache.evaluation_nll(), w0, B, nll.data(),
                                                     recorded, check_recording);
        return exact_replay_record(batch, w0, B, nll.data()).dump();
      },
      [&](int unit, std::string& result) {
        const nlohmann::json record = nlohmann::json::parse(result);
        apply(unit, record);
        units.append(record);
        units.progress(done, "exact replay");
        return true;
      });
  r.correct.controller_evaluations = r.exact.controller_evaluations;
  stop_on_verdict(units.comm().root() ? exact_replay_verdict(s, in, r.exact) : std::string(), units);
  return r;
}

ReplayProbe probe_replay(AuditableModel& model, const AuditSetup& s, const AuditInputs& in, ReplayUnits& units) {
  ReplayProbe probe;
  std::string verdict;
  if (units.comm().root()) {
    try {
      probe = probe_replay_sensitivity(model, s.calib, in.cache.calibration(), 0, probe_windows(s));
      if (probe.controller_evaluations != 0)
        verdict = "the controller was evaluated " + std::to_string(probe.controller_evaluations) +
                  " times during the replay sensitivity probe";
      else if (!probe.sensitive() && !s.options.allow_insensitive_replay)
        verdict = probe.failure();
      else if (!probe.sensitive())
        std::fprintf(stderr, "audit: WARNING: %s; auditing anyway (--allow-insensitive-replay)\n", probe.failure().c_str());
    } catch (const Error& e) {  // an adapter's answer refused during the probe: stop as any failed check does
      verdict = std::string("replay sensitivity probe: ") + e.what();
    }
  }
  stop_on_verdict(verdict, units);
  return probe;
}

ConditionResults run_conditions(AuditableModel& model, const AuditSetup& s, const AuditInputs& in, ReplayUnits& units,
                                int64_t& done) {
  ConditionResults out;
  const int W = s.windows();
  for (const auto& c : in.conditions) {
    ConditionRun run;
    run.name = c->name();
    run.randomized = c->randomized();
    run.nll.assign(size_t(run.randomized ? s.options.reps : 1), std::vector<double>(size_t(W)));
    out.runs.push_back(std::move(run));
  }
  int appended_batches = 0;
  auto apply = [&](int unit, const nlohmann::json& rec) {
    const int w0 = units.first_window(unit), B = units.windows(unit);
    const std::string where = s.journal_path + " batch at window " + std::to_string(w0);
    if (rec.value("B", 0) != B || !rec["nll"].is_array() || rec["nll"].size() != in.conditions.size())
      throw Error(where + ": the record does not match this audit's conditions and batch");
    for (size_t ci = 0; ci < in.conditions.size(); ++ci) {
      ConditionRun& run = out.runs[ci];
      const nlohmann::json& reps = rec["nll"][ci];
      if (!reps.is_array() || reps.size() != run.nll.size()) throw Error(where + ": repetitions of " + run.name + " do not match");
      for (size_t r = 0; r < run.nll.size(); ++r) bits_to_doubles(reps[r], run.nll[r].data() + w0, size_t(B), where);
      run.controller_evaluations += rec["controller_evaluations"][ci].get<int64_t>();
      const char* full = s.kind().full_computation_condition;
      if (full != nullptr && run.name == full && rec.contains("exit_agreement")) {
        run.exit_agreeing += rec["exit_agreement"][0].get<int64_t>();
        run.exited += rec["exit_agreement"][1].get<int64_t>();
      }
      if (rec.contains("compute")) {
        const nlohmann::json& f = rec["compute"][ci];
        if (!run.compute) run.compute = RecordCompute{};
        run.compute->gemm_flops += f["record_gemm_flops"].get<double>();
        run.compute->token_blocks += f["token_blocks"].get<int64_t>();
        run.compute->tokens += f["tokens"].get<int64_t>();
        run.counted_gemm_flops = run.counted_gemm_flops.value_or(0.0) + f["counted_gemm_flops"].get<double>();
        run.reused_prefix_gemm_flops += f.value("reused_prefix_gemm_flops", 0.0);
      }
      done += int64_t(B) * int64_t(run.nll.size());
    }
    out.prefix_reuses += rec["prefix_reuses"].get<int64_t>();
  };
  const std::vector<int> pending = units.pending("batch");
  for (int u = 0; u < units.count(); ++u)
    if (const nlohmann::json* rec = units.recorded("batch", u)) apply(u, *rec);
  model.set_prefix_reuse(s.options.prefix_reuse);
  out.finished = run_units(
      units.comm(), pending,
      [&](int unit) { return condition_batch(model, s, in, units.first_window(unit), units.windows(unit)).dump(); },
      [&](int unit, std::string& result) {
        const nlohmann::json record = nlohmann::json::parse(result);
        apply(unit, record);
        units.append(record);
        units.progress(done, "conditions");
        // Tests: stop here, as an audit killed after this batch would.
        return !(s.options.stop_after_batches > 0 && ++appended_batches == s.options.stop_after_batches);
      });
  model.set_prefix_reuse(false);
  return out;
}

}  // namespace fca
