#include "models/record_kind.h"

#include <cstring>

#include "core/error.h"

namespace fca {

namespace {

std::vector<RecordKindRow>& rows() {
  static std::vector<RecordKindRow> table{continuous_record_kind(), expert_routing_record_kind(),
                                          token_selection_record_kind(), exit_depth_record_kind()};
  return table;
}

}  // namespace

const std::vector<RecordKindRow>& record_kind_rows() { return rows(); }

RecordKind add_record_kind(RecordKindRow row) {
  if (row.name == nullptr || *row.name == '\0') throw Error("a record kind needs a name");
  if (record_kind_named(row.name) != nullptr) throw Error(std::string("record kind \"") + row.name + "\" is installed twice");
  if (row.dense_view == nullptr) throw Error(std::string("record kind \"") + row.name + "\" has no dense view");
  row.kind = RecordKind(int(rows().size()));  // the next value after every kind installed so far
  rows().push_back(row);
  return row.kind;
}

const RecordKindRow& record_kind_row(RecordKind kind) {
  for (const RecordKindRow& row : record_kind_rows())
    if (row.kind == kind) return row;
  throw Error("internal error: record kind " + std::to_string(int(kind)) + " has no row in the record-kind table");
}

const RecordKindRow* record_kind_named(const std::string& name) {
  for (const RecordKindRow& row : record_kind_rows())
    if (name == row.name) return &row;
  return nullptr;
}

const char* record_kind_name(RecordKind kind) { return record_kind_row(kind).name; }

std::string CoefficientShape::to_string() const {
  std::string s = "[layer " + std::to_string(layers) + ", token " + std::to_string(tokens) + ", stream " +
                  std::to_string(streams) + ", source " + std::to_string(sources) + "]";
  return s + record_kind_row(kind).shape_words(*this);
}

CoefficientTensor record_values(const CoefficientView& v) {
  const CoefficientShape& s = v.shape;
  CoefficientTensor out(v.windows, CoefficientShape{s.layers, s.tokens, s.streams, s.sources});
  std::memcpy(out.values().data(), v.data, sizeof(float) * out.values().size());
  return out;
}

std::string discrete_shape_words(const CoefficientShape& s) {
  return std::string(" ") + record_kind_name(s.kind) + " (slots " + std::to_string(s.slots) + ", categories " +
         std::to_string(s.categories) + ", selected " + std::to_string(s.selected) + ")";
}

std::vector<std::vector<double>> flag_frequency(const CoefficientView& v) {
  const CoefficientShape& s = v.shape;
  std::vector<std::vector<double>> load(size_t(s.layers), std::vector<double>(size_t(s.tokens), 0.0));
  const double per = 1.0 / v.windows;
  for (int w = 0; w < v.windows; ++w) {
    const int32_t* d = v.window_discrete(w);
    for (int l = 0; l < s.layers; ++l)
      for (int t = 0; t < s.tokens; ++t)
        if (d[(int64_t(l) * s.tokens + t) * s.slots] == 1) load[size_t(l)][size_t(t)] += per;
  }
  return load;
}

}  // namespace fca
