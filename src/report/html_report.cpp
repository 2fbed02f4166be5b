// Assembling the HTML report (self-contained, no scripts) and its Markdown summary.
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <sstream>

#include "ops/provenance.h"
#include "core/undefined_statistic.h"
#include "report/report.h"
#include "report/report_util.h"
#include "report/svg.h"

namespace fca {
namespace {

using svg::escape;

using report_util::fmt;

std::string ci(const nlohmann::json& c, const char* f = "%+.5f") { return report_util::interval(c, f); }

// A latency ratio of exec.json in a table cell: "1.035 [1.009, 1.057]", then "slower" or "faster"
// where exec called it so (the whole interval beyond 1 +- margin).
std::string ratio_cell(const nlohmann::json& r) {
  if (r.is_null()) return "–";
  if (r["estimate"].is_null()) return r.value("note", std::string("undefined"));
  const std::string d = r["difference"].get<std::string>();
  return fmt("%.3f", r["estimate"].get<double>()) + " [" + fmt("%.3f", r["ci95"][0].get<double>()) + ", " +
         fmt("%.3f", r["ci95"][1].get<double>()) + "]" + (d == "slower" || d == "faster" ? " " + d : "");
}

const char* const kStyle = R"(
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222; max-width: 1100px; margin: 24px auto; padding: 0 16px; line-height: 1.45; }
h1 { font-size: 26px; margin-bottom: 4px; } h2 { font-size: 20px; margin-top: 36px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.sub { color: #666; font-size: 13px; }
.cards { display: flex; flex-wrap: wrap; gap: 16px; }
.card { flex: 1 1 320px; border: 1px solid #ddd; border-radius: 8px; padding: 12px 16px; background: #fafafa; }
.card h3 { margin: 0 0 8px 0; font-size: 16px; }
.basis { margin: 4px 0; font-size: 12px; color: #555; }
.warn { margin: 4px 0; padding: 6px 8px; font-size: 13px; font-weight: bold; color: #8a1c1c; background: #fde8e8; border: 1px solid #d62728; border-radius: 4px; }
.claim { margin: 8px 0; padding-left: 10px; border-left: 4px solid #999; font-size: 14px; }
.claim b { display: block; font-size: 12px; text-transform: uppercase; letter-spacing: 0.04em; color: #555; }
.yes { border-color: #d62728; } .no { border-color: #2ca02c; } .na { border-color: #aaa; }
table { border-collapse: collapse; margin: 8px 0 16px 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: right; } th { background: #f0f0f0; } td.l, th.l { text-align: left; }
figure { margin: 16px 0; } figcaption { font-size: 13px; color: #555; margin-top: 4px; max-width: 900px; }
code { font-size: 12px; }
.reproduces { color: #1b6e1b; font-weight: bold; } .does-not { color: #8a1c1c; font-weight: bold; } .not-comparable { color: #666; font-weight: bold; } .extension { color: #5a4a8a; font-style: italic; }
td.paper { color: #666; font-style: italic; }
)";

}  // namespace

const char* report_util::report_style() { return kStyle; }

namespace {

void html_figure(std::ostream& h, const std::string& id, const std::string& svg, const std::string& caption) {
  if (svg.empty()) return;
  h << "<figure id=\"" << id << "\">" << svg << "<figcaption>" << escape(caption) << "</figcaption></figure>\n";
}

// One card per model: the three claims, each decided on its own.
void html_verdicts(std::ostream& h, const ReportData& d) {
  const auto verdicts = compute_verdicts(d);
  if (!verdicts.empty()) {
    h << "<h2 id=\"verdicts\">Verdicts</h2><div class=\"cards\">";
    for (const auto& v : verdicts) {
      h << "<div class=\"card\"><h3>" << escape(v.model) << "</h3>";
      if (!v.warning.empty()) h << "<p class=\"warn\">" << escape(v.warning) << "</p>";
      h << "<p class=\"basis\">" << escape(v.basis) << "</p>";
      h << "<div class=\"claim " << (v.varies ? "yes" : "no") << "\"><b>1. Coefficient variation</b>" << escape(v.variation) << "</div>";
      const bool undecided = v.dependence.rfind("Not ", 0) == 0;
      h << "<div class=\"claim " << (undecided ? "na" : (v.needs_dynamic ? "yes" : "no")) << "\"><b>2. Functional dependence</b>" << escape(v.dependence)
        << "</div>";
      h << "<div class=\"claim " << (v.execution.rfind("Not measured", 0) == 0 ? "na" : (v.saves_compute ? "yes" : "no"))
        << "\"><b>3. Actual execution</b>" << escape(v.execution) << "</div>";
      if (!v.checkpoints.empty()) {
        h << "<p class=\"basis\">Per-checkpoint audits:</p><ul class=\"basis\">";
        for (const auto& c : v.checkpoints) h << "<li>" << escape(c) << "</li>";
        h << "</ul>";
      }
      h << "</div>";
    }
    h << "</div><p class=\"sub\">Red edge: the claim holds for this model (it varies / needs its dynamic coefficients / "
         "saves executed blocks); green: it does not; grey: not measured or not established. Functional dependence uses the criteria fixed "
         "before the audit (printed with each audit).</p>\n";
  }

}

// Table-1 style: one row per configuration, mean and sd over seeds. A study's evaluations name
// their variant, which groups its seeds even where their configs differ (Uniform-Matched: each
// seed's gate value is its source seed's gate mass).
void html_quality(std::ostream& h, const ReportData& d) {
  if (!d.evals.empty()) {
    std::map<std::string, std::vector<const nlohmann::json*>> groups;
    for (const auto& e : d.evals) {
      const std::string variant = e.doc.contains("variant") && e.doc["variant"].is_string() ? e.doc["variant"].get<std::string>() : "";
      groups[variant.empty() ? e.doc["config"].dump() : "variant " + variant].push_back(&e.doc);
    }
    h << "<h2 id=\"quality\">Model quality</h2><table><tr><th class=\"l\">configuration</th><th>seeds</th>"
         "<th>Byte-PPL mean</th><th>sd</th><th>bits/byte</th><th>gate mass</th></tr>";
    for (const auto& [key, docs] : groups) {
      double m = 0, m2 = 0, bits = 0, gate = 0;
      int gates = 0;
      for (const auto* e : docs) {
        m += (*e)["byte_ppl"].get<double>();
        bits += (*e)["nll"].get<double>() / std::log(2.0);
        if ((*e).contains("gate_mass") && !(*e)["gate_mass"].is_null()) gate += (*e)["gate_mass"].get<double>(), ++gates;
      }
      m /= double(docs.size());
      for (const auto* e : docs) m2 += std::pow((*e)["byte_ppl"].get<double>() - m, 2);
      const double sd = docs.size() > 1 ? std::sqrt(m2 / double(docs.size() - 1)) : 0;
      const nlohmann::json& c = (*docs.front())["config"];
      const std::string variant = docs.front()->contains("variant") && (*docs.front())["variant"].is_string()
                                      ? (*docs.front())["variant"].get<std::string>() + ": "
                                      : "";
      const bool matched = docs.size() > 1 && (*docs.front())["config"] != (*docs.back())["config"];
      const std::string name = variant + (matched ? (*docs.front())["family"].get<std::string>() + " (per-seed settings)"
                                                  : (*docs.front())["label"].get<std::string>()) + " L" +
                               std::to_string(c.value("n_layer", 0)) + " D" +
                               std::to_string(c.contains("d_model") ? c["d_model"].get<int>() : c.value("dim", 0));
      h << "<tr><td class=\"l\">" << escape(name) << "</td><td>" << docs.size() << "</td><td>" << fmt("%.4f", m) << "</td><td>"
        << fmt("%.4f", sd) << "</td><td>" << fmt("%.4f", bits / double(docs.size())) << "</td><td>"
        << (gates ? fmt("%.3f", gate / gates) : std::string("–")) << "</td></tr>";
    }
    h << "</table>\n";
  }

}

// One audit's tables: conditions, retention, the constraint's violations, diagnostics, factor effects.
void html_audit_tables(std::ostream& h, const ReportData& d, const ReportData::Named& a) {
  // Records that change how much runs (early exit): each condition's mean depth and GEMM FLOPs.
  const bool compute = !a.doc["conditions"].empty() && a.doc["conditions"][0].contains("compute");
  h << "<h3>" << escape(report_util::audit_heading(d, a.doc)) << "</h3><table><tr><th class=\"l\">condition</th>"
       "<th>DeltaNLL</th><th class=\"l\">95% CI</th><th>MC SE</th><th>controller evals</th>"
    << (compute ? "<th>mean depth</th><th>GEMM MFLOP/token</th>" : "") << "</tr>";
  for (const auto& c : a.doc["conditions"]) {
    h << "<tr><td class=\"l\">" << escape(c["name"].get<std::string>()) << "</td><td>" << fmt("%+.5f", c["delta_nll"].get<double>())
      << "</td><td class=\"l\">" << ci(c["ci95"]) << "</td><td>"
      << (c.contains("mc_se") && !c["mc_se"].is_null() ? fmt("%.5f", c["mc_se"].get<double>()) : std::string("–")) << "</td><td>"
      << c.value("controller_evaluations", 0) << "</td>";
    if (compute)
      h << "<td>" << fmt("%.3f", c["compute"]["mean_depth"].get<double>()) << "</td><td>"
        << fmt("%.4f", c["compute"]["gemm_gflop_per_token_of_record"].get<double>() * 1e3) << "</td>";
    h << "</tr>";
  }
  h << "</table>";
  if (!a.doc["retention"].empty()) {
    h << "<table><tr><th class=\"l\">retention of</th><th>estimate</th><th class=\"l\">95% CI</th><th>profile DeltaNLL</th>"
         "<th>structure_removed DeltaNLL</th></tr>";
    for (auto it = a.doc["retention"].begin(); it != a.doc["retention"].end(); ++it) {
      const auto& r = it.value();
      h << "<tr><td class=\"l\">" << escape(it.key()) << "</td>";
      if (is_undefined_statistic(r))
        h << "<td colspan=\"2\" class=\"l\">undefined: " << escape(undefined_reason(r)) << "</td>";
      else
        h << "<td>" << fmt("%.1f%%", 100 * r["estimate"].get<double>()) << "</td><td class=\"l\">" << report_util::interval(r["ci95"], "%.1f%%", 100)
          << "</td>";
      h << "<td>" << fmt("%+.5f", r["delta_nll"].get<double>()) << "</td><td>" << fmt("%+.5f", r["structure_removed_delta_nll"].get<double>())
        << "</td></tr>";
    }
    h << "</table>";
  }
  if (a.doc["model"].contains("coefficient_constraint"))
    h << "<p class=\"sub\">Largest violation of the live coefficients' constraint (" << escape(a.doc["model"]["coefficient_constraint"].get<std::string>())
      << ") in what each condition replayed: "
      << [&] {
           std::string t;
           for (const auto& c : a.doc["conditions"])
             if (c.contains("constraint_violation"))
               t += (t.empty() ? "" : ", ") + c["name"].get<std::string>() + " " + fmt("%.3g", c["constraint_violation"].get<double>());
           return escape(t);
         }()
      << ".</p>";
  if (a.doc.contains("diagnostics")) {
    h << "<p class=\"sub\">Diagnostics computed from the cached evaluation coefficients alone:</p>";
    for (const auto& t : report_util::diagnostics_tables(a.doc["diagnostics"])) {
      h << "<table><tr><th class=\"l\" colspan=\"" << t.header.size() << "\">" << escape(t.title) << "</th></tr><tr>";
      for (const auto& c : t.header) h << "<th>" << escape(c) << "</th>";
      h << "</tr>";
      for (const auto& r : t.rows) {
        h << "<tr>";
        for (size_t i = 0; i < r.size(); ++i) h << (i == 0 ? "<td class=\"l\">" : "<td>") << escape(r[i]) << "</td>";
        h << "</tr>";
      }
      h << "</table>";
    }
  }
  if (!a.doc["factor_effects"].is_null()) {
    h << "<table><tr><th class=\"l\">factor effect</th><th>estimate</th><th class=\"l\">95% CI</th></tr>";
    for (const char* f : {"input", "token", "interaction"})
      h << "<tr><td class=\"l\">" << f << "</td><td>" << fmt("%+.5f", a.doc["factor_effects"][f]["estimate"].get<double>())
        << "</td><td class=\"l\">" << ci(a.doc["factor_effects"][f]["ci95"]) << "</td></tr>";
    h << "</table>";
  }
}

void html_dependence_and_variation(std::ostream& h, const ReportData& d) {
  if (!d.audits.empty()) {
    h << "<h2 id=\"dependence\">Functional dependence</h2>";
    html_figure(h, "fig-penalties", figure_penalties(d),
           "NLL penalty of each replay condition (controller disabled) against the exact replay, with paired-window "
           "bootstrap 95% CIs, on a log axis because penalties differ by orders of magnitude between models.");
    html_figure(h, "fig-retention", figure_retention(d),
           "How much of the structure-removed penalty a static profile recovers; the dashed line is the 95% criterion.");
    for (const auto& a : d.audits) html_audit_tables(h, d, a);
    h << "<h2 id=\"variation\">Coefficient variation</h2>";
    html_figure(h, "fig-variance", figure_variance(d),
           "Shares of the coefficients' total sum of squares: between coordinates (layers, or layer-stream-source), "
           "inputs, tokens, their interactions and the residual.");
    html_figure(h, "fig-profiles", figure_profiles(d),
           "Calibrated static coefficient profiles: for gated models the mean gate per layer and position, for MUDD models "
           "the mean mixing weight per layer and source in each stream; for routed models what the routing did on the "
           "evaluation windows: MoE expert load per layer (share of token-slot assignments; uniform is 1/E) and MoD "
           "selection frequency per routed block and position.");
  }
}

void html_seeds(std::ostream& h, const ReportData& d) {
  if (!d.aggregates.empty()) {
    h << "<h2 id=\"seeds\">Across seeds</h2>";
    for (const auto& a : d.aggregates) {
      h << "<p class=\"sub\">" << a.doc["checkpoints"] << " checkpoints: ";
      for (const auto& in : a.doc["inputs"])
        h << escape(d.label(in.value("model_sha256", ""), in["path"].get<std::string>())) << " (<code>" << escape(in["path"].get<std::string>())
          << "</code>) ";
      h << "</p><table><tr><th class=\"l\">figure</th><th>mean</th><th>sd</th><th class=\"l\">95% CI (checkpoints)</th>"
           "<th>sign-flip p</th><th>Holm p</th></tr>";
      for (auto it = a.doc["figures"].begin(); it != a.doc["figures"].end(); ++it)
        if (is_undefined_statistic(it.value()))
          h << "<tr><td class=\"l\">" << escape(it.key()) << "</td><td colspan=\"5\" class=\"l\">undefined: "
            << escape(undefined_reason(it.value())) << "</td></tr>";
        else
          h << "<tr><td class=\"l\">" << escape(it.key()) << "</td><td>" << fmt("%.5f", it.value()["mean"].get<double>())
            << "</td><td>" << fmt("%.5f", it.value()["sd"].get<double>()) << "</td><td class=\"l\">"
            << ci(it.value()["ci95"], "%.5f") << "</td><td>" << fmt("%.4g", it.value()["sign_flip_p"].get<double>()) << "</td><td>"
            << (it.value().contains("holm_p") ? fmt("%.4g", it.value()["holm_p"].get<double>()) : std::string("–")) << "</td></tr>";
      h << "</table>";
    }
  }
}

// One exec run's table: a row per mode and skip threshold of every model. An adapter's model: its
// latency against the reference the adapter names, measured in its process.
void html_exec_table(std::ostream& h, const ReportData& d, const ReportData::Named& e) {
  h << "<table><tr><th class=\"l\">model</th><th class=\"l\">mode</th><th>blocks</th><th>GFLOP/token</th>"
       "<th>of which controller, MFLOP/token</th><th class=\"l\">latency ms median [p10, p90]</th><th>tokens/s</th>"
       "<th>ratio to Dense, or to an external model's reference [95% interval]</th><th>NLL</th></tr>";
  for (const auto& m : e.doc["models"]) {
      const bool external = m.value("family", "") == "external";
    auto row = [&](const nlohmann::json& r, const std::string& mode) {
      h << "<tr><td class=\"l\">" << escape(d.label(m["model_sha256"].get<std::string>(), m["label"].get<std::string>()))
        << "</td><td class=\"l\">" << escape(mode) << "</td><td>"
        << (r["executed_blocks"].is_null() ? std::string("–")
                                           : fmt("%.3g", r["executed_blocks"].get<double>()) + "/" + fmt("%g", r["total_blocks"].get<double>()))
        << "</td><td>"
        << fmt("%.4g", r["gflop_per_token"].get<double>()) << "</td><td>"
        << (r.contains("gflop_per_pass_by_kind") && m.contains("tokens_per_pass")
                ? fmt("%.4g", 1e3 * r["gflop_per_pass_by_kind"]["controller"].get<double>() / m["tokens_per_pass"].get<double>())
                : std::string("–"))
        << "</td><td class=\"l\">"
        << fmt("%.2f", 1e3 * r["latency"]["median_s"].get<double>()) << " [" << fmt("%.2f", 1e3 * r["latency"]["p10_s"].get<double>())
        << ", " << fmt("%.2f", 1e3 * r["latency"]["p90_s"].get<double>()) << "]</td><td>" << fmt("%.0f", r["tokens_per_s"].get<double>())
        << "</td><td>"
        << (external ? ratio_cell(r["latency_ratio_to_reference"])
                     : r.contains("latency_ratio_to_dense") ? ratio_cell(r["latency_ratio_to_dense"]) : std::string("–"))
        << "</td><td>" << (r.contains("nll") ? fmt("%.4f", r["nll"].get<double>()) : std::string("–")) << "</td></tr>";
    };
    for (const auto& r : m["modes"])
      row(r, external && r["mode"] == "reference" ? "reference: " + r.value("label", std::string("?")) : r["mode"].get<std::string>());
    if (m.contains("skip_sweep"))
      for (const auto& r : m["skip_sweep"]) row(r, "skip tau=" + fmt("%g", r["threshold"].get<double>()));
  }
  h << "</table>";
}

void html_execution(std::ostream& h, const ReportData& d) {
  if (!d.execs.empty()) {
    h << "<h2 id=\"execution\">Actual execution</h2>";
    html_figure(h, "fig-latency", figure_latency(d),
           "Measured median latency per batch against blocks executed, for live, replayed and forced gates and for the "
           "real skip sweep (blocks removed from the graph).");
    if (const std::string tradeoff = figure_depth_tradeoff(d); !tradeoff.empty())
      html_figure(h, "fig-depth", tradeoff,
             "Models whose depth varies per token: NLL against FLOPs per token and against latency, for the same weights "
             "truncated to every fixed depth (line) and for the live pass and the threshold sweep (points). A point below the "
             "line is quality that dynamic depth buys at equal compute; above it, a fixed depth does better.");
    h << "<p class=\"sub\">Every configuration of an exec run is timed in the same interleaved rounds, so that drift lands on all "
         "alike. A ratio is the median of the per-round ratios with its 95% paired bootstrap interval; it is marked slower or "
         "faster only where the whole interval lies beyond the practical margin (1 +- margin); otherwise there is no "
         "measurable difference at this size.</p>";
    for (const auto& e : d.execs) html_exec_table(h, d, e);
  }
}

void html_provenance(std::ostream& h, const ReportData& d) {
  h << "<h2 id=\"provenance\">Provenance</h2><table><tr><th class=\"l\">input</th><th class=\"l\">fca</th><th class=\"l\">commit</th>"
       "<th class=\"l\">model sha256</th><th>threads</th><th class=\"l\">machine</th><th>seed</th></tr>";
  auto prov_row = [&](const std::string& path, const nlohmann::json& p, const std::string& sha) {
    h << "<tr><td class=\"l\"><code>" << escape(path) << "</code></td><td class=\"l\">" << escape(p.value("fca_version", "?"))
      << "</td><td class=\"l\"><code>" << escape(p.value("git_commit", "?").substr(0, 12)) << "</code></td><td class=\"l\"><code>"
      << escape(sha.substr(0, 16)) << "</code></td><td>" << p.value("threads", 0) << "</td><td class=\"l\">"
      << escape(p.contains("machine") ? p["machine"].value("cpu", "?") : std::string("?")) << "</td><td>"
      << (p.contains("seed") ? p["seed"].dump() : std::string("–")) << "</td></tr>";
  };
  for (const auto& a : d.audits) prov_row(a.path, a.doc["provenance"], a.doc["provenance"]["model_sha256"]);
  for (const auto& e : d.execs) prov_row(e.path, e.doc["provenance"], "");
  for (const auto& e : d.evals) prov_row(e.path, e.doc["provenance"], e.doc["provenance"].value("model_sha256", ""));
  h << "</table>";
  for (const auto& t : d.train_logs) h << "<p class=\"sub\">training log <code>" << escape(t.path) << "</code></p>";
  h << "</body></html>\n";
}

}  // namespace

std::string report_html(const ReportData& d) {
  std::ostringstream h;
  const auto prov = provenance_base();
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>" << escape(d.title) << "</title><style>"
    << kStyle << "</style></head><body>\n";
  h << "<h1>" << escape(d.title) << "</h1><p class=\"sub\">Generated " << prov["created_utc"].get<std::string>() << " by "
    << escape(fca_version_string()) << ". Three separate claims per model: <b>coefficient variation</b> (do the "
    << "controller's coefficients change with the input?), <b>functional dependence</b> (does the frozen model need them "
    << "to change?) and <b>actual execution</b> (is computation really saved?). No answer is evidence for another.</p>\n";

  html_verdicts(h, d);
  html_quality(h, d);
  html_dependence_and_variation(h, d);
  html_seeds(h, d);
  html_execution(h, d);
  if (!d.train_logs.empty()) {
    h << "<h2 id=\"training\">Training</h2>";
    html_figure(h, "fig-training", figure_training(d), "Training loss (lines) and validation NLL (circles) per optimizer step.");
  }
  if (!d.paper.is_null()) h << paper_section_html(d.paper);
  html_provenance(h, d);
  return h.str();
}

std::string report_markdown(const ReportData& d) {
  std::ostringstream md;
  md << "# " << d.title << "\n\n";
  if (!d.paper.is_null())
    md << "The reproduction of the paper (" << d.paper["paper"].get<std::string>() << ") is in `paper.md` of the paper's folder.\n\n";
  for (const auto& v : compute_verdicts(d)) {
    md << "## " << v.model << "\n\n";
    if (!v.warning.empty()) md << "**Warning: " << v.warning << "**\n\n";
    md << v.basis << "\n\n";
    md << "- **Coefficient variation:** " << v.variation << "\n";
    md << "- **Functional dependence:** " << v.dependence << "\n";
    md << "- **Actual execution:** " << v.execution << "\n";
    for (const auto& c : v.checkpoints) md << "  - per-checkpoint audit: `" << c << "`\n";
    md << "\n";
  }
  for (const auto& a : d.audits) {
    const bool compute = !a.doc["conditions"].empty() && a.doc["conditions"][0].contains("compute");
    md << "### " << report_util::audit_heading(d, a.doc) << ": conditions\n\n| condition | DeltaNLL | 95% CI |"
       << (compute ? " mean depth | GEMM MFLOP/token |" : "") << "\n|---|---:|---|" << (compute ? "---:|---:|" : "") << "\n";
    for (const auto& c : a.doc["conditions"]) {
      md << "| " << c["name"].get<std::string>() << " | " << fmt("%+.5f", c["delta_nll"].get<double>()) << " | " << ci(c["ci95"]) << " |";
      if (compute)
        md << " " << fmt("%.3f", c["compute"]["mean_depth"].get<double>()) << " | "
           << fmt("%.4f", c["compute"]["gemm_gflop_per_token_of_record"].get<double>() * 1e3) << " |";
      md << "\n";
    }
    for (auto it = a.doc["retention"].begin(); it != a.doc["retention"].end(); ++it) {
      const auto& r = it.value();
      md << "\nRetention of " << it.key() << ": "
         << (is_undefined_statistic(r) ? "undefined: " + undefined_reason(r)
                                       : fmt("%.1f%%", 100 * r["estimate"].get<double>()) + " " + report_util::interval(r["ci95"], "%.1f%%", 100))
         << ".";
    }
    if (!undefined_reason(a.doc["variance"]).empty()) md << "\nVariance shares undefined: " << undefined_reason(a.doc["variance"]) << ".";
    md << "\n\n";
  }
  return md.str();
}

}  // namespace fca
