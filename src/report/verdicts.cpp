// The three-claim verdicts: one card per configuration (the checkpoints of an aggregate share one).
#include <algorithm>
#include <cmath>
#include <set>

#include "core/undefined_statistic.h"
#include "exec/exec.h"
#include "exec/timing.h"
#include "report/report.h"
#include "report/report_util.h"

namespace fca {
namespace {

using report_util::fmt;

// The variance shares, by name; NaN where undefined.
struct Shares {
  double coordinate, input, token, coordinate_x_input, coordinate_x_token, input_x_token, residual;
};

// Claim 1 in words. `over` is "" for one audit, else " (mean over N checkpoints)". Every share that
// makes up the input- or token-dependent part is named, interactions included: for routers most of
// it is coordinate x token (which expert a token picks), not a main effect.
std::string variation_text(const Shares& s, double total_variance, const std::string& over, bool& varies) {
  const double dynamic = std::max(0.0, 1.0 - s.coordinate);
  varies = std::isfinite(s.coordinate) && dynamic >= 0.01;  // a constant tensor has no shares (constant_text)
  auto pct = [](double v) { return fmt("%.1f%%", 100 * v); };
  std::string t = (varies ? "Coefficients vary with input and position: " : "Coefficients are essentially static: ") + pct(dynamic) +
                  " of their variance is input- or token-dependent" + over + ": input " + pct(s.input) + ", token " + pct(s.token) +
                  ", coordinate x input " + pct(s.coordinate_x_input) + ", coordinate x token " + pct(s.coordinate_x_token) +
                  ", input x token " + pct(s.input_x_token) + ", three-way residual " + pct(s.residual) +
                  " (coordinate alone " + pct(s.coordinate);
  if (std::isfinite(total_variance)) t += "; total variance " + fmt("%.3g", total_variance);
  return t + ").";
}

std::string constant_text(const std::string& reason) {
  return "Coefficients do not vary; the variance shares are undefined: " + reason + ".";
}

std::string dependence_text(double mean, double lo, double hi, bool small, double threshold, const std::string& over,
                            const std::string& retention, bool& depends) {
  depends = lo > threshold;
  const std::string lead = small     ? "The frozen model does not need its dynamic coefficients: the static profile costs "
                           : depends ? "The frozen model depends on its dynamic coefficients: the static profile costs "
                                     : "Not established either way: the static profile costs ";
  const std::string rule = small ? "upper bound < " : depends ? "lower bound > " : "interval straddles ";
  return lead + fmt("%+.4f", mean) + " nats/token [" + fmt("%+.4f", lo) + ", " + fmt("%+.4f", hi) + "]" + over + " (" + rule +
         fmt("%g", threshold) + ")" + retention + ".";
}

// "; retention 97.1% [95.0, 99.0]%" or "; retention undefined: <reason>".
std::string retention_text(const nlohmann::json& stat, const char* value_key) {
  if (is_undefined_statistic(stat)) return "; retention undefined: " + undefined_reason(stat);
  return "; retention " + fmt("%.1f%%", 100 * stat[value_key].get<double>()) + " [" + fmt("%.1f", 100 * stat["ci95"][0].get<double>()) +
         ", " + fmt("%.1f", 100 * stat["ci95"][1].get<double>()) + "]%";
}

void audit_verdicts(const nlohmann::json& j, Verdicts& v) {
  const auto& variance = j["variance"];
  const auto& sh = variance["shares"];
  if (sh["coordinate"].is_null()) {
    v.variation = constant_text(undefined_reason(variance));
  } else {
    auto g = [&](const char* k) { return sh[k].get<double>(); };
    v.variation = variation_text({g("coordinate"), g("input"), g("token"), g("coordinate_x_input"), g("coordinate_x_token"),
                                  g("input_x_token"), g("residual")},
                                 variance["total_variance"].get<double>(), "", v.varies);
  }
  const nlohmann::json* st = report_util::find_condition(j, "static_profile");
  if (st == nullptr) {
    v.dependence = "Not assessed: the audit ran without the static_profile condition.";
    return;
  }
  const bool has_criterion = j["criteria"].contains("static_penalty_small");
  const bool small = has_criterion && j["criteria"]["static_penalty_small"]["holds"].get<bool>();
  const double threshold = has_criterion ? j["criteria"]["static_penalty_small"]["threshold"].get<double>() : 0.002;
  const std::string ret = j["retention"].contains("static_profile") ? retention_text(j["retention"]["static_profile"], "estimate") : "";
  v.dependence = dependence_text((*st)["delta_nll"], (*st)["ci95"][0], (*st)["ci95"][1], small, threshold, "", ret, v.needs_dynamic);
}

// Claims 1 and 2 from an aggregate: the checkpoint-level means and bootstrap CIs, and the criteria
// it applied to them.
void aggregate_verdicts(const nlohmann::json& g, Verdicts& v) {
  const auto& f = g["figures"];
  const std::string over = " (mean over " + std::to_string(g["checkpoints"].get<int>()) + " checkpoints)";
  auto mean_of = [&](const std::string& name) {
    return f.contains(name) && !is_undefined_statistic(f[name]) ? f[name]["mean"].get<double>() : std::nan("");
  };
  if (f.contains("variance_share.coordinate") && is_undefined_statistic(f["variance_share.coordinate"])) {
    v.variation = constant_text(undefined_reason(f["variance_share.coordinate"]));
    v.varies = false;
  } else {
    v.variation = variation_text({mean_of("variance_share.coordinate"), mean_of("variance_share.input"), mean_of("variance_share.token"),
                                  mean_of("variance_share.coordinate_x_input"), mean_of("variance_share.coordinate_x_token"),
                                  mean_of("variance_share.input_x_token"), mean_of("variance_share.residual")},
                                 std::nan(""), over, v.varies);
  }
  if (!f.contains("delta_nll.static_profile") || is_undefined_statistic(f["delta_nll.static_profile"]) || !g.contains("criteria") ||
      !g["criteria"].contains("static_penalty_small")) {
    v.dependence = "Not assessed: the aggregate has no checkpoint-level static_profile penalty.";
    return;
  }
  const auto& st = f["delta_nll.static_profile"];
  const auto& crit = g["criteria"]["static_penalty_small"];
  const std::string ret = f.contains("retention.static_profile") ? retention_text(f["retention.static_profile"], "mean") : "";
  v.dependence = dependence_text(st["mean"], st["ci95"][0], st["ci95"][1], crit["holds"].get<bool>(), crit["threshold"], " over checkpoints",
                                 ret, v.needs_dynamic);
}

// A latency ratio of exec.json in a sentence: "x1.04 [1.01, 1.07] <what>: no measurable difference
// at this size", or why it is undefined.
std::string latency_ratio_words(const nlohmann::json& r, const std::string& what) {
  if (r["estimate"].is_null()) return what + " undefined (" + r.value("note", std::string("no reason given")) + ")";
  return fmt("%.2fx", r["estimate"].get<double>()) + " " + what + " [" + fmt("%.2f", r["ci95"][0].get<double>()) + ", " +
         fmt("%.2f", r["ci95"][1].get<double>()) + "]: " + r["difference"].get<std::string>();
}

// Claim 3 from one exec entry.
std::string execution_text(const nlohmann::json& e, bool& saves_compute) {
  std::string t;
  const auto& live = e["modes"][0];
  const bool has_ratio = live.contains("latency_ratio_to_dense") && !live["latency_ratio_to_dense"].is_null();
  t = std::to_string(live["executed_blocks"].get<int>()) + "/" + std::to_string(live["total_blocks"].get<int>()) +
      " blocks execute with the live controller; " + fmt("%.2f", 1e3 * live["latency"]["median_s"].get<double>()) + " ms per batch" +
      (has_ratio ? ", " + latency_ratio_words(live["latency_ratio_to_dense"], "Dense latency") : std::string(""));
  saves_compute = live["executed_blocks"].get<int>() < live["total_blocks"].get<int>();
  if (e.contains("savings")) {
    // Models measured against baselines (routed, multi-stream): a saving is claimed only where
    // counted FLOPs are lower and the latency is measurably lower (the whole paired interval below
    // 1 - margin). The controller's and the mixing's shares of the live FLOPs say what they cost.
    const auto& kinds = live["gflop_per_pass_by_kind"];
    const double total = kinds["gemm"].get<double>() + kinds["controller"].get<double>() + kinds["mixing"].get<double>();
    std::string shares;
    for (const char* kind : {"controller", "mixing"})
      if (kinds[kind].get<double>() > 0)
        shares += std::string(shares.empty() ? " (" : ", ") + kind + " " + fmt("%.1f%%", 100 * kinds[kind].get<double>() / total);
    if (!shares.empty()) shares += ")";
    t = "Live execution runs " + fmt("%.3g", live["gflop_per_token"].get<double>() * 1e3) + " MFLOP/token" + shares + " in " +
        fmt("%.2f", 1e3 * live["latency"]["median_s"].get<double>()) + " ms per batch";
    if (live.contains("mean_depth")) {  // per-token depth (early exit): how deep tokens ran, and the static truncation curve
      t += ", tokens running " + fmt("%.2f", live["mean_depth"].get<double>()) + " of " +
           std::to_string(live["total_blocks"].get<int>()) + " blocks on average";
      if (live.contains("nll_minus_fixed_depth_at_equal_flops") && !live["nll_minus_fixed_depth_at_equal_flops"].is_null())
        t += " at " + fmt("%+.4f", live["nll_minus_fixed_depth_at_equal_flops"].get<double>()) +
             " nats against the same weights truncated to a fixed depth of equal FLOPs (negative: dynamic depth is better)";
    }
    saves_compute = false;
    for (const auto& s : e["savings"]) {
      const bool saves = s["saves"].get<bool>();
      const std::string mode = s["mode"].get<std::string>();
      t += "; " + (mode == "live" ? std::string() : mode + " ") + "against " + s["against"].get<std::string>() + ": ";
      if (s["flop_ratio"].is_null() || s["latency_ratio"]["estimate"].is_null())
        t += "no saving claimed (" + s.value("note", std::string("undefined ratio")) + ")";
      else
        t += (saves ? "saves " + fmt("%.0f%%", 100 * s["flop_saving"].get<double>()) + " of the FLOPs and " +
                          fmt("%.0f%%", 100 * s["latency_saving"].get<double>()) + " of the time, "
                    : "no saving claimed (FLOPs x" + fmt("%.2f", s["flop_ratio"].get<double>()) + ", ") +
             latency_ratio_words(s["latency_ratio"], "the latency") + (saves ? "" : ")");
      if (saves && (s["against"] == "dense_same_shape" || (mode == "live" && s["against"] == "full_depth"))) saves_compute = true;
    }
  }
  if (e.contains("skip_sweep")) {
    // The largest removal whose NLL stays within 0.01 nats of the unskipped static model.
    const auto& sweep = e["skip_sweep"];
    const double base = sweep[0]["nll"];
    const nlohmann::json* best = nullptr;
    for (const auto& s : sweep)
      if (s["nll"].get<double>() - base <= 0.01 && (!best || s["executed_blocks"] < (*best)["executed_blocks"])) best = &s;
    if (best && (*best)["executed_blocks"] < live["executed_blocks"]) {
      const int removed = live["executed_blocks"].get<int>() - (*best)["executed_blocks"].get<int>();
      t += "; a real skip (tau " + fmt("%g", (*best)["threshold"].get<double>()) + ") removes " + std::to_string(removed) +
           (removed == 1 ? " block" : " blocks") + " at " + fmt("%+.4f", (*best)["nll"].get<double>() - base) + " nats, " +
           latency_ratio_words((*best)["latency_ratio_to_unskipped"], "the latency of the same static gates with nothing removed");
    } else {
      t += "; no block can be removed within 0.01 nats";
    }
  }
  return t + ".";
}

// Claim 3 of a model run by an adapter (fca exec --external): what ran, counted in the adapter's
// process by module hooks and at the dispatcher, and its latency against the reference it names.
std::string external_execution_text(const nlohmann::json& e, bool& saves_compute) {
  const auto& live = e["modes"][0];
  std::string t;
  saves_compute = false;
  if (!live["executed_blocks"].is_null()) {
    const double executed = live["executed_blocks"].get<double>(), total = live["total_blocks"].get<double>();
    t = fmt("%.3g", executed) + " of " + fmt("%g", total) + " blocks per token execute with the live controller";
    saves_compute = executed < total;
  } else {
    t = "Executed blocks not counted (the adapter names no block modules)";
  }
  for (const auto& [kind, per_token] : live["executed_units_per_token"].items())
    if (kind != "blocks")
      t += ", " + kind + " " + fmt("%.3g", per_token.get<double>()) + " of " + std::to_string(e["units"][kind].get<int>()) + " per token";
  const auto& kinds = live["gflop_per_pass_by_kind"];
  const double total_gflop = kinds["gemm"].get<double>() + kinds["controller"].get<double>();
  t += "; " + fmt("%.3g", live["gflop_per_token"].get<double>() * 1e3) + " MFLOP/token" +
       (kinds["controller"].get<double>() > 0 ? " (controller " + fmt("%.2g%%", 100 * kinds["controller"].get<double>() / total_gflop) + ")"
                                              : std::string()) +
       " in " + fmt("%.2f", 1e3 * live["latency"]["median_s"].get<double>()) + " ms per batch on " + e["device"].get<std::string>() +
       " (measured in the adapter's process)";
  if (!e["reference"].is_null()) {
    const std::string reference = e["reference"]["label"].get<std::string>();
    for (const auto& m : e["modes"])
      if (m["mode"] != "reference" && !m["latency_ratio_to_reference"].is_null())
        t += "; " + m["mode"].get<std::string>() + ": " + latency_change_words(m["latency_ratio_to_reference"], reference);
    for (const auto& s : e.value("savings", nlohmann::json::array()))
      saves_compute = saves_compute || (s["mode"] == "live" && s["saves"].get<bool>());
  }
  const std::string uncounted = uncounted_ops_text(live);
  if (!uncounted.empty()) t += "; operators without a FLOP formula, not counted: " + uncounted;
  const std::string unseen = unseen_work_text(live);
  if (!unseen.empty()) t += "; work the counter could not see, not counted: " + unseen;
  for (const auto& s : e.value("savings", nlohmann::json::array()))
    if (s["mode"] == "live" && !s.value("fully_counted", true)) t += "; no saving claimed: " + s["note"].get<std::string>();
  return t + ".";
}

}  // namespace

std::vector<Verdicts> compute_verdicts(const ReportData& d) {
  std::vector<Verdicts> out;
  std::set<const ReportData::Named*> carded;  // aggregates that already have their card
  for (const auto& a : d.audits) {
    const auto& j = a.doc;
    Verdicts v;
    v.model = j["model"]["description"].get<std::string>();
    v.family = j["model"]["family"];
    v.sha256 = j["provenance"]["model_sha256"];
    std::vector<std::string> group{v.sha256};  // the card's checkpoints, by weights hash
    const ReportData::Named* g = report_util::find_aggregate(d, v.sha256);
    if (g != nullptr && !carded.insert(g).second) continue;  // this configuration has its card
    audit_verdicts(j, v);
    if (g != nullptr) {
      // Several checkpoints of this configuration: claims 1 and 2 at the checkpoint level.
      aggregate_verdicts(g->doc, v);
      v.basis = "Claims 1 and 2 at the checkpoint level: aggregate of " + std::to_string(g->doc["checkpoints"].get<int>()) +
                " independently trained checkpoints (" + g->path + "), bootstrap over checkpoints.";
      group.clear();
      for (const auto& in : g->doc["inputs"]) {
        const std::string sha = in.value("model_sha256", "");
        group.push_back(sha);
        v.checkpoints.push_back(d.label(sha, in["path"].get<std::string>()) + " (" + in["path"].get<std::string>() + ")");
      }
    } else {
      v.model += " · " + report_util::audit_label(d, j);
      v.basis = "One checkpoint: window-level CIs of " + a.path + ".";
    }
    // An audit whose replay ignored the coefficients it was handed (run with
    // --allow-insensitive-replay): its penalties are 0 by construction, so claim 2 is not assessed.
    for (const auto& other : d.audits)
      if (std::find(group.begin(), group.end(), other.doc["provenance"]["model_sha256"].get<std::string>()) != group.end() &&
          other.doc.contains("replay_sensitivity") && !other.doc["replay_sensitivity"].value("passed", true)) {
        v.dependence = "Not assessed: the replay did not depend on the coefficients it was handed (" +
                       report_util::audit_label(d, other.doc) +
                       ", audited with --allow-insensitive-replay), so every penalty is 0 by construction, not evidence.";
        v.needs_dynamic = false;
        v.warning = "Replay ignored its coefficients: the functional-dependence figures of this model are not evidence.";
      }
    // 3. Actual execution, measured by fca exec on whichever of the card's checkpoints it timed.
    std::vector<std::pair<std::string, const nlohmann::json*>> timed;
    for (const auto& sha : group)
      if (const nlohmann::json* e = report_util::find_exec(d, sha, v.family == "external")) timed.push_back({d.label(sha, sha.substr(0, 12)), e});
    if (timed.empty()) {
      v.execution = "Not measured (no exec.json among the inputs times " +
                    std::string(group.size() > 1 ? "any of these checkpoints" : "this checkpoint") + ").";
    } else {
      if (group.size() > 1) {
        std::string names;
        for (const auto& [label, e] : timed) names += (names.empty() ? "" : ", ") + label;
        v.execution = "Timed on " + names + " (" + std::to_string(timed.size()) + " of " + std::to_string(group.size()) +
                      " checkpoints" + (timed.size() > 1 ? "; figures of " + timed.front().first : std::string()) + "): ";
      }
      const nlohmann::json& e = *timed.front().second;
      v.execution += e["family"] == "external" ? external_execution_text(e, v.saves_compute) : execution_text(e, v.saves_compute);
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace fca
