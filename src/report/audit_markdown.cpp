#include "report/audit_markdown.h"

#include <cstdio>
#include <sstream>

#include "core/file_io.h"
#include "core/undefined_statistic.h"
#include "report/report_util.h"

namespace fca {
namespace {

std::string num(double v, const char* fmt = "%.5f") {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string pct(double v) { return num(100 * v, "%.2f%%"); }

// "[low, high]" (appended piece by piece: GCC 12 misreports -Wrestrict on "literal" + std::string).
std::string ci(const nlohmann::json& c, const char* fmt = "%.5f", double scale = 1.0) {
  std::string out = "[";
  out += num(scale * c[0].get<double>(), fmt);
  out += ", ";
  out += num(scale * c[1].get<double>(), fmt);
  out += "]";
  return out;
}

}  // namespace

namespace {

// The model, the settings, the baseline, exact replay and the replay's sensitivity.
void audit_markdown_header(std::ostream& md, const nlohmann::ordered_json& a) {
  const auto& m = a["model"];
  const auto& s = a["settings"];
  md << "# Frozen-Controller Audit: " << m["description"].get<std::string>() << "\n\n";
  md << "Model `" << m["path"].get<std::string>() << "` (" << m["family"].get<std::string>() << "), coefficient tensor "
     << "[layer " << m["coefficient_shape"]["layer"] << ", token " << m["coefficient_shape"]["token"] << ", stream "
     << m["coefficient_shape"]["stream"] << ", source " << m["coefficient_shape"]["source"] << "]. "
     << s["eval_windows"] << " evaluation windows (test), " << s["calib_windows"] << " calibration windows (valid), T "
     << s["seq_len"] << ", " << s["reps"] << " randomisations, seed " << s["seed"] << ".\n\n";
  md << "Baseline NLL " << num(a["baseline"]["nll"]) << " nats/byte (" << num(a["baseline"]["bits_per_byte"], "%.4f")
     << " bits/byte, Byte-PPL " << num(a["baseline"]["byte_ppl"], "%.4f") << ").\n\n";
  const auto& e = a["exact_replay"];
  md << "**Exact replay:** max |delta logit| " << num(e["max_abs_delta_logit"], "%g") << ", max |delta NLL| "
     << num(e["max_abs_delta_nll"], "%g") << " (tolerance " << num(e["tolerance"], "%g") << "): passed"
     << (e.value("logits_compared", "values") == "sha256" ? "; the logits were compared by their SHA-256 (they stay in the adapter process)" : "")
     << ".\n\n";

  if (a.contains("replay_sensitivity")) {
    const auto& p = a["replay_sensitivity"];
    if (p["passed"].get<bool>())
      md << "**Replay sensitivity:** replaying changed coefficients (" << p["perturbation"].get<std::string>() << ") changed "
         << (p["logits_compared"] == "sha256" ? "the logits digest" : "the logits") << " for each of "
         << p["groups"].size() << " probe groups (" << p["differing_logits"] << (p["logits_compared"] == "sha256" ? " digests" : " logits")
         << " in all): the replay uses the coefficients it is handed in every layer.\n\n";
    else
      md << "**WARNING: " << p["warning"].get<std::string>() << ".**\n\n";
  }
}

// The conditions' table and how to read it.
void audit_markdown_conditions(std::ostream& md, const nlohmann::ordered_json& a) {
  const auto& m = a["model"];
  md << "## Functional dependence\n\n";
  // Records that change how much runs (early exit): each condition's mean depth and GEMM FLOPs beside its DeltaNLL.
  const bool compute = !a["conditions"].empty() && a["conditions"][0].contains("compute");
  md << "| condition | DeltaNLL | 95% CI | MC SE | controller evaluations |" << (compute ? " mean depth | delta depth | GEMM MFLOP/token |" : "")
     << "\n|---|---:|---|---:|---:|" << (compute ? "---:|---:|---:|" : "") << "\n";
  for (const auto& c : a["conditions"]) {
    md << "| " << c["name"].get<std::string>() << " | " << num(c["delta_nll"]) << " | " << ci(c["ci95"]) << " | "
       << (c["mc_se"].is_null() ? std::string("–") : num(c["mc_se"])) << " | " << c["controller_evaluations"] << " |";
    if (compute) {
      const auto& f = c["compute"];
      md << " " << num(f["mean_depth"], "%.3f") << " | " << num(f["delta_depth"], "%+.3f") << " | "
         << num(f["gemm_gflop_per_token_of_record"].get<double>() * 1e3, "%.4f") << " |";
    }
    md << "\n";
  }
  if (compute)
    md << "\nGEMM MFLOP/token: of each condition's records by the family's formulas; every condition's replays counted the "
          "same (counted_matches_record in audit.json). identity runs every block: its DeltaNLL is a control, not a penalty.\n";
  md << "\nDeltaNLL = mean over windows of NLL(condition) - NLL(correct), nats/byte; randomised conditions average "
        "their randomisations per window first. static_profile is "
     << m["static_profile"].get<std::string>() << ", structure_removed is " << m["structure_removed"].get<std::string>()
     << ".\n\n";

}

// What a family's capabilities add: the constraint's violations and the cache's diagnostics.
void audit_markdown_family_extras(std::ostream& md, const nlohmann::ordered_json& a) {
  const auto& m = a["model"];
  const auto& s = a["settings"];
  if (m.contains("coefficient_constraint")) {
    md << "Largest violation of the live coefficients' constraint (" << m["coefficient_constraint"].get<std::string>()
       << ") in what each condition replayed:";
    for (const auto& c : a["conditions"])
      if (c.contains("constraint_violation")) md << " " << c["name"].get<std::string>() << " " << num(c["constraint_violation"], "%.3g") << ";";
    md << " token shuffle " << s["token_shuffle"].get<std::string>() << ".\n\n";
  }
  if (a.contains("diagnostics")) {
    md << "## Diagnostics from the cache\n\n";
    for (const auto& t : report_util::diagnostics_tables(a["diagnostics"])) {
      md << "**" << t.title << "**\n\n|";
      for (const auto& c : t.header) md << " " << c << " |";
      md << "\n|";
      for (size_t i = 0; i < t.header.size(); ++i) md << (i == 0 ? "---|" : "---:|");
      md << "\n";
      for (const auto& r : t.rows) {
        md << "|";
        for (const auto& c : r) md << " " << c << " |";
        md << "\n";
      }
      md << "\n";
    }
  }
}

// Factor effects, retention and the prespecified criteria.
void audit_markdown_effects(std::ostream& md, const nlohmann::ordered_json& a) {
  if (!a["factor_effects"].is_null()) {
    md << "## Factor effects\n\n| effect | estimate | 95% CI |\n|---|---:|---|\n";
    for (const char* f : {"input", "token", "interaction"})
      md << "| " << f << " | " << num(a["factor_effects"][f]["estimate"]) << " | " << ci(a["factor_effects"][f]["ci95"]) << " |\n";
    md << "\nFactorial contrasts of correct (CC), cross_input (DC), token_shuffle (CS) and cross_shuffle (DS), "
          "paired per window and randomisation; not an additive decomposition.\n\n";
  }
  if (!a["retention"].empty()) {
    md << "## Retention\n\n| profile | retention | 95% CI | DeltaNLL | structure_removed DeltaNLL |\n|---|---:|---|---:|---:|\n";
    for (auto it = a["retention"].begin(); it != a["retention"].end(); ++it)
      md << "| " << it.key() << " | "
         << (is_undefined_statistic(it.value()) ? "undefined: " + undefined_reason(it.value()) : pct(it.value()["estimate"])) << " | "
         << (is_undefined_statistic(it.value()) ? std::string("–") : ci(it.value()["ci95"], "%.2f%%", 100.0)) << " | " << num(it.value()["delta_nll"]) << " | "
         << num(it.value()["structure_removed_delta_nll"]) << " |\n";
    md << "\n";
  }
  if (!a["criteria"].empty()) {
    md << "## Prespecified criteria\n\n| criterion | rule | value | verdict |\n|---|---|---:|---|\n";
    for (auto it = a["criteria"].begin(); it != a["criteria"].end(); ++it) {
      const auto& c = it.value();
      const bool is_retention = it.key() == "retention_high";
      md << "| " << it.key() << " | " << c["rule"].get<std::string>() << " (threshold "
         << (is_retention ? pct(c["threshold"]) : num(c["threshold"], "%g")) << ") | "
         << (c["value"].is_null() ? std::string("undefined") : (is_retention ? pct(c["value"]) : num(c["value"]))) << " | "
         << (c["holds"].get<bool>() ? "holds" : "does not hold")
         << " |\n";
    }
    md << "\n";
  }
}

// Coefficient variation and provenance.
void audit_markdown_variation(std::ostream& md, const nlohmann::ordered_json& a) {
  const auto& v = a["variance"];
  md << "## Coefficient variation\n\nTotal variance " << num(v["total_variance"], "%.6g") << " over "
     << v["cells"]["coordinates"] << " coordinates x " << v["cells"]["inputs"] << " inputs x " << v["cells"]["tokens"]
     << " tokens.\n\n| source | share of SS |\n|---|---:|\n";
  for (auto it = v["shares"].begin(); it != v["shares"].end(); ++it)
    md << "| " << it.key() << " | " << (it.value().is_null() ? std::string("undefined") : pct(it.value())) << " |\n";
  if (!undefined_reason(v).empty()) md << "\nThe shares are undefined: " << undefined_reason(v) << ".\n";
  md << "\nBalanced functional ANOVA of the evaluation coefficients; the three-way interaction is the residual.\n\n";
  const auto& p = a["provenance"];
  md << "## Provenance\n\nfca " << p["fca_version"].get<std::string>() << " (commit " << p["git_commit"].get<std::string>()
     << "), " << p["threads"] << " threads on " << p["machine"]["cpu"].get<std::string>() << "; model sha256 "
     << p["model_sha256"].get<std::string>() << "; data " << p["data"]["dir"].get<std::string>() << " (test sha256 "
     << p["data"]["eval_split_sha256"].get<std::string>() << ").\n";
}

}  // namespace

std::string audit_markdown(const nlohmann::ordered_json& a) {
  std::ostringstream md;
  audit_markdown_header(md, a);
  audit_markdown_conditions(md, a);
  audit_markdown_family_extras(md, a);
  audit_markdown_effects(md, a);
  audit_markdown_variation(md, a);
  return md.str();
}

void write_audit_markdown(const std::string& out_dir, const nlohmann::ordered_json& audit) {
  write_file_atomically(out_dir + "/audit.md", [&](std::ostream& out) { out << audit_markdown(audit); });
}

}  // namespace fca
