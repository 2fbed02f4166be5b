#include "core/undefined_statistic.h"

#include <cmath>

#include "core/error.h"

namespace fca {

std::string undefined_note(const std::string& reason) { return kUndefinedPrefix + reason; }

nlohmann::ordered_json undefined_statistic(const std::string& value_key, const std::string& reason) {
  nlohmann::ordered_json j;
  j[value_key] = nullptr;
  j["ci95"] = nullptr;
  j["note"] = undefined_note(reason);
  return j;
}

bool is_undefined_statistic(const nlohmann::json& stat) {
  return stat.is_object() && stat.contains("ci95") && stat["ci95"].is_null();
}

std::string undefined_reason(const nlohmann::json& object) {
  if (!object.is_object() || !object.contains("note") || !object["note"].is_string()) return "";
  const std::string note = object["note"].get<std::string>();
  const std::string prefix = kUndefinedPrefix;
  return note.rfind(prefix, 0) == 0 ? note.substr(prefix.size()) : "";
}

namespace {

void check_at(const nlohmann::json& j, const std::string& path, const std::string& where) {
  if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) check_at(j[i], path, where + "/" + std::to_string(i));
    return;
  }
  if (!j.is_object()) return;
  if (j.contains("ci95")) {
    const auto& ci = j["ci95"];
    const std::string at = where + "/ci95";
    if (ci.is_null()) {
      if (undefined_reason(j).empty())
        throw Error(path + ": '" + at + "' is null (an undefined statistic) but '" + where +
                    "/note' does not say why: expected \"undefined: <reason>\"");
      for (const char* value : {"estimate", "mean"})
        if (j.contains(value) && !j[value].is_null())
          throw Error(path + ": '" + where + "/" + value + "' is a number but its interval '" + at + "' is null");
    } else if (!(ci.is_array() && ci.size() == 2 && ci[0].is_number() && ci[1].is_number())) {
      throw Error(path + ": '" + at + "' must be an interval [lower, upper] of two numbers, or null for an undefined statistic, found " +
                  ci.dump().substr(0, 60));
    } else if (!(ci[0].get<double>() <= ci[1].get<double>())) {
      throw Error(path + ": '" + at + "' has its lower bound above its upper bound: " + ci.dump().substr(0, 60));
    }
  }
  for (const auto& [key, value] : j.items()) check_at(value, path, where + "/" + key);
}

}  // namespace

void check_statistics(const nlohmann::json& document, const std::string& path) { check_at(document, path, ""); }

nlohmann::ordered_json ratio_or_null(double num, double den) {
  if (den == 0 || !std::isfinite(num) || !std::isfinite(den)) return nullptr;
  return num / den;
}

}  // namespace fca
