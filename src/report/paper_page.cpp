// The paper reproduction (fca-paper-v1, written by fca paper) rendered for people: paper.md, the
// standalone paper.html and the section of report.html. Every measured figure is printed beside the
// paper's value, or beside "not available" and the values file's reason when the paper's value is
// not known to fca.
#include <sstream>

#include "report/report.h"
#include "report/paper_figures_svg.h"
#include "report/report_util.h"
#include "report/svg.h"

namespace fca {
namespace {

using svg::escape;

const char* const kSettingsNote =
    "Each paper value is printed with its setting in brackets: 76M (24 layers, 7 seeds), 504M (40 layers, 3 seeds) or "
    "MUDDPythia-1.4B (the public checkpoint), on OWT (held-out validation data) or WT103 (its test split). fca's models and "
    "corpora are far smaller stand-ins, so absolute values (Byte-PPL, ms) are not comparable; directions and orders of "
    "magnitude are.";
const char* const kClaimsNote =
    "A verdict (reproduces / does not reproduce) is given only on the corpus standing in for the one the paper makes the "
    "claim on; on the other corpus the row is an extension that says what fca finds. Not comparable: a figure the "
    "criterion needs is undefined.";

// The paper's readings of a cell or claim, as fca paper rendered them (study/paper_values.h).
std::string paper_cell(const nlohmann::json& v) { return v["text"].get<std::string>(); }

std::string verdict_class(const std::string& verdict) {
  if (verdict == "reproduces") return "reproduces";
  if (verdict == "does not reproduce") return "does-not";
  if (verdict == "extension") return "extension";
  return "not-comparable";
}

std::string corpus_heading(const nlohmann::json& corpus) {
  return corpus["name"].get<std::string>() + " (for " + corpus["stands_in_for"].get<std::string>() + ")";
}

// The body both HTML forms share: the corpora, every section's table and the claims.
std::string paper_body_html(const nlohmann::json& p, const std::string& heading_tag) {
  std::ostringstream h;
  h << "<p class=\"sub\">Measured by fca on " << p["corpora"].size() << " corpora, seeds ";
  for (size_t i = 0; i < p["seeds"].size(); ++i) h << (i ? ", " : "") << p["seeds"][i].dump();
  h << ". Corpora: ";
  for (size_t i = 0; i < p["corpora"].size(); ++i)
    h << (i ? "; " : "") << "<b>" << escape(p["corpora"][i]["name"].get<std::string>()) << "</b> (<code>"
      << escape(p["corpora"][i]["data"].get<std::string>()) << "</code>) stands in for " << escape(p["corpora"][i]["stands_in_for"].get<std::string>());
  h << ". The paper's values come from <code>" << escape(p["paper_values"]["file"].get<std::string>()) << "</code>.</p>\n";
  h << "<p class=\"sub\">" << escape(kSettingsNote) << "</p>\n" << paper_figures_html(p);
  for (const auto& s : p["sections"]) {
    h << "<" << heading_tag << " id=\"paper-" << escape(s["id"].get<std::string>()) << "\">" << escape(s["title"].get<std::string>())
      << "</" << heading_tag << "><p class=\"sub\">" << escape(s["note"].get<std::string>()) << "</p><table><tr><th class=\"l\">figure</th>";
    for (const auto& k : p["corpora"])
      h << "<th class=\"l\">" << escape(k["name"].get<std::string>()) << " (fca)</th><th class=\"l\">"
        << escape(k["stands_in_for"].get<std::string>()) << " (paper)</th>";
    h << "</tr>";
    for (const auto& r : s["rows"]) {
      h << "<tr><td class=\"l\">" << escape(r["label"].get<std::string>()) << "</td>";
      for (const auto& c : r["cells"])
        h << "<td class=\"l\">" << escape(c["measured"].get<std::string>()) << "</td><td class=\"l paper\">" << escape(paper_cell(c["paper"]))
          << "</td>";
      h << "</tr>";
    }
    h << "</table>\n";
  }
  h << "<" << heading_tag << " id=\"paper-claims\">The paper's claims at this scale</" << heading_tag << "><p class=\"sub\">"
    << escape(kClaimsNote) << "</p><table><tr><th class=\"l\">the paper's claim</th><th class=\"l\">source</th>"
       "<th class=\"l\">the paper's setting and number</th><th class=\"l\">corpus</th><th class=\"l\">verdict</th>"
       "<th class=\"l\">fca's figure</th></tr>";
  for (const auto& c : p["claims"]) {
    const std::string verdict = c["verdict"];
    h << "<tr><td class=\"l\">" << escape(c["claim"].get<std::string>()) << "</td><td class=\"l\">" << escape(c["source"].get<std::string>())
      << "</td><td class=\"l paper\">" << escape(paper_cell(c["paper"])) << "</td><td class=\"l\">" << escape(c["corpus"].get<std::string>())
      << "</td><td class=\"l " << verdict_class(verdict) << "\">" << escape(verdict) << "</td><td class=\"l\">"
      << escape(c["reason"].get<std::string>()) << "</td></tr>";
  }
  h << "</table>\n";
  return h.str();
}

}  // namespace

std::string paper_section_html(const nlohmann::json& p) {
  return "<h2 id=\"paper\">Paper reproduction: " + escape(p["paper"].get<std::string>()) + "</h2>\n" + paper_body_html(p, "h3");
}

std::string paper_page_html(const nlohmann::ordered_json& p) {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>" << escape(p["title"].get<std::string>())
    << "</title><style>" << report_util::report_style() << "</style></head><body>\n<h1>" << escape(p["title"].get<std::string>())
    << "</h1><p class=\"sub\">" << escape(p["paper"].get<std::string>()) << ". Generated " << escape(p["provenance"]["created_utc"].get<std::string>())
    << " by fca " << escape(p["provenance"]["fca_version"].get<std::string>()) << " (commit <code>"
    << escape(p["provenance"]["git_commit"].get<std::string>()) << "</code>), " << p["provenance"]["threads"].get<int>() << " threads.</p>\n"
    << paper_body_html(p, "h2");
  h << "<p class=\"sub\">Each corpus's study report, with every checkpoint's tables and figures: ";
  for (size_t i = 0; i < p["corpora"].size(); ++i)
    h << (i ? ", " : "") << "<code>" << escape(p["corpora"][i]["name"].get<std::string>()) << "/report.html</code>";
  h << ".</p></body></html>\n";
  return h.str();
}

std::string paper_markdown(const nlohmann::ordered_json& p) {
  std::ostringstream md;
  md << "# " << p["title"].get<std::string>() << "\n\n" << p["paper"].get<std::string>() << ". Measured by fca "
     << p["provenance"]["fca_version"].get<std::string>() << " (commit `" << p["provenance"]["git_commit"].get<std::string>() << "`, "
     << p["provenance"]["threads"].get<int>() << " threads), seeds";
  for (size_t i = 0; i < p["seeds"].size(); ++i) md << (i ? ", " : " ") << p["seeds"][i].dump();
  md << ".\n\n";
  for (const auto& k : p["corpora"])
    md << "- **" << k["name"].get<std::string>() << "** (`" << k["data"].get<std::string>() << "`) stands in for "
       << k["stands_in_for"].get<std::string>() << ".\n";
  md << "\nThe paper's values come from `" << p["paper_values"]["file"].get<std::string>() << "`. " << kSettingsNote << "\n\n";
  for (const auto& s : p["sections"]) {
    md << "## " << s["title"].get<std::string>() << "\n\n" << s["note"].get<std::string>() << "\n\n| figure |";
    for (const auto& k : p["corpora"]) md << " " << corpus_heading(k) << ": fca | paper |";
    md << "\n|---|";
    for (size_t i = 0; i < p["corpora"].size(); ++i) md << "---|---|";
    md << "\n";
    for (const auto& r : s["rows"]) {
      md << "| " << r["label"].get<std::string>() << " |";
      for (const auto& c : r["cells"]) md << " " << c["measured"].get<std::string>() << " | *" << paper_cell(c["paper"]) << "* |";
      md << "\n";
    }
    md << "\n";
  }
  md << "## The paper's claims at this scale\n\n" << kClaimsNote
     << "\n\n| the paper's claim | source | the paper's setting and number | corpus | verdict | fca's figure |\n|---|---|---|---|---|---|\n";
  for (const auto& c : p["claims"])
    md << "| " << c["claim"].get<std::string>() << " | " << c["source"].get<std::string>() << " | *" << paper_cell(c["paper"]) << "* | "
       << c["corpus"].get<std::string>() << " | **" << c["verdict"].get<std::string>() << "** | " << c["reason"].get<std::string>() << " |\n";
  return md.str();
}

}  // namespace fca
