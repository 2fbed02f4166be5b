#include "audit/audit.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "audit/cache.h"
#include "audit/conditions.h"
#include "audit/journal.h"
#include "audit/plan.h"
#include "audit/routing_conditions.h"
#include "audit/statistics.h"
#include "core/error.h"
#include "core/exec_counters.h"
#include "core/file_io.h"
#include "core/progress.h"
#include "core/provenance.h"
#include "core/rng.h"
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

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// What replaying the cached coefficients unchanged did to the live run. "Exact" means bit patterns:
// a difference of NaN or of -0 against +0 is a difference, and a non-finite logit or NLL in either
// pass fails the check whatever the tolerance.
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

  bool passed(double tolerance) const {
    if (non_finite > 0 || digest_mismatches > 0) return false;
    if (tolerance == 0) return differing_logits == 0 && differing_nll_windows == 0;
    return max_abs_delta_logit <= tolerance && max_abs_delta_nll <= tolerance && max_abs_delta_nll_cache <= tolerance;
  }
};

void compare_values(double live, double replay, double& max_delta, int64_t& non_finite) {
  if (!std::isfinite(live) || !std::isfinite(replay)) {
    ++non_finite;
    return;
  }
  max_delta = std::max(max_delta, std::abs(replay - live));
}

// Live and replayed (cached coefficients, unchanged) passes side by side, batch by batch.
ExactReplay check_exact_replay(AuditableModel& model, const WindowSet& eval, const CoefficientView& A,
                               const std::vector<double>& cached_nll, int batch, ConditionRun& correct,
                               Progress& bar, int64_t& done, bool progress) {
  ExactReplay r;
  const int W = eval.count(), T = eval.tokens;
  const int64_t before = model.replay_controller_evaluations();
  correct.nll.assign(1, std::vector<double>(size_t(W)));
  std::vector<double> live_nll(static_cast<size_t>(W));
  std::vector<float> live_logits;
  for (int w0 = 0; w0 < W; w0 += batch) {
    const int B = std::min(batch, W - w0);
    const int64_t off = int64_t(w0) * T;
    model.run_live(eval.inputs.data() + off, eval.targets.data() + off, B, T, nullptr, 0, live_nll.data() + w0);
    const size_t n_logits = size_t(B) * T * size_t(model.vocab());
    r.by_digest = model.last_logits() == nullptr;
    const std::string live_digest = r.by_digest ? model.last_logits_sha256() : std::string();
    if (!r.by_digest) live_logits.assign(model.last_logits(), model.last_logits() + n_logits);
    CoefficientTensor coefficients = model.make_coefficients(B, T);
    for (int b = 0; b < B; ++b) coefficients.copy_window(b, A, w0 + b);
    model.run_replay(eval.inputs.data() + off, eval.targets.data() + off, B, T, coefficients, correct.nll[0].data() + w0);
    ++r.batches;
    if (r.by_digest) {
      if (model.last_logits_sha256() != live_digest) ++r.digest_mismatches;
    } else {
      const float* replay_logits = model.last_logits();
      for (size_t i = 0; i < n_logits; ++i) {
        if (!same_bits(replay_logits[i], live_logits[i])) ++r.differing_logits;
        compare_values(live_logits[i], replay_logits[i], r.max_abs_delta_logit, r.non_finite);
      }
    }
    for (int b = 0; b < B; ++b) {
      const size_t w = size_t(w0 + b);
      const double v = correct.nll[0][w];
      if (!same_bits(v, live_nll[w]) || !same_bits(v, cached_nll[w])) ++r.differing_nll_windows;
      compare_values(live_nll[w], v, r.max_abs_delta_nll, r.non_finite);
      compare_values(cached_nll[w], v, r.max_abs_delta_nll_cache, r.non_finite);
    }
    done += B;
    if (progress) bar.update(done, "exact replay");
  }
  r.controller_evaluations = model.replay_controller_evaluations() - before;
  correct.controller_evaluations = r.controller_evaluations;
  return r;
}

// Exact replay as a journal record (journal.h), and back.
nlohmann::json exact_replay_record(const ExactReplay& r, const ConditionRun& correct) {
  return {{"kind", "exact_replay"},
          {"max_abs_delta", doubles_to_bits(&r.max_abs_delta_logit, 1)[0]},
          {"max_abs_delta_nll", doubles_to_bits(&r.max_abs_delta_nll, 1)[0]},
          {"max_abs_delta_nll_cache", doubles_to_bits(&r.max_abs_delta_nll_cache, 1)[0]},
          {"differing_logits", r.differing_logits},
          {"differing_nll_windows", r.differing_nll_windows},
          {"non_finite", r.non_finite},
          {"controller_evaluations", r.controller_evaluations},
          {"by_digest", r.by_digest},
          {"digest_mismatches", r.digest_mismatches},
          {"batches", r.batches},
          {"nll", doubles_to_bits(correct.nll[0].data(), correct.nll[0].size())}};
}

ExactReplay exact_replay_from_record(const nlohmann::json& j, ConditionRun& correct, int W, const std::string& where) {
  ExactReplay r;
  try {
    bits_to_doubles(nlohmann::json::array({j.at("max_abs_delta")}), &r.max_abs_delta_logit, 1, where);
    bits_to_doubles(nlohmann::json::array({j.at("max_abs_delta_nll")}), &r.max_abs_delta_nll, 1, where);
    bits_to_doubles(nlohmann::json::array({j.at("max_abs_delta_nll_cache")}), &r.max_abs_delta_nll_cache, 1, where);
    r.differing_logits = j.at("differing_logits").get<int64_t>();
    r.differing_nll_windows = j.at("differing_nll_windows").get<int64_t>();
    r.non_finite = j.at("non_finite").get<int64_t>();
    r.controller_evaluations = j.at("controller_evaluations").get<int64_t>();
    r.by_digest = j.at("by_digest").get<bool>();
    r.digest_mismatches = j.at("digest_mismatches").get<int>();
    r.batches = j.at("batches").get<int>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": malformed exact-replay record (" + e.what() + ")");
  }
  correct.nll.assign(1, std::vector<double>(size_t(W)));
  bits_to_doubles(j.at("nll"), correct.nll[0].data(), size_t(W), where + " exact-replay NLL");
  correct.controller_evaluations = r.controller_evaluations;
  return r;
}

std::string format_g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

nlohmann::ordered_json interval_json(const Interval& i) { return nlohmann::ordered_json::array({i.low, i.high}); }

}  // namespace

nlohmann::ordered_json run_audit(AuditableModel& model, const Corpus& corpus, const AuditOptions& options) {
  AuditOptions o = options;
  const int T = o.tokens > 0 ? o.tokens : model.max_tokens();
  if (T > model.max_tokens())
    throw Error("--seq " + std::to_string(T) + " is longer than the model's " + std::to_string(model.max_tokens()) + " positions");
  if (o.reps < 2) throw Error("--reps must be at least 2 (the Monte-Carlo SE needs two randomisations), found " + std::to_string(o.reps));
  if (o.out_dir.empty()) throw Error("--out is required");
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
    std::fprintf(stderr, "audit batch: %d windows per pass (%s)\n", o.batch, batch_choice->reason.c_str());
  } else if (o.batch == 0) {
    batch_choice = choose_batch(model, eval);
    o.batch = batch_choice->batch;
    std::fprintf(stderr, "audit batch: %d windows per pass (%s)\n", o.batch, batch_choice->reason.c_str());
  }
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
  if (o.conditions.empty() && !routing && !layers_are_permutable(model.make_coefficients(1, T).view())) {
    names.erase(std::remove(names.begin(), names.end(), "layer_permutation"), names.end());
    skipped.push_back("layer_permutation");
  }
  if (o.conditions.empty() && routing) skipped = {"identity", "layer_permutation"};
  names.erase(std::remove(names.begin(), names.end(), "correct"), names.end());

  if (!o.plan_only) std::filesystem::create_directories(o.out_dir);
  const std::string cache_path = o.cache_path.empty() ? o.out_dir + "/cache.safetensors" : o.cache_path;
  bool cache_reused = file_exists(cache_path);

  // ---- The plan, before any pass: windows, tokens, FLOPs and time from a one-batch probe ----
  int64_t replay_windows = W;  // exact replay's replayed half
  for (const auto& n : names) replay_windows += int64_t(W) * (condition_randomized(n, routing) ? o.reps : 1);
  const int64_t live_windows = (cache_reused ? 0 : int64_t(W) + calib.count()) + W;
  const AuditPlan plan = plan_audit(model, eval, o.batch, live_windows, replay_windows, int64_t(W) + calib.count());
  std::fprintf(stderr, "%s\n", plan.summary().c_str());
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
    write_coefficient_cache(cache_path, manifest, model, eval, calib, o.batch, o.progress, provenance);
  const CoefficientCache cache(cache_path, manifest);
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
    model.identity_profile(profiles.identity);
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

  // The journal of finished work (journal.h): what it holds is not recomputed.
  nlohmann::ordered_json identity = manifest.to_json();
  identity.erase("batch");  // in the header of its own: the records are per batch
  identity["conditions"] = names;
  identity["reps"] = o.reps;
  identity["replay_tolerance"] = o.replay_tolerance;
  identity["fca"] = fca_version_string();
  AuditJournal journal(journal_path, identity, o.batch);
  if (journal.resumed_records() > 0)
    std::fprintf(stderr, "audit: resuming from %s (%d finished records)\n", journal_path.c_str(), journal.resumed_records());

  std::vector<ConditionRun> runs(1);
  runs[0].name = "correct";
  const nlohmann::json* exact_record = journal.find("exact_replay");
  ExactReplay exact;
  if (exact_record != nullptr) {
    exact = exact_replay_from_record(*exact_record, runs[0], W, journal_path);
    done += W;
  } else {
    exact = check_exact_replay(model, eval, A, cache.evaluation_nll(), o.batch, runs[0], bar, done, o.progress);
  }
  if (exact.by_digest && o.replay_tolerance > 0)
    throw Error("--replay-tolerance needs the logits' values, and this model gives only their SHA-256 (an external "
                "adapter): its replay must be bitwise (tolerance 0)");
  if (!exact.passed(o.replay_tolerance))
    throw Error("exact replay failed: replaying the cached coefficients unchanged differs from the live run (" +
                (exact.by_digest ? "logits SHA-256 differs in " + std::to_string(exact.digest_mismatches) + " of " +
                                       std::to_string(exact.batches) + " batches"
                                 : std::to_string(exact.differing_logits) + " logits differ in bits, max |delta logit| " +
                                       format_g(exact.max_abs_delta_logit)) +
                "; " + std::to_string(exact.differing_nll_windows) + " windows' NLL differ in bits, max |delta NLL| " +
                format_g(exact.max_abs_delta_nll) + ", against the cache " + format_g(exact.max_abs_delta_nll_cache) + "; " +
                std::to_string(exact.non_finite) + " non-finite values; tolerance " + format_g(o.replay_tolerance) +
                "); no intervention counts until replay is exact" +
                (cache_from_other_build ? ". The cache " + cache_path + " was written by another build (" +
                                              (cache.manifest().build.empty() ? std::string("unrecorded") : cache.manifest().build) +
                                              "; this one is " + manifest.build + "): delete it to rebuild it here"
                                        : std::string()));
  if (exact.controller_evaluations != 0)
    throw Error("the controller was evaluated " + std::to_string(exact.controller_evaluations) + " times during replay");
  if (exact_record == nullptr) journal.append(exact_replay_record(exact, runs[0]));

  // Window batch by window batch, every condition and randomisation of the batch in turn: the
  // replays of one batch then share what precedes the first coefficient (prefix reuse). Each
  // window's NLL depends only on its batch and coefficients, never on this order.
  for (const auto& c : conditions) {
    ConditionRun run;
    run.name = c->name();
    run.randomized = c->randomized();
    run.nll.assign(size_t(run.randomized ? o.reps : 1), std::vector<double>(size_t(W)));
    runs.push_back(std::move(run));
  }
  // Each finished batch goes into the journal: [condition][rep] NLL bit patterns of its windows, the
  // controller evaluations per condition and the replays that reused block 0.
  int64_t prefix_reuses = 0;
  int appended_batches = 0;
  model.set_prefix_reuse(o.prefix_reuse);
  for (int w0 = 0; w0 < W; w0 += o.batch) {
    const int B = std::min(o.batch, W - w0);
    const int64_t off = int64_t(w0) * T;
    if (const nlohmann::json* rec = journal.find("batch", w0)) {
      const std::string where = journal_path + " batch at window " + std::to_string(w0);
      if (rec->value("B", 0) != B || !(*rec)["nll"].is_array() || (*rec)["nll"].size() != conditions.size())
        throw Error(where + ": the record does not match this audit's conditions and batch");
      for (size_t ci = 0; ci < conditions.size(); ++ci) {
        ConditionRun& run = runs[ci + 1];
        const nlohmann::json& reps = (*rec)["nll"][ci];
        if (!reps.is_array() || reps.size() != run.nll.size()) throw Error(where + ": repetitions of " + run.name + " do not match");
        for (size_t r = 0; r < run.nll.size(); ++r) bits_to_doubles(reps[r], run.nll[r].data() + w0, size_t(B), where);
        run.controller_evaluations += (*rec)["controller_evaluations"][ci].get<int64_t>();
        done += int64_t(B) * int64_t(run.nll.size());
      }
      prefix_reuses += (*rec)["prefix_reuses"].get<int64_t>();
      continue;
    }
    const int64_t reuses_before = model.prefix_reuses();
    nlohmann::json record = {{"kind", "batch"}, {"w0", w0}, {"B", B}, {"nll", nlohmann::json::array()},
                             {"controller_evaluations", nlohmann::json::array()}};
    CoefficientTensor batch = model.make_coefficients(B, T);
    for (size_t ci = 0; ci < conditions.size(); ++ci) {
      const Condition& c = *conditions[ci];
      ConditionRun& run = runs[ci + 1];
      nlohmann::json reps = nlohmann::json::array();
      int64_t condition_evaluations = 0;
      for (int r = 0; r < int(run.nll.size()); ++r) {
        for (int b = 0; b < B; ++b) c.coefficients(w0 + b, r, batch, b);
        const int64_t evaluations = model.replay_controller_evaluations();
        model.run_replay(eval.inputs.data() + off, eval.targets.data() + off, B, T, batch, run.nll[size_t(r)].data() + w0);
        condition_evaluations += model.replay_controller_evaluations() - evaluations;
        reps.push_back(doubles_to_bits(run.nll[size_t(r)].data() + w0, size_t(B)));
        done += B;
      }
      run.controller_evaluations += condition_evaluations;
      record["nll"].push_back(std::move(reps));
      record["controller_evaluations"].push_back(condition_evaluations);
      if (o.progress) bar.update(done, run.name);
    }
    record["prefix_reuses"] = model.prefix_reuses() - reuses_before;
    prefix_reuses += record["prefix_reuses"].get<int64_t>();
    journal.append(record);
    if (o.stop_after_batches > 0 && ++appended_batches == o.stop_after_batches) {
      model.set_prefix_reuse(false);
      return {{"stopped_after_batches", appended_batches}};  // tests: an audit killed here
    }
  }
  model.set_prefix_reuse(false);
  for (const auto& run : runs)
    if (run.controller_evaluations != 0)
      throw Error("the controller was evaluated " + std::to_string(run.controller_evaluations) + " times while replaying " +
                  run.name + "; a frozen-controller condition must never reach it");
  if (o.progress) bar.finish();
  counting.reset();
  const double passes_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - passes_start).count();
  const double pass_flops = double(pass_counters.gemm_flops.load()) + double(pass_counters.controller_flops.load()) +
                            double(pass_counters.mixing_flops.load());
  std::fprintf(stderr, "%s\n", measured_summary(plan, passes_s, pass_flops).c_str());
  // The plan and what the passes took: run facts, so they live in the provenance (like its
  // timestamp), never in the results, which stay bitwise reproducible.
  provenance["run"] = {{"plan", plan.to_json()},
                       {"measured", measured_json(plan, passes_s, pass_flops)},
                       {"prefix_reuse", {{"enabled", o.prefix_reuse}, {"replays_reusing_block_0", prefix_reuses}}}};
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

  // Retention against structure_removed, with the ratio inside each resample.
  nlohmann::ordered_json retention = nlohmann::ordered_json::object();
  if (const ConditionRun* removed = find("structure_removed")) {
    const std::vector<double> den = window_deltas(*removed);
    for (const char* s : {"static_profile", "layer_position_mean"})
      if (const ConditionRun* run = find(s)) {
        const std::vector<double> num = window_deltas(*run);
        const uint64_t seed = next_seed();  // drawn either way, so later figures keep their streams
        if (mean(den) == 0.0) {
          // structure_removed changes nothing (e.g. a uniform gate): the ratio is 0/0, undefined.
          retention[s] = {{"estimate", nullptr}, {"ci95", nullptr}, {"delta_nll", mean(num)},
                          {"structure_removed_delta_nll", 0.0},
                          {"note", "undefined: structure_removed leaves the NLL unchanged"}};
          continue;
        }
        retention[s] = {{"estimate", 1.0 - mean(num) / mean(den)},
                        {"ci95", interval_json(bootstrap_retention_ci(num, den, o.bootstrap_resamples, seed))},
                        {"delta_nll", mean(num)},
                        {"structure_removed_delta_nll", mean(den)}};
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
    if (lower.is_null()) criteria["retention_high"]["note"] = "retention is undefined (structure_removed changes nothing)";
  }
  j["criteria"] = criteria;

  // Routing records: the variance decomposition runs on the weights (MoE: the dense E-vector per
  // token, zeros where unselected; MoD: sigmoid(s)).
  const CoefficientTensor dense_weights = routing ? routing_weights_dense(A) : CoefficientTensor();
  const VarianceDecomposition v = functional_anova(routing ? dense_weights.view() : A);
  j["variance"] = {{"total_variance", v.total_variance},
                   {"cells", {{"coordinates", v.coordinates}, {"inputs", v.inputs}, {"tokens", v.tokens}}},
                   {"shares",
                    {{"coordinate", v.coordinate},
                     {"input", v.input},
                     {"token", v.token},
                     {"coordinate_x_input", v.coordinate_input},
                     {"coordinate_x_token", v.coordinate_token},
                     {"input_x_token", v.input_token},
                     {"residual", v.residual}}}};
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
  journal.remove();  // everything it held is in the results now
  return j;
}

}  // namespace fca
