#include "models/routing_record.h"

#include "core/error.h"
#include "models/record_kind.h"

namespace fca {

// Each operation is its kind's row of the record-kind table (models/record_kind.h).

void check_routing_records(const CoefficientView& v, const std::string& where) {
  const RecordKindRow& row = record_kind_row(v.shape.kind);
  if (row.check == nullptr) return;
  if (v.discrete == nullptr) throw Error(where + ": routing records without their discrete field");
  row.check(v, where);
}

CoefficientTensor routing_weights_dense(const CoefficientView& v) { return record_kind_row(v.shape.kind).dense_view(v); }

std::vector<std::vector<double>> routing_load(const CoefficientView& v) {
  const RecordKindRow& row = record_kind_row(v.shape.kind);
  return row.load != nullptr ? row.load(v) : std::vector<std::vector<double>>{};
}

}  // namespace fca
