// `fca aggregate`: audits of independently trained checkpoints of one configuration, combined.
// Each checkpoint contributes one value per figure; per figure: the mean, a checkpoint-level
// bootstrap 95% CI, the exact two-sided sign-flip p-value, and for the three factor effects
// Holm-adjusted p-values.
#pragma once
#include "core/json.h"
#include <string>
#include <vector>

namespace fca {

inline constexpr const char* kAggregateSchema = "fca-aggregate-v1";

// Reads audit.json files (schema fca-audit-v1; errors name the file and the missing field).
nlohmann::ordered_json aggregate_audits(const std::vector<std::string>& audit_paths, int bootstrap_resamples,
                                        uint64_t seed);
std::string aggregate_markdown(const nlohmann::ordered_json& aggregate);

}  // namespace fca
