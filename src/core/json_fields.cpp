#include "core/json_fields.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace fca {
namespace {

std::string shown(const nlohmann::json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

int64_t checked_integer(const nlohmann::json& v, const std::string& where, int64_t low, int64_t high) {
  if (!v.is_number_integer())
    throw Error(where + " must be an integer in " + std::to_string(low) + " .. " + std::to_string(high) + ", found " + shown(v));
  // Unsigned values above INT64_MAX are out of any range we accept.
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    throw Error(where + " must be in " + std::to_string(low) + " .. " + std::to_string(high) + ", found " + shown(v));
  const int64_t x = v.get<int64_t>();
  if (x < low || x > high)
    throw Error(where + " must be in " + std::to_string(low) + " .. " + std::to_string(high) + ", found " + std::to_string(x));
  return x;
}

double checked_number(const nlohmann::json& v, const std::string& where, double low, double high) {
  if (!v.is_number()) throw Error(where + " must be a number, found " + shown(v));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < low || x > high) {
    char buf[128];
    std::snprintf(buf, sizeof buf, " must be in [%g, %g], found %g", low, high, x);
    throw Error(where + buf);
  }
  return x;
}

}  // namespace

JsonFields::JsonFields(const nlohmann::json& object, std::string where, const std::vector<std::string>& known,
                       UnknownKeys unknown)
    : object_(object), where_(std::move(where)) {
  if (!object_.is_object()) throw Error(where_ + " must be a JSON object, found " + shown(object_));
  if (unknown == UnknownKeys::ignored) return;
  for (const auto& [key, value] : object_.items())
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw Error(where_ + ": unknown key '" + key + "' (known: " + list + ")");
    }
}

int64_t JsonFields::integer(const std::string& key, int64_t fallback, int64_t low, int64_t high) const {
  return has(key) ? checked_integer(at(key), where_ + ": '" + key + "'", low, high) : fallback;
}

double JsonFields::number(const std::string& key, double fallback, double low, double high) const {
  return has(key) ? checked_number(at(key), where_ + ": '" + key + "'", low, high) : fallback;
}

std::string JsonFields::text(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  if (!at(key).is_string()) throw Error(where_ + ": '" + key + "' must be a string, found " + shown(at(key)));
  return at(key).get<std::string>();
}

std::string JsonFields::text_of(const std::string& key) const { return has(key) ? shown(at(key)) : "(missing)"; }

bool JsonFields::flag(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  if (!at(key).is_boolean()) throw Error(where_ + ": '" + key + "' must be true or false, found " + shown(at(key)));
  return at(key).get<bool>();
}

std::vector<int64_t> JsonFields::integers(const std::string& key, const std::vector<int64_t>& fallback, int64_t low,
                                          int64_t high) const {
  if (!has(key)) return fallback;
  const auto& a = at(key);
  if (!a.is_array() || a.empty()) throw Error(where_ + ": '" + key + "' must be a non-empty array, found " + shown(a));
  std::vector<int64_t> out;
  for (size_t i = 0; i < a.size(); ++i)
    out.push_back(checked_integer(a[i], where_ + ": '" + key + "'[" + std::to_string(i) + "]", low, high));
  return out;
}

std::vector<double> JsonFields::numbers(const std::string& key, const std::vector<double>& fallback, double low,
                                        double high) const {
  if (!has(key)) return fallback;
  const auto& a = at(key);
  if (!a.is_array()) throw Error(where_ + ": '" + key + "' must be an array, found " + shown(a));
  std::vector<double> out;
  for (size_t i = 0; i < a.size(); ++i)
    out.push_back(checked_number(a[i], where_ + ": '" + key + "'[" + std::to_string(i) + "]", low, high));
  return out;
}

JsonFields JsonFields::object(const std::string& key, const std::vector<std::string>& known) const {
  return JsonFields(has(key) ? at(key) : nlohmann::json::object(), where_ + ": '" + key + "'", known);
}

std::vector<JsonFields> JsonFields::objects(const std::string& key, const std::vector<std::string>& known) const {
  if (!has(key) || !at(key).is_array() || at(key).empty())
    throw Error(where_ + ": '" + key + "' must be a non-empty array of objects" + (has(key) ? ", found " + shown(at(key)) : " (missing)"));
  std::vector<JsonFields> out;
  for (size_t i = 0; i < at(key).size(); ++i)
    out.emplace_back(at(key)[i], where_ + ": " + key + "[" + std::to_string(i) + "]", known);
  return out;
}

}  // namespace fca
