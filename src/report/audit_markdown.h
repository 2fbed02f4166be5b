// audit.md: the audit's tables for a person, rendered from the audit.json document only.
#pragma once
#include "core/json.h"
#include <string>

namespace fca {

std::string audit_markdown(const nlohmann::ordered_json& audit);
// Writes <out_dir>/audit.md from the audit document (temporary name, then rename). The commands
// that run an audit (fca audit, fca study) call it after run_audit: the audit computes, report/
// renders.
void write_audit_markdown(const std::string& out_dir, const nlohmann::ordered_json& audit);

}  // namespace fca
