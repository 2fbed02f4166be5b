// audit.md: the audit's tables for a person, rendered from the audit.json document only.
#pragma once
#include "core/json.h"
#include <string>

namespace fca {

std::string audit_markdown(const nlohmann::ordered_json& audit);

}  // namespace fca
