// The figures of two audits of one checkpoint, compared number by number: fca's native audit and
// an audit of the same weights through an external adapter (examples/, fca_torch).
#pragma once
#include <string>

#include "core/json.h"

namespace fca::testing {

// Every number of `native` (audit.json) against `external` at the same path, recursively. Paths that
// name the run rather than the model's figures are left out (listed in the source). Each number's
// difference, |a - b| / max(1, |a|), must be <= 1e-5; `worst` and `worst_path` receive the largest.
void expect_same_figures(const nlohmann::json& native, const nlohmann::json& external, const std::string& path,
                         double& worst, std::string& worst_path);

}  // namespace fca::testing
