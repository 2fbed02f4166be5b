// Reading a JSON object field by field, strictly: unknown keys are errors (a typo must not be
// ignored), every value has the type asked for, integers are integers (not 1e12 or 3.5) within the
// range the caller gives before they are narrowed, numbers are finite and within range. Errors
// name the file, the path to the field, what was expected and what was found.
#pragma once
#include <cstdint>
#include "core/json.h"
#include <string>
#include <vector>

namespace fca {

// Whether keys outside `known_keys` are errors (fca's own files) or ignored (third-party files such
// as a Hugging Face config.json, whose metadata grows with every library release).
enum class UnknownKeys { rejected, ignored };

class JsonFields {
 public:
  // `where`: the file and the path to this object, e.g. "study.json: variants[2]".
  JsonFields(const nlohmann::json& object, std::string where, const std::vector<std::string>& known_keys,
             UnknownKeys unknown = UnknownKeys::rejected);

  bool has(const std::string& key) const { return object_.contains(key); }
  int64_t integer(const std::string& key, int64_t fallback, int64_t low, int64_t high) const;
  double number(const std::string& key, double fallback, double low, double high) const;
  std::string text(const std::string& key, const std::string& fallback) const;
  bool flag(const std::string& key, bool fallback) const;
  // The value as JSON text, shortened, for messages ("(missing)" when absent).
  std::string text_of(const std::string& key) const;
  // A non-empty array of integers in [low, high], or `fallback` when absent.
  std::vector<int64_t> integers(const std::string& key, const std::vector<int64_t>& fallback, int64_t low, int64_t high) const;
  std::vector<double> numbers(const std::string& key, const std::vector<double>& fallback, double low, double high) const;
  // A nested object (an empty one when absent) and a non-empty array of objects.
  JsonFields object(const std::string& key, const std::vector<std::string>& known_keys) const;
  std::vector<JsonFields> objects(const std::string& key, const std::vector<std::string>& known_keys) const;
  const std::string& where() const { return where_; }
  const nlohmann::json& json() const { return object_; }

 private:
  const nlohmann::json& at(const std::string& key) const { return object_.at(key); }
  nlohmann::json object_;
  std::string where_;
};

}  // namespace fca
