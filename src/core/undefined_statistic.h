// The one shape of a statistic that can be undefined, shared by every writer (audit, aggregate,
// exec) and every reader (report, fuzz targets). A ratio whose denominator is 0 (retention when
// structure_removed leaves the NLL unchanged), the variance shares of a constant coefficient tensor,
// an aggregate over checkpoints one of which is undefined: each is written as
//
//   defined:    {"estimate" | "mean": number, "ci95": [lower, upper], ...}
//   undefined:  {"estimate" | "mean": null,   "ci95": null, "note": "undefined: <why>", ...}
//
// and a plain figure without an interval (a variance share, an execution ratio) is null with a
// "note" beside it in its parent object that starts with "undefined: ". Readers render the reason
// ("undefined: structure_removed leaves the NLL unchanged"), never a number.
#pragma once
#include <string>

#include "core/json.h"

namespace fca {

inline constexpr const char* kUndefinedPrefix = "undefined: ";

// The "note" of an undefined statistic: "undefined: " + reason.
std::string undefined_note(const std::string& reason);

// An undefined statistic object: {value_key: null, "ci95": null, "note": "undefined: <reason>"}.
nlohmann::ordered_json undefined_statistic(const std::string& value_key, const std::string& reason);

// True when `stat` (an object with a "ci95" member) is undefined: its interval is null.
bool is_undefined_statistic(const nlohmann::json& stat);

// The reason of an undefined statistic or parent object: its "note" without the prefix, or "" when
// it has none.
std::string undefined_reason(const nlohmann::json& object);

// Checks every statistic in a result document: each "ci95" member anywhere is either an interval
// [lower, upper] of two numbers with lower <= upper, or null in an object whose value members
// ("estimate", "mean") are null or absent and whose "note" says why ("undefined: <reason>").
// Throws Error naming `path` and the JSON pointer of the first offending member.
void check_statistics(const nlohmann::json& document, const std::string& path);

// num / den as JSON, or null when the ratio is undefined (den is 0, or either is not finite).
nlohmann::ordered_json ratio_or_null(double num, double den);

}  // namespace fca
