// The report's part of the record-kind table (models/record_kind.h has the models' part,
// audit/audit_kind.h the audit's): per record kind, named as audit.json's /model/record_kind has it,
// the figure of what the audited records were and did. The report reads an audit's kind from the
// document and draws the kind's row; it never guesses the kind from which keys are present. fca's
// kinds have their rows here; a family that brings its own kind adds its row with add_report_kind
// (tests/toy_family/skip_family.cpp does).
#pragma once
#include <functional>
#include <string>

#include "report/report.h"

namespace fca {

struct ReportKindRow {
  std::string record_kind;  // "continuous", "exit_depth", ...
  // The SVG of an audit of this kind: its calibrated profile, its load table or its depths.
  std::function<std::string(const ReportData& data, const ReportData::Named& audit)> profile_figure;
};

// Installs a row (at start-up); refuses a kind that has one.
void add_report_kind(ReportKindRow row);
// The row of a kind; null when no row is installed (an audit of a family this build does not
// have: the report leaves its profile figure out and says so).
const ReportKindRow* report_kind_row(const std::string& record_kind);

// The figures of fca's kinds, for their rows (report_figures.cpp).
std::string continuous_profile_figure(const ReportData& data, const ReportData::Named& audit);
std::string expert_load_figure(const ReportData& data, const ReportData::Named& audit);
std::string selection_frequency_figure(const ReportData& data, const ReportData::Named& audit);
std::string depth_figure(const ReportData& data, const ReportData::Named& audit);

}  // namespace fca
