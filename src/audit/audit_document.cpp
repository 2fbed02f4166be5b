// The audit's statistics as the audit.json document, and its outputs (phases.h, phases 7 and 8).
#include <algorithm>
#include <cmath>

#include "audit/phases.h"
#include "audit/statistics.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/rng.h"
#include "core/undefined_statistic.h"
#include "models/routing_record.h"
#include "models/capabilities.h"

namespace fca {
namespace {

nlohmann::ordered_json interval_json(const Interval& i) { return nlohmann::ordered_json::array({i.low, i.high}); }

// The runs against the baseline (the "correct" run, first), and the bootstrap seeds: each figure
// gets its own stream of the audit seed, drawn in document order.
class RunTable {
 public:
  RunTable(const std::vector<ConditionRun>& runs, uint64_t seed) : runs_(runs), base_(runs.at(0).nll.at(0)), seed_(seed) {}
  const std::vector<double>& base() const { return base_; }
  int windows() const { return int(base_.size()); }
  const ConditionRun* find(const std::string& name) const {
    for (const auto& r : runs_)
      if (r.name == name) return &r;
    return nullptr;
  }
  // Delta_i: the run's NLL minus the baseline's per window, mean over repetitions.
  std::vector<double> window_deltas(const ConditionRun& run) const {
    std::vector<double> d(base_.size(), 0.0);
    for (const auto& rep : run.nll)
      for (size_t i = 0; i < base_.size(); ++i) d[i] += (rep[i] - base_[i]) / double(run.nll.size());
    return d;
  }
  uint64_t next_seed() { return derive_seed(seed_, 0xB007, figure_++); }
  const std::vector<ConditionRun>& runs() const { return runs_; }

 private:
  const std::vector<ConditionRun>& runs_;
  const std::vector<double>& base_;
  uint64_t seed_;
  uint64_t figure_ = 0;
};

nlohmann::ordered_json model_json(const AuditableModel& model, const AuditSetup& s) {
  const CoefficientShape& sh = s.manifest.shape;
  return {{"path", s.options.model_path},
          {"family", model.family()},
          {"description", model.description()},
          {"coefficient_shape", {{"layer", sh.layers}, {"token", s.tokens}, {"stream", sh.streams}, {"source", sh.sources}}},
          {"record_kind", record_kind_name(sh.kind)},
          {"static_profile", model.static_profile_name()},
          {"controller_evaluations_counted_by", model.controller_evaluations_counted_by()},
          {"structure_removed", model.structure_removed_name()},
          {"stream_labels", model.stream_labels()},
          {"source_labels", model.source_labels()}};
}

nlohmann::ordered_json settings_json(const AuditSetup& s, const AuditInputs& in) {
  const AuditOptions& o = s.options;
  return {{"eval_windows", s.windows()},
          {"calib_windows", s.calib.count()},
          {"seq_len", s.tokens},
          {"reps", o.reps},
          {"batch", o.batch},
          {"precision", s.manifest.precision},
          {"bootstrap_resamples", o.bootstrap_resamples},
          {"seed", o.seed},
          {"token_shuffle", o.joint_token_shuffle ? "site-joint: one permutation per window and layer, shared by every stream"
                                                  : "per stream: one permutation per window, layer and stream"},
          {"conditions", s.conditions},
          {"skipped_conditions", s.skipped},
          {"skipped_reasons", s.skipped_reasons},
          {"cache", s.cache_path},
          {"cache_reused", s.cache_reused},
          {"cache_build", in.cache.manifest().build},
          {"cache_from_other_build", in.cache_from_other_build}};
}

// What a condition's replays ran (RecordDependentCompute, models/capabilities.h), beside its DeltaNLL: mean
// blocks per token (an exit model's mean depth) and its difference to correct, GEMM GFLOP per
// token by the records' formulas and as counted (plus the prefix reused replays did not run), and
// whether the two agree.
nlohmann::ordered_json compute_json(const ConditionRun& run, const ConditionRun& correct) {
  const RecordCompute& f = *run.compute;
  const double tokens = double(f.tokens), blocks = double(f.token_blocks) / tokens;
  nlohmann::ordered_json j{{"mean_depth", blocks}};
  if (correct.compute) j["delta_depth"] = blocks - double(correct.compute->token_blocks) / double(correct.compute->tokens);
  j["gemm_gflop_per_token_of_record"] = f.gemm_flops / 1e9 / tokens;
  if (run.counted_gemm_flops) {
    // Prefix reuse (models/prefix_reuse.h): a replay that starts after the kept prefix counts only
    // what it ran; the prefix it reused is added by the records' formula for it.
    j["gemm_gflop_per_token_counted"] = *run.counted_gemm_flops / 1e9 / tokens;
    j["gemm_gflop_per_token_reused_prefix"] = run.reused_prefix_gemm_flops / 1e9 / tokens;
    j["counted_matches_record"] = *run.counted_gemm_flops + run.reused_prefix_gemm_flops == f.gemm_flops;
  } else {
    j["gemm_gflop_per_token_counted"] = nullptr;
    j["note"] = "correct replays the cache: the exact replay, checked bit for bit against the live pass";
  }
  return j;
}

// Each run: its mean DeltaNLL with a bootstrap CI over windows, the Monte-Carlo SE over repetitions
// (randomised conditions), its mean NLL and the controller evaluations its replays counted.
nlohmann::ordered_json conditions_json(RunTable& t, int resamples) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  const int W = t.windows();
  for (const auto& run : t.runs()) {
    nlohmann::ordered_json c;
    c["name"] = run.name;
    c["randomized"] = run.randomized;
    c["reps"] = run.nll.size();
    std::vector<double> rep_means;
    double nll_sum = 0;
    for (const auto& rep : run.nll) {
      double sum = 0;
      for (int i = 0; i < W; ++i) sum += rep[size_t(i)] - t.base()[size_t(i)];
      rep_means.push_back(sum / W);
      nll_sum += mean(rep);
    }
    const std::vector<double> d = t.window_deltas(run);
    c["delta_nll"] = mean(d);
    c["ci95"] = interval_json(bootstrap_mean_ci(d, resamples, t.next_seed()));
    c["mc_se"] = run.randomized ? nlohmann::ordered_json(monte_carlo_se(rep_means)) : nlohmann::ordered_json(nullptr);
    c["nll"] = nll_sum / double(run.nll.size());
    c["controller_evaluations"] = run.controller_evaluations;
    if (run.compute) c["compute"] = compute_json(run, t.runs().front());
    out.push_back(c);
  }
  return out;
}

// Factor effects of the 2x2 design (cross_input, token_shuffle, cross_shuffle against correct):
// paired per (window, r), then averaged over r. Null unless all three ran.
nlohmann::ordered_json factor_effects_json(RunTable& t, int reps, int resamples) {
  const ConditionRun *DC = t.find("cross_input"), *CS = t.find("token_shuffle"), *DS = t.find("cross_shuffle");
  if (!DC || !CS || !DS) return nullptr;
  const size_t W = size_t(t.windows());
  std::vector<double> e_input(W, 0), e_token(W, 0), e_inter(W, 0);
  const double R = double(reps);
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < W; ++i) {
      const double cc = t.base()[i], dc = DC->nll[size_t(r)][i], cs = CS->nll[size_t(r)][i], ds = DS->nll[size_t(r)][i];
      e_input[i] += ((dc - cc) + (ds - cs)) / 2 / R;
      e_token[i] += ((cs - cc) + (ds - dc)) / 2 / R;
      e_inter[i] += (ds - dc - cs + cc) / R;
    }
  nlohmann::ordered_json f;
  for (const auto& [name, v] : {std::pair<std::string, const std::vector<double>*>{"input", &e_input},
                                {"token", &e_token}, {"interaction", &e_inter}})
    f[name] = {{"estimate", mean(*v)}, {"ci95", interval_json(bootstrap_mean_ci(*v, resamples, t.next_seed()))}};
  return f;
}

// Retention against structure_removed, with the ratio inside each resample. Undefined (the shared
// shape of core/undefined_statistic.h) where the ratio is 0/0: structure_removed leaves the NLL
// unchanged (a Uniform or Dense gate: GlobalMean is the gate itself), or sums to 0 in some
// bootstrap resamples, so that the ratio has no interval.
nlohmann::ordered_json retention_json(RunTable& t, int resamples) {
  nlohmann::ordered_json retention = nlohmann::ordered_json::object();
  const ConditionRun* removed = t.find("structure_removed");
  if (!removed) return retention;
  const std::vector<double> den = t.window_deltas(*removed);
  const int64_t changed = std::count_if(den.begin(), den.end(), [](double v) { return v != 0.0; });
  for (const char* name : {"static_profile", "layer_position_mean"})
    if (const ConditionRun* run = t.find(name)) {
      const std::vector<double> num = t.window_deltas(*run);
      const uint64_t seed = t.next_seed();  // drawn either way, so later figures keep their streams
      std::string reason;
      Interval ci{0, 0};
      if (mean(den) == 0.0) {
        reason = changed == 0 ? "structure_removed leaves the NLL unchanged on every window (DeltaNLL 0), so retention is 0/0"
                              : "structure_removed's mean DeltaNLL is exactly 0, so retention divides by 0";
      } else {
        ci = bootstrap_retention_ci(num, den, resamples, seed);
        if (!std::isfinite(ci.low) || !std::isfinite(ci.high))
          reason = "structure_removed changes the NLL on only " + std::to_string(changed) + " of " +
                   std::to_string(t.windows()) + " windows, so some bootstrap resamples divide by 0 and the ratio has no interval";
      }
      nlohmann::ordered_json r = reason.empty() ? nlohmann::ordered_json{{"estimate", 1.0 - mean(num) / mean(den)}, {"ci95", interval_json(ci)}}
                                                : undefined_statistic("estimate", reason);
      r["delta_nll"] = mean(num);
      r["structure_removed_delta_nll"] = mean(den);
      retention[name] = r;
    }
  return retention;
}

// The prespecified criteria.
nlohmann::ordered_json criteria_json(const nlohmann::ordered_json& conditions, const nlohmann::ordered_json& retention,
                                     const AuditOptions& o) {
  nlohmann::ordered_json criteria;
  for (const auto& c : conditions)
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
  return criteria;
}

// The variance decomposition of the evaluation coefficients. Routing records: on the weights (MoE:
// the dense E-vector per token, zeros where unselected; MoD: sigmoid(s)).
nlohmann::ordered_json variance_json(const CoefficientView& A, bool routing) {
  const CoefficientTensor dense_weights = routing ? routing_weights_dense(A) : CoefficientTensor();
  const VarianceDecomposition v = functional_anova(routing ? dense_weights.view() : A);
  // A constant tensor (total variance 0) has no shares: each is 0/0, written as null with the reason.
  const bool constant = !(v.total_variance > 0);
  auto share = [&](double x) { return constant ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(x); };
  nlohmann::ordered_json j = {{"total_variance", v.total_variance},
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
    j["note"] = undefined_note("the coefficients are constant (one value for every coordinate, input and token; "
                               "total variance 0), so every share is 0/0");
  return j;
}

}  // namespace

nlohmann::ordered_json audit_document(const AuditableModel& model, const AuditSetup& s, const AuditInputs& in,
                                      const std::vector<ConditionRun>& runs, const ExactReplay& exact,
                                      const ReplayProbe& probe, const nlohmann::ordered_json& provenance) {
  const AuditOptions& o = s.options;
  RunTable table(runs, o.seed);
  nlohmann::ordered_json j;
  j["schema"] = kAuditSchema;
  j["model"] = model_json(model, s);
  j["settings"] = settings_json(s, in);
  j["exact_replay"] = exact.to_json(o.replay_tolerance);
  const double base_mean = mean(table.base());
  j["replay_sensitivity"] = probe.to_json(o.allow_insensitive_replay);
  j["baseline"] = {{"nll", base_mean}, {"bits_per_byte", base_mean / std::log(2.0)}, {"byte_ppl", std::exp(base_mean)},
                   {"live_nll", mean(in.cache.evaluation_nll())}, {"calib_nll", mean(in.cache.calibration_nll())}};
  j["conditions"] = conditions_json(table, o.bootstrap_resamples);
  j["factor_effects"] = factor_effects_json(table, o.reps, o.bootstrap_resamples);
  j["retention"] = retention_json(table, o.bootstrap_resamples);
  j["criteria"] = criteria_json(j["conditions"], j["retention"], o);
  const CoefficientConstraint* constrained = capability<CoefficientConstraint>(model);
  const std::string constraint = constrained != nullptr ? constrained->coefficient_constraint() : "";
  if (!constraint.empty()) {
    // The largest violation of the family's constraint in what each condition replayed, over its
    // windows and randomisations (the coefficients are regenerated: they are cheap to copy).
    j["model"]["coefficient_constraint"] = constraint;
    // correct replays the cache unchanged.
    double live = 0;
    for (int w = 0; w < in.evaluation.windows; ++w) live = std::max(live, constrained->constraint_violation(in.evaluation, w));
    for (auto& entry : j["conditions"])
      if (entry["name"] == "correct") entry["constraint_violation"] = live;
    CoefficientTensor one = model.make_coefficients(1, s.tokens);
    for (const auto& c : in.conditions) {
      double worst = 0;
      for (int r = 0; r < (c->randomized() ? o.reps : 1); ++r)
        for (int w = 0; w < s.windows(); ++w) {
          c->coefficients(w, r, one, 0);
          worst = std::max(worst, constrained->constraint_violation(one.view(), 0));
        }
      for (auto& entry : j["conditions"])
        if (entry["name"] == c->name()) entry["constraint_violation"] = worst;
    }
  }
  j["variance"] = variance_json(in.evaluation, s.routing);
  j["profiles"] = in.profiles->profiles_json();
  if (s.kind().routing_json != nullptr) j["routing"] = s.kind().routing_json(in.evaluation, s.manifest, runs);
  if (const CacheDiagnostics* d = capability<CacheDiagnostics>(model)) {
    if (auto diagnostics = d->cache_diagnostics(in.evaluation); !diagnostics.is_null()) j["diagnostics"] = std::move(diagnostics);
  }
  j["provenance"] = provenance;
  return j;
}

void write_audit_outputs(const AuditSetup& s, const nlohmann::ordered_json& document, const std::vector<ConditionRun>& runs) {
  const std::string& dir = s.options.out_dir;
  write_file_atomically(dir + "/audit.json", [&](std::ostream& out) { out << document.dump(2) << "\n"; });
  const std::vector<double>& base = runs.at(0).nll.at(0);
  write_file_atomically(dir + "/windows.csv", [&](std::ostream& out) {
    out << "condition,rep,window,split_window,nll,delta_nll\n";
    out.precision(17);
    for (const auto& run : runs)
      for (size_t r = 0; r < run.nll.size(); ++r)
        for (int i = 0; i < s.windows(); ++i)
          out << run.name << ',' << r << ',' << i << ',' << s.eval.indices[size_t(i)] << ',' << run.nll[r][size_t(i)] << ','
              << run.nll[r][size_t(i)] - base[size_t(i)] << '\n';
  });
}

}  // namespace fca
