// The continuous record kind: coefficients only (gates, mixing weights), no discrete field. The
// variance decomposition runs on the values themselves; nothing to validate; the probe shifts the
// values of one layer at a time (the shift shared by every kind, audit/replay_probe.h).
#include "models/record_kind.h"

namespace fca {

RecordKindRow continuous_record_kind() {
  return {RecordKind::continuous,
          "continuous",
          false,
          [](const CoefficientShape&) { return std::string(); },
          nullptr,
          nullptr,
          nullptr,
          record_values,
          nullptr,
          nullptr,
          nullptr,
          [](const CoefficientShape&) { return std::string(); }};
}

}  // namespace fca
