#include "report/report_kind.h"

#include <vector>

#include "core/error.h"

namespace fca {
namespace {

std::vector<ReportKindRow>& rows() {
  static std::vector<ReportKindRow> table{{"continuous", continuous_profile_figure},
                                          {"expert_routing", expert_load_figure},
                                          {"token_selection", selection_frequency_figure},
                                          {"exit_depth", depth_figure}};
  return table;
}

}  // namespace

void add_report_kind(ReportKindRow row) {
  if (report_kind_row(row.record_kind) != nullptr)
    throw Error("the report's record-kind table has a row for \"" + row.record_kind + "\" already");
  if (!row.profile_figure) throw Error("report row of record kind \"" + row.record_kind + "\": no profile figure");
  rows().push_back(std::move(row));
}

const ReportKindRow* report_kind_row(const std::string& record_kind) {
  for (const ReportKindRow& row : rows())
    if (row.record_kind == record_kind) return &row;
  return nullptr;
}

}  // namespace fca
