// The page's sections: each row is one figure, measured per corpus from the study's result files
// (paper_sources.h) and printed beside the paper's readings of the same id (paper_values.h).
#include <cmath>
#include <map>
#include <tuple>

#include "audit/statistics.h"

#include "study/paper_sources.h"

namespace fca {
namespace {

std::string variant_label(const std::string& v) {
  static const std::map<std::string, std::string> labels{
      {"dense", "Dense"}, {"uniform", "Uniform"}, {"layerstatic", "LayerStatic"}, {"featuregate", "FeatureGate"},
      {"uniform-matched", "Uniform-Matched"}, {"uniform-0.60", "Uniform-0.60"}, {"mudd", "MUDD"}, {"fixed-depth", "FixedDepth"}};
  return labels.at(v);
}

const char* const kFeatureGateConditions[] = {"cross_input", "token_shuffle", "cross_shuffle", "layer_position_mean", "static_profile",
                                              "structure_removed"};
const char* const kMuddConditions[] = {"cross_input", "token_shuffle", "cross_shuffle", "static_profile", "layer_position_mean",
                                       "structure_removed"};

SectionSpec table1() {
  SectionSpec t1{"table1", "Table 1: quality on the test split",
                 "Byte-PPL and gate mass: mean ± sd over the seeds' checkpoints; wins: seeds where the first variant's Byte-PPL is "
                 "lower; the mean gap: Uniform-Matched's Byte-PPL minus FeatureGate's, same seed. The paper's Table 1 has no Dense "
                 "and no MUDD row: fca's are extensions. The paper's OWT 'Uniform' is the mass-matched one (fca's Uniform-Matched).",
                 {}};
  for (const std::string v : {"dense", "uniform", "layerstatic", "featuregate", "uniform-matched", "uniform-0.60", "mudd"})
    t1.rows.push_back({"table1.byte_ppl." + v, variant_label(v) + " Byte-PPL" + (v == "dense" || v == "mudd" ? " (extension)" : ""),
                       [v](const StudyFigures& f) { return f.mean_sd(v, "byte_ppl", "%.3f ± %.3f"); }});
  for (const std::string v : {"uniform", "layerstatic", "featuregate", "uniform-matched", "uniform-0.60"})
    t1.rows.push_back({"table1.gate_mass." + v, variant_label(v) + " gate mass",
                       [v](const StudyFigures& f) { return f.mean_sd(v, "gate_mass", "%.3f ± %.3f"); }});
  for (const auto& [id, a, b] : {std::tuple<const char*, const char*, const char*>{"layerstatic_vs_uniform", "layerstatic", "uniform"},
                                 {"featuregate_vs_layerstatic", "featuregate", "layerstatic"},
                                 {"featuregate_vs_uniform_matched", "featuregate", "uniform-matched"}}) {
    const std::string x = a, y = b;
    t1.rows.push_back({std::string("table1.wins.") + id, variant_label(x) + " beats " + variant_label(y),
                       [x, y](const StudyFigures& f) { return f.wins(x, y); }});
  }
  t1.rows.push_back({"table1.mean_gap.uniform_matched_minus_featuregate", "mean Byte-PPL gap, Uniform-Matched − FeatureGate",
                     [](const StudyFigures& f) {
                       const auto u = f.per_seed("uniform-matched", "byte_ppl"), g = f.per_seed("featuregate", "byte_ppl");
                       std::vector<double> d;
                       for (size_t i = 0; i < u.size(); ++i) d.push_back(u[i] - g[i]);
                       return Measured{paper_fmt("%+.4f", mean(d)), mean(d), {{"per_checkpoint", d}}};
                     }});
  return t1;
}

SectionSpec figure3() {
  SectionSpec f3{"figure3", "Figure 3: where FeatureGate's coefficients vary (shares of the variance)",
                 "The share of the coefficients' total sum of squares each factor explains, per cent: layer identity, input "
                 "(window), token (position) and their interactions; mean [95% interval over checkpoints]. The paper's "
                 "'interaction' is the input × token term.", {}};
  for (const auto& [id, key, label] : {std::tuple<const char*, const char*, const char*>{"layer", "coordinate", "layer identity"},
                                       {"input", "input", "input"},
                                       {"token", "token", "token"},
                                       {"interaction", "input_x_token", "interaction (input × token)"},
                                       {"layer_x_input", "coordinate_x_input", "layer × input (extension)"},
                                       {"layer_x_token", "coordinate_x_token", "layer × token (extension)"},
                                       {"residual", "residual", "layer × input × token (extension)"}}) {
    const std::string k = key;
    f3.rows.push_back({std::string("figure3.") + id, label,
                       [k](const StudyFigures& f) { return f.interval("featuregate", "variance_share." + k, 100, "%"); }});
  }
  return f3;
}

SectionSpec execution(const PaperConfig& c) {
  SectionSpec ex{"execution", "Execution at batch " + std::to_string(c.study.exec_batch),
                 "Median latency of one forward pass over a batch (live controller), first seed's checkpoint; all timed in the "
                 "same interleaved rounds. Against Dense: the median per-round latency ratio [95% paired interval].", {}};
  for (const std::string v : {"dense", "uniform", "layerstatic", "featuregate"})
    ex.rows.push_back({"execution.ms_per_batch." + v, variant_label(v) + " ms per batch", [v](const StudyFigures& f) {
                         const auto& m = f.live_mode(v);
                         const double ms = m["latency"]["median_s"].get<double>() * 1e3;
                         return Measured{paper_fmt("%.3f ms (p10 %.3f, p90 %.3f); ", ms, m["latency"]["p10_s"].get<double>() * 1e3,
                                                   m["latency"]["p90_s"].get<double>() * 1e3) +
                                             std::to_string(m["executed_blocks"].get<int>()) + " of " +
                                             std::to_string(m["total_blocks"].get<int>()) + " blocks executed",
                                         ms,
                                         {{"executed_blocks", m["executed_blocks"]}, {"total_blocks", m["total_blocks"]},
                                          {"gflop_per_token", m["gflop_per_token"]}}};
                       }});
  auto ratio_of = [](const StudyFigures& f, const std::string& v) -> Measured {
    const auto& r = f.live_mode(v)["latency_ratio_to_dense"];
    if (r.is_null() || r["estimate"].is_null()) return {"undefined (no Dense timed beside it)", nullptr};
    const double e = r["estimate"].get<double>();
    return {paper_fmt("%+.1f%% [%+.1f%%, %+.1f%%]", 100 * (e - 1), 100 * (r["ci95"][0].get<double>() - 1), 100 * (r["ci95"][1].get<double>() - 1)) +
                ": " + r["difference"].get<std::string>(),
            100 * (e - 1),
            {{"ratio", e}, {"ratio_ci95", r["ci95"]}, {"margin", r["margin"]}, {"difference", r["difference"]}}};
  };
  ex.rows.push_back({"execution.featuregate_slower_pct", "FeatureGate % slower than Dense",
                     [ratio_of](const StudyFigures& f) { return ratio_of(f, "featuregate"); }});
  ex.rows.push_back({"execution.featuregate_lower_throughput_pct", "FeatureGate % lower throughput than Dense", [ratio_of](const StudyFigures& f) {
                       Measured m = ratio_of(f, "featuregate");
                       if (m.value.is_null()) return m;
                       // Throughput is the inverse of latency at a fixed batch: 1 - 1/ratio; the interval's ends map in order.
                       const double e = m.data["ratio"], lo = m.data["ratio_ci95"][0], hi = m.data["ratio_ci95"][1];
                       return Measured{paper_fmt("%+.1f%% [%+.1f%%, %+.1f%%]", 100 * (1 - 1 / e), 100 * (1 - 1 / lo), 100 * (1 - 1 / hi)),
                                       100 * (1 - 1 / e), m.data};
                     }});
  ex.rows.push_back({"execution.fixed_depth.blocks", "FixedDepth: blocks of Dense's depth", [](const StudyFigures& f) {
                       const int k = f.variant("fixed-depth").layers, L = f.variant("dense").layers;
                       return Measured{std::to_string(k) + " of " + std::to_string(L) + " blocks (" + paper_fmt("%.1f%%", 100.0 * k / L) +
                                           "; the paper's 15 of 24 is 62.5%)",
                                       double(k) / L, {{"blocks", k}, {"dense_blocks", L}}};
                     }});
  ex.rows.push_back({"execution.fixed_depth.latency_change_pct", "FixedDepth latency change against Dense",
                     [ratio_of](const StudyFigures& f) { return ratio_of(f, "fixed-depth"); }});
  ex.rows.push_back({"execution.fixed_depth.byte_ppl_change", "FixedDepth Byte-PPL change against Dense (quality lost)", [](const StudyFigures& f) {
                       const auto a = f.per_seed("fixed-depth", "byte_ppl"), d = f.per_seed("dense", "byte_ppl");
                       std::vector<double> rel;
                       for (size_t i = 0; i < a.size(); ++i) rel.push_back(100 * (a[i] / d[i] - 1));
                       return Measured{paper_fmt("%+.2f%% (mean over seeds of the same-seed change; ", mean(rel)) +
                                           paper_fmt("%.3f against %.3f)", mean(a), mean(d)),
                                       mean(rel), {{"per_checkpoint", rel}}};
                     }});
  ex.rows.push_back({"execution.mudd_blocks", "MUDD blocks executed", [](const StudyFigures& f) {
                       if (!f.has_exec_model("mudd"))
                         return Measured{"not measured (fca exec times byte-level models; the named MUDD checkpoint is token-level)", nullptr};
                       const auto& m = f.live_mode("mudd");
                       return Measured{std::to_string(m["executed_blocks"].get<int>()) + " of " + std::to_string(m["total_blocks"].get<int>()) +
                                           " blocks executed",
                                       m["executed_blocks"], {{"executed_blocks", m["executed_blocks"]}, {"total_blocks", m["total_blocks"]}}};
                     }});
  return ex;
}

// Post-training thresholding of FeatureGate: exec's skip sweep (blocks whose calibrated static gate
// is below tau are removed from the executed graph), executed blocks against Byte-PPL.
SectionSpec thresholding() {
  SectionSpec th{"thresholding", "Post-training thresholding of FeatureGate",
                 "Blocks whose calibrated gate (the mean gate of the block on valid windows) is below the threshold τ are removed "
                 "from the executed graph (fca exec's skip sweep, first seed's checkpoint); per τ: executed blocks, Byte-PPL on "
                 "test windows and the latency against τ = 0 (nothing removed).", {}};
  th.rows.push_back({"thresholding.featuregate", "τ: executed blocks, Byte-PPL, latency", [](const StudyFigures& f) {
                       const auto& m = f.exec_model("featuregate");
                       if (!m.contains("skip_sweep")) return Measured{"not measured (the config's exec.skip_thresholds is empty)", nullptr};
                       std::string t;
                       nlohmann::ordered_json points = nlohmann::ordered_json::array();
                       for (const auto& s : m["skip_sweep"]) {
                         const double ppl = std::exp(s["nll"].get<double>());
                         const auto& r = s["latency_ratio_to_unskipped"];
                         t += (t.empty() ? "" : "; ") + paper_fmt("τ %.2g: %.0f of %.0f blocks, Byte-PPL %.3f", s["threshold"].get<double>(),
                                                                  s["executed_blocks"].get<double>(), s["total_blocks"].get<double>(), ppl);
                         if (r.is_object() && r["estimate"].is_number()) t += paper_fmt(", latency %+.0f%%", 100 * (r["estimate"].get<double>() - 1));
                         points.push_back({{"threshold", s["threshold"]}, {"executed_blocks", s["executed_blocks"]},
                                           {"total_blocks", s["total_blocks"]}, {"byte_ppl", ppl}});
                       }
                       return Measured{t, points.size(), {{"sweep", points}}};
                     }});
  return th;
}

SectionSpec mudd_table2() {
  SectionSpec mu{"mudd", "Table 2: the MUDD audit",
                 "MUDD's penalties (ΔNLL) for each condition (static_profile is StaticMixMean, structure_removed SourceUniformMean), "
                 "retention against SourceUniformMean (per cent), the factor effects and exact replay. A trained MUDD: mean [95% "
                 "interval over checkpoints]; a named checkpoint (the paper's MUDDPythia arm): one checkpoint, paired-window "
                 "bootstrap interval.", {}};
  for (const std::string cond : kMuddConditions)
    mu.rows.push_back({"mudd." + cond, cond, [cond](const StudyFigures& f) { return f.penalty("mudd", cond); }});
  for (const std::string p : {"static_profile", "layer_position_mean"})
    mu.rows.push_back({"mudd.retention." + p, "retention of " + p + " against SourceUniformMean",
                       [p](const StudyFigures& f) { return f.interval("mudd", "retention." + p, 100, "%"); }});
  for (const std::string e : {"input", "token", "interaction"})
    mu.rows.push_back({"mudd.factors." + e, e + " effect", [e](const StudyFigures& f) { return f.interval("mudd", "factor_effect." + e); }});
  mu.rows.push_back({"mudd.exact_replay", "exact replay", [](const StudyFigures& f) {
                       int exact = 0, n = 0;
                       double worst = 0;
                       for (const auto& a : f.audits("mudd")) {
                         const auto& r = a["exact_replay"];
                         const bool ok = r["differing_logits"] == 0 && r["differing_nll_windows"] == 0 && r["non_finite"] == 0;
                         exact += ok, ++n;
                         worst = std::max(worst, r["max_abs_delta_logit"].get<double>());
                       }
                       return Measured{"exact in " + std::to_string(exact) + " of " + std::to_string(n) +
                                           paper_fmt(" checkpoints (largest |Δlogit| %.3g; every window's NLL and logits compared)", worst),
                                       exact == n, {{"exact", exact}, {"checkpoints", n}}};
                     }});
  return mu;
}

SectionSpec figure5() {
  SectionSpec f5{"figure5", "Figure 5: MUDD's penalties against FeatureGate's (orders of magnitude)",
                 "log10 of MUDD's mean ΔNLL over FeatureGate's, per condition: 1 is ten times larger, 3 a thousand times.", {}};
  for (const std::string cond : {"cross_input", "token_shuffle", "layer_position_mean", "static_profile"})
    f5.rows.push_back({"figure5.orders." + cond, cond, [cond](const StudyFigures& f) {
                         const Figure m = f.figure("mudd", "delta_nll." + cond), g = f.figure("featuregate", "delta_nll." + cond);
                         if (!m.defined() || !g.defined() || m.mean.get<double>() <= 0 || g.mean.get<double>() <= 0)
                           return Measured{"undefined (a penalty is undefined or not positive)", nullptr};
                         const double orders = std::log10(m.mean.get<double>() / g.mean.get<double>());
                         return Measured{paper_fmt("%.2f (MUDD %.4g, FeatureGate %.4g)", orders, m.mean.get<double>(), g.mean.get<double>()),
                                         orders, {{"mudd", m.mean}, {"featuregate", g.mean}}};
                       }});
  return f5;
}

}  // namespace

std::vector<SectionSpec> paper_sections(const PaperConfig& c) {
  std::vector<SectionSpec> s;
  s.push_back(table1());

  SectionSpec f2{"figure2", "Figure 2: FeatureGate's NLL penalty per condition",
                 "ΔNLL (nats per byte) against the correct coefficients: mean over checkpoints [95% bootstrap interval over checkpoints]; "
                 "the Monte Carlo standard error of the randomised conditions (mean over checkpoints); the seeds with a positive penalty.", {}};
  for (const std::string cond : kFeatureGateConditions)
    f2.rows.push_back({"figure2." + cond, cond, [cond](const StudyFigures& f) { return f.penalty("featuregate", cond); }});
  s.push_back(f2);
  s.push_back(figure3());

  SectionSpec f4{"figure4", "Figure 4: static-profile retention of the Correct-to-GlobalMean gap (FeatureGate)",
                 "Retention = 1 − ΔNLL(profile) / ΔNLL(GlobalMean), in per cent; mean [95% interval over checkpoints].", {}};
  f4.rows.push_back({"figure4.gap", "Correct-to-GlobalMean gap (ΔNLL of structure_removed)",
                     [](const StudyFigures& f) { return f.interval("featuregate", "delta_nll.structure_removed"); }});
  for (const std::string p : {"static_profile", "layer_position_mean"})
    f4.rows.push_back({"figure4.retention." + p, "retention of " + p,
                       [p](const StudyFigures& f) { return f.interval("featuregate", "retention." + p, 100, "%"); }});
  s.push_back(f4);

  SectionSpec fx{"factors", "Factor effects (FeatureGate)",
                 "Factorial contrasts of input and token reassignment (ΔNLL), with Holm-adjusted sign-flip p-values over checkpoints. "
                 "Mean [95% interval over checkpoints].", {}};
  for (const std::string e : {"input", "token", "interaction"})
    fx.rows.push_back({"factors." + e, e + " effect", [e](const StudyFigures& f) {
                         Measured m = f.interval("featuregate", "factor_effect." + e);
                         const Figure fig = f.figure("featuregate", "factor_effect." + e);
                         if (fig.holm_p.is_number()) {
                           m.text += paper_fmt("; Holm p %.3g", fig.holm_p.get<double>());
                           m.data["holm_p"] = fig.holm_p;
                         }
                         return m;
                       }});
  s.push_back(fx);
  s.push_back(execution(c));
  s.push_back(thresholding());
  s.push_back(mudd_table2());
  s.push_back(figure5());
  return s;
}

}  // namespace fca
