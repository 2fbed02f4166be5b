#include "study/paper_values.h"

#include <cstdio>

#include "core/error.h"
#include "study/study.h"

namespace fca {
namespace {

// One reading's form: a setting and exactly one of number, text or not_reported.
void check_reading(const nlohmann::json& r, const std::string& where) {
  if (!r.is_object()) throw Error(where + ": a reading must be an object");
  int kinds = 0;
  for (const char* k : {"number", "text", "not_reported"}) kinds += r.contains(k);
  if (kinds != 1) throw Error(where + ": a reading has exactly one of \"number\", \"text\" or \"not_reported\"");
  if (r.contains("number") && !r["number"].is_number()) throw Error(where + ": \"number\" must be a number");
  for (const char* k : {"text", "not_reported", "setting", "derived", "note"})
    if (r.contains(k) && (!r[k].is_string() || r[k].get<std::string>().empty())) throw Error(where + ": \"" + std::string(k) + "\" must be a non-empty text");
  if (!r.contains("not_reported") && !r.contains("setting"))
    throw Error(where + ": a reported value needs its \"setting\" (the paper's model size and corpus)");
  for (auto it = r.begin(); it != r.end(); ++it)
    if (it.key() != "number" && it.key() != "text" && it.key() != "not_reported" && it.key() != "setting" && it.key() != "derived" &&
        it.key() != "note")
      throw Error(where + ": unknown key \"" + it.key() + "\"");
}

}  // namespace

PaperValues::PaperValues(const std::string& path) : path_(path), doc_(read_json_config(path, "paper values file")) {
  if (!doc_.is_object() || doc_.value("schema", "") != "fca-paper-values-v2")
    throw Error(path + ": schema is not \"fca-paper-values-v2\" (readings with their settings; docs/paper.md)");
  for (const char* key : {"paper", "values"})
    if (!doc_.contains(key)) throw Error(path + ": '" + std::string(key) + "' is missing");
  if (!doc_["values"].is_object()) throw Error(path + ": 'values' must be an object");
  for (auto it = doc_["values"].begin(); it != doc_["values"].end(); ++it) {
    const std::string where = path + ": entry \"" + it.key() + "\"";
    if (!it.value().is_array() || it.value().empty()) throw Error(where + ": must be a non-empty list of readings");
    for (const auto& r : it.value()) check_reading(r, where);
  }
}

const nlohmann::json& PaperValues::readings(const std::string& id) {
  if (!doc_["values"].contains(id))
    throw Error(path_ + ": no entry for figure \"" + id + "\"; add the paper's readings, or {\"not_reported\": why} where the paper has no value");
  printed_.insert(id);
  return doc_["values"][id];
}

bool PaperValues::reported(const std::string& id) {
  for (const auto& r : readings(id))
    if (!r.contains("not_reported")) return true;
  return false;
}

void PaperValues::check_all_printed() const {
  for (auto it = doc_["values"].begin(); it != doc_["values"].end(); ++it)
    if (!printed_.count(it.key()))
      throw Error(path_ + ": entry \"" + it.key() + "\" is no figure of the page (misspelt, or another corpus's paper_key?)");
}

std::string paper_readings_text(const nlohmann::json& readings) {
  std::string t;
  for (const auto& r : readings) {
    if (!t.empty()) t += "; ";
    if (r.contains("not_reported")) {
      t += "not reported by the paper (" + r["not_reported"].get<std::string>() + ")";
      continue;
    }
    if (r.contains("number")) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.6g", r["number"].get<double>());
      t += buf;
    } else {
      t += r["text"].get<std::string>();
    }
    t += " [" + r["setting"].get<std::string>();
    if (r.contains("derived")) t += "; derived: " + r["derived"].get<std::string>();
    if (r.contains("note")) t += "; " + r["note"].get<std::string>();
    t += "]";
  }
  return t;
}

}  // namespace fca
