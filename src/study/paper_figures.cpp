// The paper's figures measured from the result files of the studies in <out>/<corpus>/ (eval,
// aggregate, audit and exec JSON; never a model): the result-file reader (StudyFigures) and the
// page's sections. The claims are in paper_claims.cpp, the document in paper_document.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "audit/statistics.h"
#include "core/error.h"
#include "study/paper_sources.h"
#include "train/train_family.h"

namespace fca {
namespace {

nlohmann::json read_result(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot be read (the paper's figures are measured from it; run the study first)");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw Error(path + ": not a JSON object");
  return j;
}

double number_at(const nlohmann::json& j, const std::string& pointer, const std::string& path) {
  const nlohmann::json::json_pointer p(pointer);
  if (!j.contains(p) || !j[p].is_number()) throw Error(path + ": " + pointer + " is missing or not a number");
  return j[p].get<double>();
}

// A figure of a single audit.json (an untrained arm): the audit's own paired-window bootstrap
// interval where it has one.
Figure audit_figure(const nlohmann::json& a, const std::string& name, const std::string& path) {
  Figure f;
  f.basis = "one checkpoint: paired-window bootstrap interval";
  const auto dot = name.find('.');
  const std::string kind = name.substr(0, dot), key = name.substr(dot + 1);
  nlohmann::json node;
  if (kind == "delta_nll") {
    for (const auto& c : a["conditions"])
      if (c["name"] == key) node = {{"estimate", c["delta_nll"]}, {"ci95", c["ci95"]}};
  } else if (kind == "retention" && a["retention"].contains(key)) {
    node = a["retention"][key];
  } else if (kind == "factor_effect" && a["factor_effects"].is_object() && a["factor_effects"].contains(key)) {
    node = a["factor_effects"][key];
  } else if (kind == "variance_share" && a["variance"]["shares"].contains(key)) {
    node = {{"estimate", a["variance"]["shares"][key]}, {"ci95", nullptr}};
  }
  if (node.is_null()) throw Error(path + ": has no figure \"" + name + "\"");
  if (!node.contains("estimate") || !node["estimate"].is_number()) {
    f.note = node.value("note", a["variance"].value("note", std::string("undefined")));
    return f;
  }
  f.mean = node["estimate"];
  f.ci95 = node.value("ci95", nlohmann::json());
  f.values = nlohmann::json::array({f.mean});
  return f;
}

}  // namespace

std::string paper_fmt(const char* format, double a, double b, double c, double d) {
  char buf[200];
  std::snprintf(buf, sizeof buf, format, a, b, c, d);
  return buf;
}

bool StudyFigures::has_variant(const std::string& name) const {
  return std::any_of(c_.study.variants.begin(), c_.study.variants.end(), [&](const StudyVariant& x) { return x.name == name; });
}

const StudyVariant& StudyFigures::variant(const std::string& name) const {
  const auto v = std::find_if(c_.study.variants.begin(), c_.study.variants.end(), [&](const StudyVariant& x) { return x.name == name; });
  if (v == c_.study.variants.end()) throw Error("internal error: the paper reads a variant \"" + name + "\" the config does not have");
  return *v;
}

std::vector<double> StudyFigures::per_seed(const std::string& name, const std::string& field) const {
  std::vector<std::string> paths;
  if (!variant(name).trained()) paths.push_back(dir_ + "/" + name + ".eval-test.json");
  else
    for (uint64_t seed : c_.study.seeds) paths.push_back(dir_ + "/" + name + "-s" + std::to_string(seed) + ".eval-test.json");
  std::vector<double> v;
  for (const auto& path : paths) v.push_back(number_at(read_result(path), "/" + field, path));
  return v;
}

Measured StudyFigures::mean_sd(const std::string& name, const std::string& field, const char* format) const {
  const auto v = per_seed(name, field);
  const std::string text = v.size() > 1 ? paper_fmt(format, mean(v), sample_sd(v)) : paper_fmt("%.4f", v[0]);
  return {text + " (n " + std::to_string(v.size()) + ")", mean(v), {{"per_checkpoint", v}}};
}

Measured StudyFigures::wins(const std::string& a, const std::string& b) const {
  const auto pa = per_seed(a, "byte_ppl"), pb = per_seed(b, "byte_ppl");
  int k = 0;
  for (size_t i = 0; i < pa.size(); ++i) k += pa[i] < pb[i];
  return {std::to_string(k) + " of " + std::to_string(pa.size()) + " seeds", k, {{"wins", k}, {"seeds", pa.size()}}};
}

const nlohmann::json& StudyFigures::aggregate(const std::string& name) const {
  const std::string path = dir_ + "/" + name + "-aggregate.json";
  auto it = files_.find(path);
  if (it == files_.end()) it = files_.emplace(path, read_result(path)).first;
  return it->second;
}

std::vector<nlohmann::json> StudyFigures::audits(const std::string& name) const {
  std::vector<nlohmann::json> out;
  if (!variant(name).trained()) out.push_back(read_result(dir_ + "/" + name + "-audit/audit.json"));
  else
    for (uint64_t seed : c_.study.seeds) out.push_back(read_result(dir_ + "/" + name + "-s" + std::to_string(seed) + "-audit/audit.json"));
  return out;
}

Figure StudyFigures::figure(const std::string& name, const std::string& figure_name) const {
  if (!variant(name).trained()) {
    const std::string path = dir_ + "/" + name + "-audit/audit.json";
    auto it = files_.find(path);
    if (it == files_.end()) it = files_.emplace(path, read_result(path)).first;
    return audit_figure(it->second, figure_name, path);
  }
  const auto& a = aggregate(name);
  if (!a.contains("figures") || !a["figures"].contains(figure_name))
    throw Error(dir_ + "/" + name + "-aggregate.json: figures has no \"" + figure_name + "\"");
  const auto& j = a["figures"][figure_name];
  Figure f;
  f.basis = "interval over checkpoints";
  f.mean = j["mean"];
  f.ci95 = j.value("ci95", nlohmann::json());
  f.values = j.value("values", nlohmann::json::array());
  f.note = j.value("note", nlohmann::json());
  f.holm_p = j.value("holm_p", nlohmann::json());
  return f;
}

Measured StudyFigures::interval(const std::string& name, const std::string& figure_name, double scale, const char* unit) const {
  const Figure f = figure(name, figure_name);
  if (!f.defined()) return {f.note.is_string() ? f.note.get<std::string>() : "undefined", nullptr};
  const double m = f.mean.get<double>() * scale;
  nlohmann::ordered_json values = nlohmann::ordered_json::array();
  for (const auto& v : f.values) values.push_back(v.is_number() ? nlohmann::ordered_json(v.get<double>() * scale) : nlohmann::ordered_json());
  Measured out{paper_fmt("%.4g", m) + unit, m, {{"per_checkpoint", values}, {"basis", f.basis}}};
  if (f.ci95.is_array() && f.ci95.size() == 2 && f.ci95[0].is_number()) {
    const double lo = f.ci95[0].get<double>() * scale, hi = f.ci95[1].get<double>() * scale;
    out.text = paper_fmt("%.4g [%.4g, %.4g]", m, lo, hi) + unit;
    out.data["ci95"] = {lo, hi};
  }
  return out;
}

Measured StudyFigures::penalty(const std::string& name, const std::string& condition) const {
  Measured m = interval(name, "delta_nll." + condition);
  if (m.value.is_null()) return m;
  double mc_se = 0;
  bool randomised = false;
  const auto all = audits(name);
  for (const auto& audit : all)
    for (const auto& cond : audit["conditions"])
      if (cond["name"] == condition && cond["mc_se"].is_number()) mc_se += cond["mc_se"].get<double>(), randomised = true;
  int positive = 0;
  for (const auto& v : m.data["per_checkpoint"]) positive += v.is_number() && v.get<double>() > 0;
  m.text += randomised ? paper_fmt("; MC SE %.2g", mc_se / double(all.size())) : "; MC SE: not randomised";
  const size_t n = m.data["per_checkpoint"].size();
  m.text += "; > 0 in " + std::to_string(positive) + " of " + std::to_string(n) + (variant(name).trained() ? " seeds" : " checkpoint");
  return m;
}

const nlohmann::json& StudyFigures::exec() const {
  const std::string path = dir_ + "/exec/exec.json";
  auto it = files_.find(path);
  if (it == files_.end()) it = files_.emplace(path, read_result(path)).first;
  return it->second;
}

namespace {
const nlohmann::json* find_exec_model(const StudyFigures& f, const StudyVariant& v) {
  const std::string path = v.trained() ? checkpoint_path(train_family_named(v.arch), f.dir() + "/" + v.name + "-s" +
                                                                                         std::to_string(f.config().study.seeds.front()))
                                       : v.path;
  for (const auto& m : f.exec()["models"])
    if (m.value("path", "") == path) return &m;
  return nullptr;
}
}  // namespace

bool StudyFigures::has_exec_model(const std::string& name) const { return find_exec_model(*this, variant(name)) != nullptr; }

const nlohmann::json& StudyFigures::exec_model(const std::string& name) const {
  const nlohmann::json* m = find_exec_model(*this, variant(name));
  if (m == nullptr) throw Error(dir_ + "/exec/exec.json: no model of variant " + name);
  return *m;
}

const nlohmann::json& StudyFigures::live_mode(const std::string& name) const {
  for (const auto& mode : exec_model(name)["modes"])
    if (mode["mode"] == "live") return mode;
  throw Error(dir_ + "/exec/exec.json: no live mode of " + name);
}

}  // namespace fca
