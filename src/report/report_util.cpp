#include "report/report_util.h"

#include <cstdio>

#include "core/undefined_statistic.h"

namespace fca::report_util {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string interval(const nlohmann::json& ci, const char* format, double scale) {
  if (ci.is_null()) return "–";
  std::string s = "[";
  s += fmt(format, scale * ci[0].get<double>());
  s += ", ";
  s += fmt(format, scale * ci[1].get<double>());
  s += "]";
  return s;
}

const nlohmann::json* find_condition(const nlohmann::json& audit, const std::string& name) {
  for (const auto& c : audit["conditions"])
    if (c["name"] == name) return &c;
  return nullptr;
}

const ReportData::Named* find_aggregate(const ReportData& d, const std::string& sha256) {
  for (const auto& g : d.aggregates)
    for (const auto& in : g.doc["inputs"])
      if (in.value("model_sha256", "") == sha256) return &g;
  return nullptr;
}

const nlohmann::json* find_exec(const ReportData& d, const std::string& sha256) {
  for (const auto& e : d.execs)
    for (const auto& m : e.doc["models"])
      if (m["model_sha256"] == sha256) return &m;
  return nullptr;
}

std::string audit_label(const ReportData& d, const nlohmann::json& audit) {
  return d.label(audit["provenance"]["model_sha256"].get<std::string>(), audit["model"]["description"].get<std::string>());
}

std::string audit_heading(const ReportData& d, const nlohmann::json& audit) {
  const std::string label = audit_label(d, audit), description = audit["model"]["description"].get<std::string>();
  return label == description ? label : label + ": " + description;
}

double text_width(const std::string& text, int size) {
  size_t glyphs = 0;
  for (unsigned char c : text) glyphs += (c & 0xC0) != 0x80;  // UTF-8: count code points, not bytes
  return 0.6 * size * double(glyphs);
}

}  // namespace fca::report_util
