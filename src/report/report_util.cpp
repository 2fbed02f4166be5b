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

const nlohmann::json* find_exec(const ReportData& d, const std::string& sha256, bool external) {
  for (const auto& e : d.execs)
    for (const auto& m : e.doc["models"])
      if (m["model_sha256"] == sha256 && (m.value("family", "") == "external") == external) return &m;
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

std::vector<PlainTable> diagnostics_tables(const nlohmann::json& diagnostics) {
  std::vector<PlainTable> out;
  if (!diagnostics.is_object()) return out;
  auto cell = [](const nlohmann::json& v) { return v.is_number() ? fmt("%.4g", v.get<double>()) : v.is_null() ? std::string("–") : v.dump(); };
  auto string_list = [](const nlohmann::json& v, size_t size) {
    if (!v.is_array() || v.size() != size) return false;
    for (const auto& x : v)
      if (!x.is_string()) return false;
    return true;
  };
  for (auto group = diagnostics.begin(); group != diagnostics.end(); ++group) {
    if (!group.value().is_object()) continue;
    PlainTable values{group.key(), {"figure", "value"}, {}};
    std::vector<PlainTable> matrices;
    for (auto it = group.value().begin(); it != group.value().end(); ++it) {
      const auto& v = it.value();
      if (v.is_array() && !v.empty() && v[0].is_array()) {  // a matrix
        PlainTable matrix{group.key() + ": " + it.key(), {""}, {}};
        const nlohmann::json* rows = nullptr;
        const nlohmann::json* columns = nullptr;
        for (auto l = group.value().begin(); l != group.value().end(); ++l) {
          if (rows == nullptr && string_list(l.value(), v.size())) rows = &l.value();
          else if (columns == nullptr && string_list(l.value(), v[0].size())) columns = &l.value();
        }
        for (size_t c = 0; c < v[0].size(); ++c) matrix.header.push_back(columns ? (*columns)[c].get<std::string>() : std::to_string(c));
        for (size_t r = 0; r < v.size(); ++r) {
          std::vector<std::string> row{rows ? (*rows)[r].get<std::string>() : std::to_string(r)};
          for (size_t c = 0; c < v[r].size(); ++c) row.push_back(cell(v[r][c]));
          matrix.rows.push_back(row);
        }
        matrices.push_back(matrix);
      } else if (v.is_array()) {
        bool labels = !v.empty();
        for (const auto& x : v) labels = labels && x.is_string();
        if (labels) continue;  // a matrix's labels
        std::string joined;
        for (const auto& x : v) joined += (joined.empty() ? "" : ", ") + cell(x);
        values.rows.push_back({it.key(), joined});
      } else {
        values.rows.push_back({it.key(), v.is_string() ? v.get<std::string>() : cell(v)});
      }
    }
    if (!values.rows.empty()) out.push_back(values);
    for (auto& m : matrices) out.push_back(std::move(m));
  }
  return out;
}

}  // namespace fca::report_util
