#include "audit/audit_kind.h"

#include <algorithm>

#include "core/error.h"

namespace fca {

namespace {

std::vector<AuditKindRow>& rows() {
  static std::vector<AuditKindRow> table{continuous_audit_kind(), expert_routing_audit_kind(), token_selection_audit_kind(),
                                         exit_depth_audit_kind()};
  return table;
}

}  // namespace

const std::vector<AuditKindRow>& audit_kind_rows() { return rows(); }

void add_audit_kind(AuditKindRow row) {
  const std::string name = record_kind_name(row.kind);  // Error when the models' table has no such kind
  for (const AuditKindRow& r : rows())
    if (r.kind == row.kind) throw Error("the audit's record-kind table has a row for \"" + name + "\" already");
  if (row.prepare == nullptr || row.skipped == nullptr || row.condition_names.empty() || row.condition_names.front() != "correct")
    throw Error("audit row of record kind \"" + name + "\": it needs prepare, skipped and a condition list opening with \"correct\"");
  rows().push_back(std::move(row));
}

const AuditKindRow& audit_kind_row(RecordKind kind) {
  for (const AuditKindRow& row : audit_kind_rows())
    if (row.kind == kind) return row;
  throw Error(std::string("internal error: record kind ") + record_kind_name(kind) + " has no row in the audit's record-kind table");
}

bool AuditKindRow::is_randomized(const std::string& name) const {
  return std::find(randomized.begin(), randomized.end(), name) != randomized.end();
}

nlohmann::ordered_json static_profile_json(const CoefficientTensor& profile) {
  const CoefficientShape& sh = profile.shape();
  nlohmann::ordered_json S = nlohmann::ordered_json::array();
  for (int l = 0; l < sh.layers; ++l) {
    nlohmann::ordered_json streams = nlohmann::ordered_json::array();
    for (int st = 0; st < sh.streams; ++st) {
      nlohmann::ordered_json sources = nlohmann::ordered_json::array();
      for (int k = 0; k < sh.sources; ++k)
        sources.push_back(profile.valid(l, st, k) ? nlohmann::ordered_json(profile.at(0, l, 0, st, k))
                                                  : nlohmann::ordered_json(nullptr));
      streams.push_back(sources);
    }
    S.push_back(streams);
  }
  return S;
}

}  // namespace fca
