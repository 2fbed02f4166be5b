// Helpers shared by the report's files (verdicts, figures, HTML and Markdown): number formatting
// and look-ups across the validated inputs.
#pragma once
#include <string>
#include <vector>

#include "report/report.h"

namespace fca::report_util {

// printf-style formatting of one number, e.g. fmt("%+.5f", x).
std::string fmt(const char* format, double v);
// "[lower, upper]" of an interval, or "–" for an undefined (null) one.
std::string interval(const nlohmann::json& ci, const char* format = "%+.5f", double scale = 1.0);

// The condition `name` of an audit, or null.
const nlohmann::json* find_condition(const nlohmann::json& audit, const std::string& name);
// The aggregate among the inputs that combines the checkpoint `sha256` with others, or null.
const ReportData::Named* find_aggregate(const ReportData& d, const std::string& sha256);
// The exec entry of a model (matched by weights hash), or null. `external`: the entry measured
// through an adapter (family "external"), else the one fca's engine measured: the same weights file
// may be audited and timed both ways, and each card shows the engine its audit ran on.
const nlohmann::json* find_exec(const ReportData& d, const std::string& sha256, bool external);

// A checkpoint's label (ReportData::labels) for an audit document.
std::string audit_label(const ReportData& d, const nlohmann::json& audit);
// "<label>: <description>", the heading of a checkpoint's tables.
std::string audit_heading(const ReportData& d, const nlohmann::json& audit);

// A family's cache diagnostics (audit.json "diagnostics") as plain tables, rendered the same way for
// every family: per group, its numbers and strings as name | value rows, number lists joined in one
// cell, and a matrix (an array of number arrays) as its own table whose row and column labels are the
// group's string lists of matching lengths.
struct PlainTable {
  std::string title;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};
std::vector<PlainTable> diagnostics_tables(const nlohmann::json& diagnostics);

// Approximate width in pixels of `text` at `size` px in the report's sans-serif font (an average
// glyph is about 0.6 em), so that figures can size their label margins to fit.
double text_width(const std::string& text, int size);

// The report's style sheet (CSS), shared by report.html and the paper's page.
const char* report_style();

}  // namespace fca::report_util
