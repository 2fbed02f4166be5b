#include "audit/audit.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "audit/cache.h"
#include "audit/conditions.h"
#include "audit/exact_replay.h"
#include "audit/journal.h"
#include "audit/plan.h"
#include "audit/replay_probe.h"
#include "audit/routing_conditions.h"
#include "audit/statistics.h"
#include "audit/work_split.h"
#include "core/communicator.h"
#include "core/error.h"
#include "core/exec_counters.h"
#include "core/file_io.h"
#include "core/progress.h"
#include "core/provenance.h"
#include "core/rng.h"
#include "core/undefined_statistic.h"
#include "models/routing_record.h"
#include "report/audit_markdown.h"

namespace fca {
namespace {

// Evenly spaced windows of T+1 tokens (targets shifted by one), as the spec lays them out.
WindowSet make_windows(const std::vector<int32_t>& tokens, const TextSplit& split, int T, int wanted) {
  if (tokens.size() < size_t(T) + 1)
    throw Error(split.path() + ": the " + split.name() + " split has " + std::to_string(tokens.size()) +
                " tokens, shorter than one window of T+1 = " + std::to_string(T + 1));
  const int64_t available = int64_t((tokens.size() - 1) / size_t(T));
  WindowSet w;
  w.tokens = T;
  w.indices = evenly_spaced_windows(available, wanted, split.name());
  for (int64_t idx : w.indices) {
    const int32_t* p = tokens.data() + idx * T;
    w.inputs.insert(w.inputs.end(), p, p + T);
    w.targets.insert(w.targets.end(), p + 1, p + T + 1);
  }
  return w;
}

// Per-window NLL of one condition: [reps][windows].
struct ConditionRun {
  std::string name;
  bool randomized = false;
  std::vector<std::vector<double>> nll;
  int64_t controller_evaluations = 0;
};

nlohmann::ordered_json interval_json(const Interval& i) { return nlohmann::ordered_json::array({i.low, i.high}); }

}  // namespace

nlohmann::ordered_json run_audit(AuditableModel& model, const Corpus& corpus, const AuditOptions& options) {
  AuditOptions o = options;
  // A distributed audit (docs/cluster.md): every rank runs this function; rank 0 keeps the journal,
  // gathers every batch's results, computes the statistics and writes the outputs.
  const Communicator& comm = o.communicator != nullptr ? *o.communicator : single_process();
  o.progress = o.progress && comm.root();
  const int T = o.tokens > 0 ? o.tokens : model.max_tokens();
  if (T > model.max_tokens())
    throw Error("--seq " + std::to_string(T) + " is longer than the model's " + std::to_string(model.max_tokens()) + " positions");
  if (o.reps < 2) throw Error("--reps must be at least 2 (the Monte-Carlo SE needs two randomisations), found " + std::to_string(o.reps));
  if (o.out_dir.empty() && !o.plan_only) throw Error("--out is required (the output folder; only --plan runs without one)");
  const TextSplit& test = corpus.split("test");
  const TextSplit& valid = corpus.split("valid");
  const WindowSet eval = make_windows(model.tokenize(test), test, T, o.eval_windows);
  const WindowSet calib = make_windows(model.tokenize(valid), valid, T, o.calib_windows);
  const int W = eval.count();
  if (o.batch < 0) throw Error("--batch must be 0 (chosen for throughput) or positive, found " + std::to_string(o.batch));
  // Batch 0: chosen for throughput where the results do not depend on it (plan.h).
  std::optional<BatchChoice> batch_choice;
  const std::string journal_path = o.out_dir + "/journal.jsonl";
  const std::optional<int> journal_batch = o.plan_only ? std::nullopt : AuditJournal::recorded_batch(journal_path);
  if (journal_batch && (o.batch == 0 || model.batch_invariant())) {
    // Resuming: keep the batch the journal's records were made with (for a batch-invariant model a
    // different --batch would give the same results, but the records are per batch of windows).
    batch_choice = BatchChoice{*journal_batch, "resumed: the batch of " + journal_path, {}};
    o.batch = *journal_batch;
  } else if (o.batch == 0) {
    batch_choice = choose_batch(model, eval);  // on every rank at once: each probes under the others' load
    o.batch = batch_choice->batch;
  }
  if (comm.size() > 1) {  // rank 0's batch (and the journal rank 0 reads) for all: the units must agree
    std::string batch = std::to_string(o.batch);
    comm.broadcast(batch);
    o.batch = std::stoi(batch);
    if (batch_choice) batch_choice->batch = o.batch;
  }
  if (batch_choice && comm.root())
    std::fprintf(stderr, "audit batch: %d windows per pass (%s)\n", o.batch, batch_choice->reason.c_str());
  if (o.batch > model.max_batch()) model.set_max_batch(o.batch);
  if (o.batch > model.max_batch())
    throw Error("--batch " + std::to_string(o.batch) + " does not fit the model's run state of " +
                std::to_string(model.max_batch()) + " windows");

  CacheManifest manifest;
  manifest.family = model.family();
  manifest.model_description = model.description();
  manifest.model_sha256 = model.content_hash();
  manifest.eval_split = test.path();
  manifest.eval_split_sha256 = test.content_hash();
  manifest.calib_split = valid.path();
  manifest.calib_split_sha256 = valid.content_hash();
  manifest.eval_windows = eval.indices;
  manifest.calib_windows = calib.indices;
  manifest.tokens = T;
  manifest.batch = o.batch;
  manifest.batch_invariant = model.batch_invariant();
  manifest.shape = model.make_coefficients(1, T).shape();
  manifest.seed = o.seed;
  manifest.build = build_description();

  auto provenance = provenance_base();
  provenance["model"] = o.model_path;
  provenance["model_sha256"] = model.content_hash();
  provenance["data"] = {{"dir", corpus.dir()},
                        {"eval_split", test.path()},
                        {"eval_split_sha256", test.content_hash()},
                        {"calib_split", valid.path()},
                        {"calib_split_sha256", valid.content_hash()}};
  provenance["seed"] = o.seed;

  // The conditions to run: `correct` always (it is the baseline and the exact-replay pass). Routing
  // records have their own table (routing_conditions.h); identity and layer_permutation are
  // continuous-coefficient conditions only, the latter where every layer has the same valid
  // (stream, source) coordinates (a property of the coefficient shape, known before the cache).
  const bool routing = manifest.shape.kind != RecordKind::continuous;
  const std::vector<std::string>& known = routing ? routing_condition_names() : all_condition_names();
  std::vector<std::string> names = o.conditions.empty() ? known : o.conditions;
  std::vector<std::string> skipped;
  nlohmann::ordered_json skipped_reasons = nlohmann::ordered_json::object();
  auto skip = [&](const std::string& name, const std::string& reason) {
    names.erase(std::remove(names.begin(), names.end(), name), names.end());
    skipped.push_back(name);
    skipped_reasons[name] = reason;
  };
  if (o.conditions.empty() && !routing && !layers_are_permutable(model.make_coefficients(1, T).view()))
    skip("layer_permutation", "the layers have different valid (stream, source) coordinates");
  if (o.conditions.empty() && routing) {
    skip("identity", "routing records have no identity coefficients");
    skip("layer_permutation", "routing records are not permuted across layers");
  }
  if (!routing && !model.has_identity_profile()) {
    const std::string reason = "the model gives no identity coefficients (the values that make its controller a no-op)";
    if (!o.conditions.empty() && std::find(names.begin(), names.end(), "identity") != names.end())
      throw Error("--conditions identity: " + reason);
    if (o.conditions.empty()) skip("identity", reason);
  }
  names.erase(std::remove(names.begin(), names.end(), "correct"), names.end());

  if (!o.plan_only && comm.root()) ensure_folder(o.out_dir, "--out");
  // A plan without --out or --cache knows no cache: it plans the live passes that write one.
  const std::string cache_path = !o.cache_path.empty() ? o.cache_path : o.out_dir.empty() ? "" : o.out_dir + "/cache.safetensors";
  std::string cache_found = !cache_path.empty() && file_exists(cache_path) ? "1" : "0";
  comm.broadcast(cache_found);  // as rank 0, which writes it, sees it
  const bool cache_reused = cache_found == "1";

  // ---- The plan, before any pass: windows, tokens, FLOPs and time from a one-batch probe ----
  // Exact replay's replayed half, and the sensitivity probe's two replays of one calibration batch.
  int64_t replay_windows = W + 2 * int64_t(std::min(o.batch, calib.count()));
  for (const auto& n : names) replay_windows += int64_t(W) * (condition_randomized(n, routing) ? o.reps : 1);
  const int64_t live_windows = (cache_reused ? 0 : int64_t(W) + calib.count()) + W;
  AuditPlan plan = plan_audit(model, eval, o.batch, live_windows, replay_windows, int64_t(W) + calib.count());
  plan.ranks = comm.size();
  if (comm.root()) std::fprintf(stderr, "%s\n", plan.summary().c_str());
  if (o.plan_only) {  // --plan: what the audit would run, measured on this machine; nothing written
    nlohmann::ordered_json j;
    j["plan"] = plan.to_json();
    j["batch_choice"] = batch_choice ? batch_choice->to_json() : nlohmann::ordered_json{{"batch", o.batch}, {"reason", "given (--batch)"}};
    j["conditions"] = names;
    j["cache_reused"] = cache_reused;
    return j;
  }
  ExecCounters pass_counters;
  const auto passes_start = std::chrono::steady_clock::now();
  std::optional<CountingScope> counting(std::in_place, pass_counters);

  if (!cache_reused)
    write_coefficient_cache(cache_path, manifest, model, eval, calib, o.batch, o.progress, provenance, comm);
  const CoefficientCache cache = open_cache(cache_path, manifest, comm);
  // A cache written by another build (other instruction sets or flags) holds that build's
  // rounding; it is used only if exact replay below reproduces its NLLs bit for bit.
  const bool cache_from_other_build = cache.manifest().build != manifest.build;
  const CoefficientView A = cache.evaluation();
  CalibrationProfiles profiles{model.make_coefficients(1, T), model.make_coefficients(1, T),
                               model.make_coefficients(1, T), model.make_coefficients(1, T)};
  RoutingProfiles routing_profile;
  if (routing) {
    routing_profile = routing_profiles(cache.calibration());
    profiles.static_profile = routing_profile.static_profile;
    profiles.layer_position_mean = routing_profile.layer_position_mean;
  } else {
    compute_means(cache.calibration(), profiles.layer_position_mean, profiles.static_profile);
    if (model.has_identity_profile()) model.identity_profile(profiles.identity);
    model.structure_removed_profile(profiles.static_profile, profiles.structure_removed);
  }
  const AuditRandomness randomness(o.seed, W, T, o.reps);
  std::vector<std::unique_ptr<Condition>> conditions;
  for (const auto& n : names) {
    conditions.push_back(routing ? make_routing_condition(n, A, routing_profile, randomness)
                                 : make_condition(n, A, profiles, randomness));
    if (conditions.back()->randomized() != condition_randomized(n, routing))
      throw Error("internal error: condition " + n + " and the plan disagree on whether it is randomized");
  }

  int64_t total = W;
  for (const auto& c : conditions) total += int64_t(W) * (c->randomized() ? o.reps : 1);
  Progress bar("audit replay", total, "window");
  int64_t done = 0;
  // Units of work: the window batches, the same on every rank (work_split.h).
  const std::vector<int> starts = batch_starts(W, o.batch);
  auto batch_size = [&](int unit) { return std::min(o.batch, W - starts[size_t(unit)]); };

  // The journal of finished work (journal.h), kept by rank 0: what it holds is not recomputed.
  nlohmann::ordered_json identity = manifest.to_json();
  identity.erase("batch");  // in the header of its own: the records are per batch
  identity["conditions"] = names;
  identity["reps"] = o.reps;
  identity["replay_tolerance"] = o.replay_tolerance;
  identity["fca"] = fca_version_string();
  std::optional<AuditJournal> journal;
  if (comm.root()) {
    journal.emplace(journal_path, identity, o.batch);
    if (journal->resumed_records() > 0)
      std::fprintf(stderr, "audit: resuming from %s (%d finished records)\n", journal_path.c_str(), journal->resumed_records());
  }
  // The units a phase still has to run: rank 0 reads them off the journal and tells the others.
  auto pending = [&](const char* kind) {
    std::vector<int> units;
    if (comm.root())
      for (int u = 0; u < int(starts.size()); ++u)
        if (journal->find(kind, starts[size_t(u)]) == nullptr) units.push_back(u);
    std::string bytes = encode_ints(units);
    comm.broadcast(bytes);
    return decode_ints(bytes);
  };

  // ---- Exact replay, batch by batch; no intervention runs until all of it has passed ----
  std::vector<ConditionRun> runs(1);
  runs[0].name = "correct";
  runs[0].nll.assign(1, std::vector<double>(size_t(W)));
  ExactReplay exact;
  auto apply_exact = [&](int unit, const nlohmann::json& record) {
    const int w0 = starts[size_t(unit)];
    exact.merge(exact_replay_from_record(record, batch_size(unit), runs[0].nll[0].data() + w0,
                                         journal_path + " exact replay at window " + std::to_string(w0)));
    done += batch_size(unit);
  };
  const std::vector<int> exact_units = pending("exact_replay");
  if (comm.root())
    for (int u = 0; u < int(starts.size()); ++u)
      if (const nlohmann::json* rec = journal->find("exact_replay", starts[size_t(u)])) apply_exact(u, *rec);
  run_units(
      comm, exact_units,
      [&](int unit) {
        const int w0 = starts[size_t(unit)], B = batch_size(unit);
        std::vector<double> nll(static_cast<size_t>(B));
        const ExactReplay r = exact_replay_batch(model, eval, A, cache.evaluation_nll(), w0, B, nll.data());
        return exact_replay_record(r, w0, B, nll.data()).dump();
      },
      [&](int unit, std::string& result) {
        const nlohmann::json record = nlohmann::json::parse(result);
        apply_exact(unit, record);
        journal->append(record);
        if (o.progress) bar.update(done, "exact replay");
        return true;
      });
  runs[0].controller_evaluations = exact.controller_evaluations;
  std::string verdict;  // rank 0's, on every rank: all stop together
  if (comm.root()) {
    if (exact.by_digest && o.replay_tolerance > 0)
      verdict = "--replay-tolerance needs the logits' values, and this model gives only their SHA-256 (an external "
                "adapter): its replay must be bitwise (tolerance 0)";
    else if (!exact.passed(o.replay_tolerance))
      verdict = "exact replay failed: replaying the cached coefficients unchanged differs from the live run (" +
                exact.failure(o.replay_tolerance) + "); no intervention counts until replay is exact" +
                (cache_from_other_build ? ". The cache " + cache_path + " was written by another build (" +
                                              (cache.manifest().build.empty() ? std::string("unrecorded") : cache.manifest().build) +
                                              "; this one is " + manifest.build + "): delete it to rebuild it here"
                                        : std::string());
    else if (exact.controller_evaluations != 0)
      verdict = "the controller was evaluated " + std::to_string(exact.controller_evaluations) + " times during replay";
  }
  comm.broadcast(verdict);
  if (!verdict.empty()) {
    if (comm.root()) journal->remove();  // a failed replay leaves no records to resume from
    throw Error(verdict);
  }

  // ---- The replay sensitivity probe (replay_probe.h): the replay must depend on what it is handed
  // before any intervention counts. Rank 0 runs it; all stop together ----
  ReplayProbe probe;
  if (comm.root()) {
    try {
      probe = probe_replay_sensitivity(model, calib, cache.calibration(), 0, std::min(o.batch, calib.count()));
      if (probe.controller_evaluations != 0)
        verdict = "the controller was evaluated " + std::to_string(probe.controller_evaluations) +
                  " times during the replay sensitivity probe";
      else if (!probe.sensitive() && !o.allow_insensitive_replay)
        verdict = probe.failure();
      else if (!probe.sensitive())
        std::fprintf(stderr, "audit: WARNING: %s; auditing anyway (--allow-insensitive-replay)\n", probe.failure().c_str());
    } catch (const Error& e) {  // an adapter's answer refused during the probe: stop as any failed check does
      verdict = std::string("replay sensitivity probe: ") + e.what();
    }
  }
  comm.broadcast(verdict);
  if (!verdict.empty()) {
    if (comm.root()) journal->remove();
    throw Error(verdict);
  }

  // ---- The conditions: window batch by window batch, every condition and randomisation of the
  // batch in turn, so that the replays of one batch share what precedes the first coefficient
  // (prefix reuse). Each window's NLL depends only on its batch and coefficients, never on this
  // order or on the rank that runs it ----
  for (const auto& c : conditions) {
    ConditionRun run;
    run.name = c->name();
    run.randomized = c->randomized();
    run.nll.assign(size_t(run.randomized ? o.reps : 1), std::vector<double>(size_t(W)));
    runs.push_back(std::move(run));
  }
  // A batch's record: [condition][rep] NLL bit patterns of its windows, the controller evaluations
  // per condition and the replays that reused block 0.
  int64_t prefix_reuses = 0;
  int appended_batches = 0;
  auto apply_batch = [&](int unit, const nlohmann::json& rec) {
    const int w0 = starts[size_t(unit)], B = batch_size(unit);
    const std::string where = journal_path + " batch at window " + std::to_string(w0);
    if (rec.value("B", 0) != B || !rec["nll"].is_array() || rec["nll"].size() != conditions.size())
      throw Error(where + ": the record does not match this audit's conditions and batch");
    for (size_t ci = 0; ci < conditions.size(); ++ci) {
      ConditionRun& run = runs[ci + 1];
      const nlohmann::json& reps = rec["nll"][ci];
      if (!reps.is_array() || reps.size() != run.nll.size()) throw Error(where + ": repetitions of " + run.name + " do not match");
      for (size_t r = 0; r < run.nll.size(); ++r) bits_to_doubles(reps[r], run.nll[r].data() + w0, size_t(B), where);
      run.controller_evaluations += rec["controller_evaluations"][ci].get<int64_t>();
      done += int64_t(B) * int64_t(run.nll.size());
    }
    prefix_reuses += rec["prefix_reuses"].get<int64_t>();
  };
  const std::vector<int> condition_units = pending("batch");
  if (comm.root())
    for (int u = 0; u < int(starts.size()); ++u)
      if (const nlohmann::json* rec = journal->find("batch", starts[size_t(u)])) apply_batch(u, *rec);
  model.set_prefix_reuse(o.prefix_reuse);
  const bool finished = run_units(
      comm, condition_units,
      [&](int unit) {
        const int w0 = starts[size_t(unit)], B = batch_size(unit);
        const int64_t off = int64_t(w0) * T;
        const int64_t reuses_before = model.prefix_reuses();
        nlohmann::json record = {{"kind", "batch"}, {"w0", w0}, {"B", B}, {"nll", nlohmann::json::array()},
                                 {"controller_evaluations", nlohmann::json::array()}};
        CoefficientTensor batch = model.make_coefficients(B, T);
        std::vector<double> nll(static_cast<size_t>(B));
        for (const auto& c : conditions) {
          nlohmann::json reps = nlohmann::json::array();
          int64_t condition_evaluations = 0;
          for (int r = 0; r < (c->randomized() ? o.reps : 1); ++r) {
            for (int b = 0; b < B; ++b) c->coefficients(w0 + b, r, batch, b);
            const int64_t evaluations = model.replay_controller_evaluations();
            model.run_replay(eval.inputs.data() + off, eval.targets.data() + off, B, T, batch, nll.data());
            condition_evaluations += model.replay_controller_evaluations() - evaluations;
            reps.push_back(doubles_to_bits(nll.data(), size_t(B)));
          }
          record["nll"].push_back(std::move(reps));
          record["controller_evaluations"].push_back(condition_evaluations);
        }
        record["prefix_reuses"] = model.prefix_reuses() - reuses_before;
        return record.dump();
      },
      [&](int unit, std::string& result) {
        const nlohmann::json record = nlohmann::json::parse(result);
        apply_batch(unit, record);
        journal->append(record);
        if (o.progress) bar.update(done, "conditions");
        // Tests: stop here, as an audit killed after this batch would.
        return !(o.stop_after_batches > 0 && ++appended_batches == o.stop_after_batches);
      });
  model.set_prefix_reuse(false);
  if (!finished) return {{"stopped_after_batches", o.stop_after_batches}};
  for (const auto& run : runs)
    if (run.controller_evaluations != 0)
      throw Error("the controller was evaluated " + std::to_string(run.controller_evaluations) + " times while replaying " +
                  run.name + "; a frozen-controller condition must never reach it");
  if (o.progress) bar.finish();
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
  provenance["run"] = {{"plan", plan.to_json()},
                       {"measured", measured_json(plan, passes_s, pass_flops)},
                       {"prefix_reuse", {{"enabled", o.prefix_reuse}, {"replays_reusing_block_0", prefix_reuses}}}};
  provenance["run"]["ranks"] = comm.size();
  provenance["run"]["batch_choice"] = batch_choice ? batch_choice->to_json() : nlohmann::ordered_json{{"batch", o.batch}, {"reason", "given (--batch)"}};

  // ---- Statistics ----
  const std::vector<double>& base = runs[0].nll[0];
  auto find = [&](const std::string& n) -> const ConditionRun* {
    for (const auto& r : runs)
      if (r.name == n) return &r;
    return nullptr;
  };
  auto window_deltas = [&](const ConditionRun& run) {  // Delta_i, mean over r
    std::vector<double> d(size_t(W), 0.0);
    for (const auto& rep : run.nll)
      for (int i = 0; i < W; ++i) d[size_t(i)] += (rep[size_t(i)] - base[size_t(i)]) / double(run.nll.size());
    return d;
  };
  uint64_t figure = 0;  // each bootstrap gets its own stream of the audit seed
  auto next_seed = [&] { return derive_seed(o.seed, 0xB007, figure++); };

  nlohmann::ordered_json j;
  j["schema"] = kAuditSchema;
  j["model"] = {{"path", o.model_path},
                {"family", model.family()},
                {"description", model.description()},
                {"coefficient_shape",
                 {{"layer", manifest.shape.layers}, {"token", T}, {"stream", manifest.shape.streams}, {"source", manifest.shape.sources}}},
                {"record_kind", record_kind_name(manifest.shape.kind)},
                {"static_profile", model.static_profile_name()},
                {"controller_evaluations_counted_by", model.controller_evaluations_counted_by()},
                {"structure_removed", model.structure_removed_name()}};
  j["settings"] = {{"eval_windows", W},
                   {"calib_windows", calib.count()},
                   {"seq_len", T},
                   {"reps", o.reps},
                   {"batch", o.batch},
                   {"bootstrap_resamples", o.bootstrap_resamples},
                   {"seed", o.seed},
                   {"conditions", names},
                   {"skipped_conditions", skipped},
                   {"skipped_reasons", skipped_reasons},
                   {"cache", cache_path},
                   {"cache_reused", cache_reused},
                   {"cache_build", cache.manifest().build},
                   {"cache_from_other_build", cache_from_other_build}};
  j["exact_replay"] = {{"max_abs_delta_logit", exact.max_abs_delta_logit},
                       {"max_abs_delta_nll", exact.max_abs_delta_nll},
                       {"max_abs_delta_nll_vs_cache", exact.max_abs_delta_nll_cache},
                       {"tolerance", o.replay_tolerance},
                       {"logits_compared", exact.by_digest ? "sha256" : "values"},
                       {"differing_logits", exact.differing_logits},
                       {"differing_nll_windows", exact.differing_nll_windows},
                       {"non_finite", exact.non_finite},
                       {"batches", exact.batches},
                       {"passed", true}};
  const double base_mean = mean(base);
  j["replay_sensitivity"] = probe.to_json(o.allow_insensitive_replay);
  j["baseline"] = {{"nll", base_mean}, {"bits_per_byte", base_mean / std::log(2.0)}, {"byte_ppl", std::exp(base_mean)},
                   {"live_nll", mean(cache.evaluation_nll())}, {"calib_nll", mean(cache.calibration_nll())}};

  nlohmann::ordered_json cond_json = nlohmann::ordered_json::array();
  for (const auto& run : runs) {
    nlohmann::ordered_json c;
    c["name"] = run.name;
    c["randomized"] = run.randomized;
    c["reps"] = run.nll.size();
    std::vector<double> rep_means;
    double nll_sum = 0;
    for (const auto& rep : run.nll) {
      double s = 0;
      for (int i = 0; i < W; ++i) s += rep[size_t(i)] - base[size_t(i)];
      rep_means.push_back(s / W);
      nll_sum += mean(rep);
    }
    const std::vector<double> d = window_deltas(run);
    c["delta_nll"] = mean(d);
    c["ci95"] = interval_json(bootstrap_mean_ci(d, o.bootstrap_resamples, next_seed()));
    c["mc_se"] = run.randomized ? nlohmann::ordered_json(monte_carlo_se(rep_means)) : nlohmann::ordered_json(nullptr);
    c["nll"] = nll_sum / double(run.nll.size());
    c["controller_evaluations"] = run.controller_evaluations;
    cond_json.push_back(c);
  }
  j["conditions"] = cond_json;

  // Factor effects: paired per (window, r), then averaged over r.
  const ConditionRun *DC = find("cross_input"), *CS = find("token_shuffle"), *DS = find("cross_shuffle");
  if (DC && CS && DS) {
    std::vector<double> e_input(size_t(W), 0), e_token(size_t(W), 0), e_inter(size_t(W), 0);
    const double R = double(o.reps);
    for (int r = 0; r < o.reps; ++r)
      for (int i = 0; i < W; ++i) {
        const double cc = base[size_t(i)], dc = DC->nll[size_t(r)][size_t(i)], cs = CS->nll[size_t(r)][size_t(i)],
                     ds = DS->nll[size_t(r)][size_t(i)];
        e_input[size_t(i)] += ((dc - cc) + (ds - cs)) / 2 / R;
        e_token[size_t(i)] += ((cs - cc) + (ds - dc)) / 2 / R;
        e_inter[size_t(i)] += (ds - dc - cs + cc) / R;
      }
    nlohmann::ordered_json f;
    for (const auto& [name, v] : {std::pair<std::string, const std::vector<double>*>{"input", &e_input},
                                  {"token", &e_token}, {"interaction", &e_inter}})
      f[name] = {{"estimate", mean(*v)}, {"ci95", interval_json(bootstrap_mean_ci(*v, o.bootstrap_resamples, next_seed()))}};
    j["factor_effects"] = f;
  } else {
    j["factor_effects"] = nullptr;
  }

  // Retention against structure_removed, with the ratio inside each resample. Undefined (the shared
  // shape of core/undefined_statistic.h) where the ratio is 0/0: structure_removed leaves the NLL
  // unchanged (a Uniform or Dense gate: GlobalMean is the gate itself), or sums to 0 in some
  // bootstrap resamples, so that the ratio has no interval.
  nlohmann::ordered_json retention = nlohmann::ordered_json::object();
  if (const ConditionRun* removed = find("structure_removed")) {
    const std::vector<double> den = window_deltas(*removed);
    const int64_t changed = std::count_if(den.begin(), den.end(), [](double v) { return v != 0.0; });
    for (const char* s : {"static_profile", "layer_position_mean"})
      if (const ConditionRun* run = find(s)) {
        const std::vector<double> num = window_deltas(*run);
        const uint64_t seed = next_seed();  // drawn either way, so later figures keep their streams
        std::string reason;
        Interval ci{0, 0};
        if (mean(den) == 0.0) {
          reason = changed == 0 ? "structure_removed leaves the NLL unchanged on every window (DeltaNLL 0), so retention is 0/0"
                                : "structure_removed's mean DeltaNLL is exactly 0, so retention divides by 0";
        } else {
          ci = bootstrap_retention_ci(num, den, o.bootstrap_resamples, seed);
          if (!std::isfinite(ci.low) || !std::isfinite(ci.high))
            reason = "structure_removed changes the NLL on only " + std::to_string(changed) + " of " + std::to_string(W) +
                     " windows, so some bootstrap resamples divide by 0 and the ratio has no interval";
        }
        nlohmann::ordered_json r = reason.empty() ? nlohmann::ordered_json{{"estimate", 1.0 - mean(num) / mean(den)}, {"ci95", interval_json(ci)}}
                                                  : undefined_statistic("estimate", reason);
        r["delta_nll"] = mean(num);
        r["structure_removed_delta_nll"] = mean(den);
        retention[s] = r;
      }
  }
  j["retention"] = retention;

  // Prespecified criteria.
  nlohmann::ordered_json criteria;
  for (const auto& c : cond_json)
    if (c["name"] == "static_profile") {
      const double upper = c["ci95"][1];
      criteria["static_penalty_small"] = {{"rule", "upper 95% CI bound of static_profile DeltaNLL < threshold"},
                                          {"threshold", o.small_penalty}, {"value", upper}, {"holds", upper < o.small_penalty}};
    }
  if (retention.contains("static_profile")) {
    const auto& ci = retention["static_profile"]["ci95"];
    const nlohmann::ordered_json lower = ci.is_null() ? nlohmann::ordered_json(nullptr) : ci[0];
    criteria["retention_high"] = {{"rule", "lower 95% CI bound of static_profile retention > threshold"},
                                  {"threshold", o.high_retention}, {"value", lower},
                                  {"holds", !lower.is_null() && lower.get<double>() > o.high_retention}};
    if (lower.is_null()) criteria["retention_high"]["note"] = undefined_note(undefined_reason(retention["static_profile"]));
  }
  j["criteria"] = criteria;

  // Routing records: the variance decomposition runs on the weights (MoE: the dense E-vector per
  // token, zeros where unselected; MoD: sigmoid(s)).
  const CoefficientTensor dense_weights = routing ? routing_weights_dense(A) : CoefficientTensor();
  const VarianceDecomposition v = functional_anova(routing ? dense_weights.view() : A);
  // A constant tensor (total variance 0) has no shares: each is 0/0, written as null with the reason.
  const bool constant = !(v.total_variance > 0);
  auto share = [&](double x) { return constant ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(x); };
  j["variance"] = {{"total_variance", v.total_variance},
                   {"cells", {{"coordinates", v.coordinates}, {"inputs", v.inputs}, {"tokens", v.tokens}}},
                   {"shares",
                    {{"coordinate", share(v.coordinate)},
                     {"input", share(v.input)},
                     {"token", share(v.token)},
                     {"coordinate_x_input", share(v.coordinate_input)},
                     {"coordinate_x_token", share(v.coordinate_token)},
                     {"input_x_token", share(v.input_token)},
                     {"residual", share(v.residual)}}}};
  if (constant)
    j["variance"]["note"] = undefined_note("the coefficients are constant (one value for every coordinate, input and token; "
                                           "total variance 0), so every share is 0/0");
  // Calibrated profiles for figures: S[l][s][k] (null where invalid) and, for one-stream one-source
  // tensors (the gated family), the layer x position means.
  {
    const CoefficientShape& sh = manifest.shape;
    nlohmann::ordered_json S = nlohmann::ordered_json::array();
    for (int l = 0; l < sh.layers; ++l) {
      nlohmann::ordered_json streams = nlohmann::ordered_json::array();
      for (int st = 0; st < sh.streams; ++st) {
        nlohmann::ordered_json sources = nlohmann::ordered_json::array();
        for (int k = 0; k < sh.sources; ++k)
          sources.push_back(profiles.static_profile.valid(l, st, k) ? nlohmann::ordered_json(profiles.static_profile.at(0, l, 0, st, k))
                                                                    : nlohmann::ordered_json(nullptr));
        streams.push_back(sources);
      }
      S.push_back(streams);
    }
    j["profiles"]["static_profile"] = S;
    if (sh.streams == 1 && sh.sources == 1 && !routing) {
      nlohmann::ordered_json lpm = nlohmann::ordered_json::array();
      for (int l = 0; l < sh.layers; ++l) {
        std::vector<float> row(size_t(sh.tokens));
        for (int t = 0; t < sh.tokens; ++t) row[size_t(t)] = profiles.layer_position_mean.at(0, l, t);
        lpm.push_back(row);
      }
      j["profiles"]["layer_position_mean"] = lpm;
    }
  }
  if (routing) {
    const auto load = routing_load(A);
    const bool experts = manifest.shape.kind == RecordKind::expert_routing;
    j["routing"] = {{"kind", record_kind_name(manifest.shape.kind)},
                    {"top_k", experts ? manifest.shape.slots : 0},
                    {"experts", manifest.shape.categories},
                    {"selected_per_window", manifest.shape.selected},
                    {experts ? "expert_load" : "selection_frequency", load},
                    {"note", experts ? "share of the evaluation windows' (token, slot) assignments per layer and expert"
                                     : "share of the evaluation windows selecting each position, per routed block"}};
  }
  j["provenance"] = provenance;

  // ---- Outputs, each written to a temporary name and renamed ----
  write_file_atomically(o.out_dir + "/audit.json", [&](std::ostream& out) { out << j.dump(2) << "\n"; });
  write_file_atomically(o.out_dir + "/windows.csv", [&](std::ostream& out) {
    out << "condition,rep,window,split_window,nll,delta_nll\n";
    out.precision(17);
    for (const auto& run : runs)
      for (size_t r = 0; r < run.nll.size(); ++r)
        for (int i = 0; i < W; ++i)
          out << run.name << ',' << r << ',' << i << ',' << eval.indices[size_t(i)] << ',' << run.nll[r][size_t(i)] << ','
              << run.nll[r][size_t(i)] - base[size_t(i)] << '\n';
  });
  write_file_atomically(o.out_dir + "/audit.md", [&](std::ostream& out) { out << audit_markdown(j); });
  journal->remove();  // everything it held is in the results now
  return j;
}

}  // namespace fca
