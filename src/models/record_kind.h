// Record kinds as one table (docs/audit.md, "Record kinds"): everything fca does differently for a
// kind of controller record, in one row per kind, so that the code that handles records reads the
// row instead of switching on the kind. A new record kind is one file (record_kind_<kind>.cpp) and
// one row in record_kind.cpp's table.
//
// This table holds the models layer's part of a row: the kind's name, how a shape of it is
// described, its cache-manifest fields, validation, the continuous view the variance decomposition
// runs on, the load table, and how the replay probe groups and perturbs it. The audit's half (its
// conditions, skipped conditions, profiles and JSON) is audit/audit_kind.h, one row per kind there too.
#pragma once
#include <string>
#include <vector>

#include "core/json.h"
#include "core/json_fields.h"
#include "models/coefficient_tensor.h"

namespace fca {

struct RecordKindRow {
  RecordKind kind;
  const char* name;  // "continuous", "expert_routing", ...; in cache manifests and audit.json
  // A discrete field beside the values (routing decisions): the audit's routing path, which
  // randomises structure_removed and reports the load.
  bool discrete;
  // What a shape of the kind adds to CoefficientShape::to_string ("" for none).
  std::string (*shape_words)(const CoefficientShape& shape);
  // The cache manifest's "record" fields beyond kind, slots, categories and selected: written, and
  // read back (null: none).
  void (*write_manifest_extras)(nlohmann::ordered_json& record, const CoefficientShape& shape);
  void (*read_manifest_extras)(const JsonFields& record, CoefficientShape& shape, const std::string& where);
  // Throws Error naming `where`, the window, layer and token when records cannot be executed
  // (null: every record can).
  void (*check)(const CoefficientView& records, const std::string& where);
  // The continuous tensor the variance decomposition runs on.
  CoefficientTensor (*dense_view)(const CoefficientView& records);
  // The load table (expert load, selection frequency), [layer][column]; null: none.
  std::vector<std::vector<double>> (*load)(const CoefficientView& records);
  // The replay probe: non-null, the name of the one group that perturbs the whole record (exit
  // depths, which are per token); null, one group per layer.
  const char* whole_record_probe;
  // The probe's change of the discrete field of layers [layer, layer + 1) (layer -1: every layer),
  // beside the shared shift of the values; null: no discrete field. And its words.
  void (*perturb_discrete)(CoefficientTensor& records, int layer);
  std::string (*probe_words)(const CoefficientShape& shape);
};

// A kind a family brings (tests/toy_family/skip_family.cpp): installs its row at start-up and
// returns the kind's value, the next after every kind installed so far (the enum names fca's own
// kinds only); `row.kind` is ignored. Refuses a name that is taken. Not thread-safe.
RecordKind add_record_kind(RecordKindRow row);

// The row of a kind; the table of every kind, in installation order; the row named `name` (null
// when none is).
const RecordKindRow& record_kind_row(RecordKind kind);
const std::vector<RecordKindRow>& record_kind_rows();
const RecordKindRow* record_kind_named(const std::string& name);

// Pieces the rows share: the values alone as a continuous tensor of the record's shape (no discrete
// field); the words a discrete kind adds to a shape (" expert_routing (slots k, categories E,
// selected K)"); the share of windows whose discrete flag is 1 per [layer][token].
CoefficientTensor record_values(const CoefficientView& records);
std::string discrete_shape_words(const CoefficientShape& shape);
std::vector<std::vector<double>> flag_frequency(const CoefficientView& records);

// The rows, one per file.
RecordKindRow continuous_record_kind();
RecordKindRow expert_routing_record_kind();
RecordKindRow token_selection_record_kind();
RecordKindRow exit_depth_record_kind();

}  // namespace fca
