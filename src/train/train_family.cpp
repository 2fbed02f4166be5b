#include "train/train_family.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "models/run_setting.h"
#include "core/parse.h"

namespace fca {
namespace {

constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr double kMax = std::numeric_limits<double>::max();

std::vector<TrainFamily>& table() {
  static std::vector<TrainFamily> families;
  return families;
}

std::string known_names() {
  std::string known;
  for (const auto& f : table()) known += (known.empty() ? "" : ", ") + f.name;
  return known.empty() ? "none installed" : known;
}

// A numeric value within the setting's range, or an Error naming the flag or key and the range.
nlohmann::json in_setting_range(const FamilySetting& s, const nlohmann::json& value, const std::string& what) {
  const bool integer = s.default_value.is_number_integer();
  if (!s.range.contains(value.get<double>()))
    throw Error(what + ": " + (integer ? value.dump() : number_text(value.get<double>())) + " is not " + s.range.words(integer));
  return value;
}

// One setting's value: of the default's type, or (from flags) text parsed as it.
nlohmann::json setting_value(const FamilySetting& s, const nlohmann::json& v, const std::string& what, bool text_given) {
  const nlohmann::json& d = s.default_value;
  if (d.is_boolean()) {
    if (text_given) {
      const std::string text = v.get<std::string>();
      if (text == "true" || text == "false") return text == "true";
      throw Error(what + " must be true or false, found \"" + text + "\"");
    }
    if (!v.is_boolean()) throw Error(what + " must be true or false, found " + v.dump());
    return v;
  }
  if (text_given && !d.is_string()) {
    const std::string text = v.get<std::string>();
    nlohmann::json parsed;
    try {
      parsed = d.is_number_integer() ? nlohmann::json(parse_integer(text, what, -kIntMax, kIntMax))
                                     : nlohmann::json(parse_number(text, what, -kMax, kMax));
    } catch (const Error&) {
      throw Error(what + ": '" + text + "' is not " + s.range.words(d.is_number_integer()));
    }
    return in_setting_range(s, parsed, what);
  }
  if (d.is_string()) {
    if (!v.is_string()) throw Error(what + " must be text, found " + v.dump());
    const std::string text = v.get<std::string>();
    if (!s.choices.empty()) {
      std::string allowed;
      for (const auto& c : s.choices) {
        if (c == text) return text;
        allowed += (allowed.empty() ? "" : ", ") + c;
      }
      throw Error(what + " is \"" + text + "\", expected one of " + allowed);
    }
    return text;
  }
  if (d.is_number_integer()) {
    if (!v.is_number_integer()) throw Error(what + " must be an integer, found " + v.dump());
    const int64_t x = v.get<int64_t>();
    if (x < -kIntMax || x > kIntMax) throw Error(what + " is " + v.dump() + ", outside the range of an int");
    return in_setting_range(s, x, what);
  }
  if (!v.is_number()) throw Error(what + " must be a number, found " + v.dump());
  const double x = v.get<double>();
  if (!std::isfinite(x)) throw Error(what + " must be finite, found " + v.dump());
  return in_setting_range(s, x, what);
}

std::string bound_text(double v) { return std::isinf(v) ? (v > 0 ? "inf" : "-inf") : number_text(v); }

}  // namespace

bool SettingRange::contains(double v) const {
  return std::isfinite(v) && (low_open ? v > low : v >= low) && (high_open ? v < high : v <= high);
}

std::string SettingRange::words(bool integer) const {
  const std::string kind = integer ? "a whole number" : "a number";
  const bool has_low = std::isfinite(low), has_high = std::isfinite(high);
  if (!has_low && !has_high) return integer ? "a whole number" : "a finite number";
  if (!has_high) return kind + (low_open ? " > " : " >= ") + bound_text(low);
  if (!has_low) return kind + (high_open ? " < " : " <= ") + bound_text(high);
  if (integer && !low_open && !high_open) return kind + " in " + bound_text(low) + " .. " + bound_text(high);
  return kind + " in " + (low_open ? "(" : "[") + bound_text(low) + ", " + bound_text(high) + (high_open ? ")" : "]");
}

void add_train_family(TrainFamily family) {
  for (const auto& f : table())
    if (f.name == family.name) throw Error("train family \"" + family.name + "\" is installed twice");
  table().push_back(std::move(family));
}

const std::vector<TrainFamily>& train_families() { return table(); }

const TrainFamily& train_family_named(const std::string& name) {
  for (const auto& f : table())
    if (f.name == name) return f;
  throw Error("unknown --arch \"" + name + "\" (trainable families: " + known_names() + ")");
}

std::string setting_flag(const std::string& key) { return run_setting_flag(key); }

nlohmann::json resolve_settings(const TrainFamily& family, const nlohmann::json& given, const std::string& where,
                                SettingSource source) {
  const bool flags = source == SettingSource::flags;
  const auto name_of = [flags](const std::string& key) { return flags ? setting_flag(key) : "\"" + key + "\""; };
  if (!given.is_null() && !given.is_object()) throw Error(where + ": the " + family.name + " settings must be an object");
  nlohmann::json out = nlohmann::json::object();
  for (const auto& s : family.settings) out[s.key] = s.default_value;
  if (given.is_null()) return out;
  for (auto it = given.begin(); it != given.end(); ++it) {
    const FamilySetting* setting = nullptr;
    std::string known;
    for (const auto& s : family.settings) {
      if (s.key == it.key()) setting = &s;
      known += (known.empty() ? "" : ", ") + s.key;
    }
    if (setting == nullptr)
      throw Error(where + ": " + name_of(it.key()) + " is not a setting of the " + family.name + " family (its settings: " +
                  (known.empty() ? "none" : known) + ")");
    if (flags && !it.value().is_string()) throw Error(where + ": " + name_of(it.key()) + " must be given as text");
    out[it.key()] = setting_value(*setting, it.value(), where + ": " + family.name + " setting " + name_of(it.key()), flags);
  }
  return out;
}

std::vector<nlohmann::json> family_configurations(const TrainFamily& family) {
  const std::string where = "the " + family.name + " family's configurations";
  std::vector<nlohmann::json> out{resolve_settings(family, nlohmann::json::object(), where)};
  for (const auto& setting : family.settings)
    for (const std::string& choice : setting.choices) {
      if (setting.default_value.is_string() && setting.default_value.get<std::string>() == choice) continue;
      nlohmann::json given = nlohmann::json::object();
      given[setting.key] = choice;
      out.push_back(resolve_settings(family, given, where));
    }
  return out;
}

std::string checkpoint_path(const TrainFamily& family, const std::string& stem) {
  return family.checkpoint_is_folder ? stem : stem + ".safetensors";
}

CheckpointFiles single_file_checkpoint(const std::string& out) {
  const std::string suffix = ".safetensors";
  const std::string stem = out.size() > suffix.size() && out.ends_with(suffix) ? out.substr(0, out.size() - suffix.size()) : out;
  return {out, stem + ".train-state.safetensors", out + ".log.jsonl"};
}

}  // namespace fca
