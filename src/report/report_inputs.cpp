// Loading and validating the report's inputs.
#include <cmath>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/undefined_statistic.h"
#include "report/report.h"

namespace fca {

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
}

void expect_schema(const nlohmann::json& j, const std::string& path, const std::string& schema) {
  if (!j.is_object() || !j.contains("schema"))
    throw Error(path + ": field 'schema' is missing (expected \"" + schema + "\")");
  if (j["schema"] != schema) throw Error(path + ": schema is " + j["schema"].dump() + ", expected \"" + schema + "\"");
}

// Every JSON pointer in `fields` must exist (and not be null).
void expect_fields(const nlohmann::json& j, const std::string& path, const std::vector<std::string>& fields) {
  for (const auto& f : fields) {
    const nlohmann::json::json_pointer p(f);
    if (!j.contains(p) || j.at(p).is_null()) throw Error(path + ": field '" + f + "' is missing");
  }
}

// The variance shares: numbers, or all null with the reason in "/variance/note" (a constant tensor).
void expect_shares(const nlohmann::json& j, const std::string& path) {
  const auto& shares = j["variance"]["shares"];
  if (!shares.is_object()) throw Error(path + ": '/variance/shares' must be an object of numbers");
  for (const auto& [key, value] : shares.items()) {
    if (value.is_number()) continue;
    if (!value.is_null())
      throw Error(path + ": '/variance/shares/" + key + "' must be a number, or null when the shares are undefined; found " +
                  value.dump().substr(0, 60));
    if (undefined_reason(j["variance"]).empty())
      throw Error(path + ": '/variance/shares/" + key + "' is null but '/variance/note' does not say why: expected \"undefined: <reason>\"");
  }
}

// Every latency ratio of an exec.json (a mode's or skip's latency_ratio_to_dense,
// latency_ratio_to_unskipped and latency_ratio_to_reference, a saving's latency_ratio): null (no reference), or an object whose
// defined estimate comes with the words the report prints ("difference").
void expect_latency_ratios(const nlohmann::json& j, const std::string& path) {
  auto check = [&](const nlohmann::json& r, const std::string& where) {
    if (r.is_null()) return;
    if (!r.is_object() || !r.contains("estimate") || !r.contains("ci95"))
      throw Error(path + ": " + where + " must be null or a ratio object {estimate, ci95, difference}; found " + r.dump().substr(0, 60));
    if (!r["estimate"].is_null() && !(r["estimate"].is_number() && r.contains("difference") && r["difference"].is_string()))
      throw Error(path + ": " + where + " has an estimate but no \"difference\" saying what it shows");
  };
  for (size_t i = 0; i < j["models"].size(); ++i) {
    const auto& m = j["models"][i];
    const std::string at = "models[" + std::to_string(i) + "]";
    for (const char* list : {"modes", "skip_sweep"}) {
      if (!m.contains(list)) continue;
      for (size_t k = 0; k < m[list].size(); ++k)
        for (const char* key : {"latency_ratio_to_dense", "latency_ratio_to_unskipped", "latency_ratio_to_reference"})
          if (m[list][k].contains(key)) check(m[list][k][key], at + "/" + list + "[" + std::to_string(k) + "]/" + key);
    }
    if (m.contains("savings"))
      for (size_t k = 0; k < m["savings"].size(); ++k)
        check(m["savings"][k]["latency_ratio"], at + "/savings[" + std::to_string(k) + "]/latency_ratio");
  }
}

}  // namespace

std::vector<std::string> path_labels(const std::vector<std::string>& paths) {
  auto components = [](std::string p) {
    std::vector<std::string> parts;
    std::string part;
    for (char c : p + "/") {
      if (c != '/') {
        part += c;
      } else if (!part.empty() && part != ".") {
        parts.push_back(part);
        part.clear();
      } else {
        part.clear();
      }
    }
    if (parts.empty()) parts.push_back(p);
    const std::string ext = ".safetensors";
    std::string& last = parts.back();
    if (last.size() > ext.size() && last.compare(last.size() - ext.size(), ext.size(), ext) == 0) last.resize(last.size() - ext.size());
    return parts;
  };
  auto suffix = [](const std::vector<std::string>& parts, size_t k) {
    std::string out;
    for (size_t i = parts.size() - std::min(k, parts.size()); i < parts.size(); ++i) out += (out.empty() ? "" : "/") + parts[i];
    return out;
  };
  std::vector<std::vector<std::string>> parts;
  size_t longest = 1;
  for (const auto& p : paths) parts.push_back(components(p)), longest = std::max(longest, parts.back().size());
  std::vector<std::string> labels(paths.size());
  for (size_t k = 1; k <= longest; ++k) {
    std::map<std::string, std::string> owner;  // label -> the path that has it
    bool distinct = true;
    for (size_t i = 0; i < paths.size(); ++i) {
      labels[i] = suffix(parts[i], k);
      const auto [it, fresh] = owner.emplace(labels[i], paths[i]);
      distinct = distinct && (fresh || it->second == paths[i]);
    }
    if (distinct) break;
  }
  return labels;
}

std::string ReportData::label(const std::string& sha256, const std::string& fallback) const {
  const auto it = labels.find(sha256);
  return it == labels.end() ? fallback : it->second;
}

ReportData::TrainLog read_train_log(const std::string& p) {
  std::ifstream log(p);
  if (!log) throw Error(p + ": cannot open the training log");
  ReportData::TrainLog t;
  t.path = p;
  std::string line;
  int n = 0;
  while (std::getline(log, line)) {
    ++n;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(p + ": line " + std::to_string(n) + " is not valid JSON (" + e.what() + ")");
    }
    const std::string type = j.value("type", "");
    if (type == "start") {
      const auto& o = j["options"];
      if (!j.contains("label") || !j["label"].is_string())
        throw Error(p + ": line " + std::to_string(n) + ": the start record has no 'label' (written by fca since the "
                    "family table; train again to get a log the report can read)");
      t.label = j["label"].get<std::string>();
      t.label += " L" + std::to_string(o["config"].value("n_layer", 0)) + " seed " + std::to_string(o.value("seed", 0));
    } else if (type == "step") {
      if (!j["step"].is_number() || !j["loss"].is_number()) throw Error(p + ": line " + std::to_string(n) + ": step or loss is not a number");
      t.loss.push_back({j["step"].get<double>(), j["loss"].get<double>()});
    } else if (type == "valid") {
      if (!j["step"].is_number() || !j["nll"].is_number()) throw Error(p + ": line " + std::to_string(n) + ": step or nll is not a number");
      t.valid.push_back({j["step"].get<double>(), j["nll"].get<double>()});
    }
  }
  if (t.label.empty()) throw Error(p + ": no 'start' record: not an fca training log");
  return t;
}

namespace {

// An audit.json with every field the report reads, its statistics and its shares checked.
nlohmann::json load_audit(const std::string& p) {
  nlohmann::json j = read_json(p);
  expect_schema(j, p, "fca-audit-v1");
  expect_fields(j, p, {"/model/description", "/model/family", "/model/path", "/model/static_profile",
                       "/model/structure_removed", "/conditions", "/retention", "/criteria", "/variance/shares",
                       "/variance/total_variance", "/baseline/nll", "/exact_replay/max_abs_delta_logit",
                       "/settings/eval_windows", "/settings/reps", "/profiles/static_profile", "/provenance/model_sha256",
                       "/provenance/fca_version", "/provenance/git_commit", "/provenance/threads", "/provenance/machine"});
  for (size_t i = 0; i < j["conditions"].size(); ++i)
    expect_fields(j["conditions"][i], p + " conditions[" + std::to_string(i) + "]", {"/name", "/delta_nll", "/ci95"});
  check_statistics(j, p);
  expect_shares(j, p);
  return j;
}

// An exec.json with every field the report reads checked (exec.json before issue 44 named a model's
// label "gate": read as "label").
nlohmann::json load_exec(const std::string& p) {
  nlohmann::json j = read_json(p);
  expect_schema(j, p, "fca-exec-v2");
  expect_fields(j, p, {"/models", "/settings/batch", "/settings/margin", "/timing/rounds", "/provenance/threads", "/sgemm_peak_gflops"});
  for (size_t i = 0; i < j["models"].size(); ++i) {
    auto& m = j["models"][i];
    const std::string where = p + " models[" + std::to_string(i) + "]";
    if (!m.contains("label") && m.contains("gate")) m["label"] = m["gate"];
    expect_fields(m, where, {"/model_sha256", "/label", "/modes/0/latency/median_s"});
    // An adapter's model counts executed blocks only where it names its block modules.
    if (m.value("family", "") == "external")
      expect_fields(m, where, {"/device", "/units", "/modes/0/gflop_per_token", "/modes/0/executed_units_per_token",
                               "/modes/0/uncounted_ops", "/modes/0/gflop_per_pass_by_kind/controller"});
    else
      expect_fields(m, where, {"/modes/0/executed_blocks", "/modes/0/total_blocks"});
  }
  check_statistics(j, p);
  expect_latency_ratios(j, p);
  return j;
}

// Labels: one per checkpoint (by weights hash), from the paths the audits and execs give.
void label_checkpoints(ReportData& d) {
  std::vector<std::string> shas, paths;
  auto add = [&](const nlohmann::json& sha, const nlohmann::json& path, const nlohmann::json& description) {
    if (!sha.is_string() || !path.is_string()) return;
    for (const auto& s : shas)
      if (s == sha.get<std::string>()) return;
    shas.push_back(sha.get<std::string>());
    // An external adapter's "path" is its command: the model's description names it better.
    const std::string p = path.get<std::string>();
    paths.push_back(p.rfind("external: ", 0) == 0 && description.is_string() ? description.get<std::string>() : p);
  };
  for (const auto& a : d.audits) add(a.doc["provenance"]["model_sha256"], a.doc["model"]["path"], a.doc["model"]["description"]);
  for (const auto& e : d.execs)
    for (const auto& m : e.doc["models"])
      add(m["model_sha256"], m.contains("path") ? m["path"] : nlohmann::json(), m.contains("description") ? m["description"] : nlohmann::json());
  const std::vector<std::string> labels = path_labels(paths);
  for (size_t i = 0; i < shas.size(); ++i) d.labels[shas[i]] = labels[i];
}

// Each document alone through everything the report does with it: a field of the wrong type, or one
// missing beyond the checks on load, is an error naming the file, not a crash later.
void check_every_document_renders(const ReportData& d) {
  auto check_renders = [&](const ReportData& single, const std::string& path) {
    try {
      (void)report_html(single);
      (void)report_markdown(single);
    } catch (const nlohmann::json::exception& e) {
      throw Error(path + ": a field the report reads is missing or has the wrong type (" + e.what() + ")");
    } catch (const std::out_of_range& e) {
      throw Error(path + ": a field the report reads is missing (" + e.what() + ")");
    }
  };
  auto alone = [&](auto member, const ReportData::Named& doc) {
    ReportData single;
    single.title = d.title;
    single.labels = d.labels;
    (single.*member).push_back(doc);
    check_renders(single, doc.path);
  };
  for (const auto& a : d.audits) alone(&ReportData::audits, a);
  for (const auto& e : d.execs) alone(&ReportData::execs, e);
  for (const auto& g : d.aggregates) alone(&ReportData::aggregates, g);
  for (const auto& e : d.evals) alone(&ReportData::evals, e);
  check_renders(d, "report inputs");  // together (an exec matched to an audit, an aggregate to its audits)
}

}  // namespace

ReportData load_report_data(const ReportInputs& in) {
  ReportData d;
  d.title = in.title;
  if (in.audits.empty() && in.execs.empty()) throw Error("report: give at least one --audit or --exec file");
  if (!in.paper.empty()) {
    d.paper = read_json(in.paper);
    expect_schema(d.paper, in.paper, "fca-paper-v2");
    expect_fields(d.paper, in.paper, {"/paper", "/sections", "/claims", "/corpora", "/paper_values/file"});
  }
  for (const auto& p : in.audits) d.audits.push_back({p, load_audit(p)});
  for (const auto& p : in.execs) d.execs.push_back({p, load_exec(p)});
  for (const auto& p : in.aggregates) {
    nlohmann::json j = read_json(p);
    expect_schema(j, p, "fca-aggregate-v1");
    expect_fields(j, p, {"/figures", "/checkpoints", "/inputs"});
    check_statistics(j, p);
    d.aggregates.push_back({p, std::move(j)});
  }
  for (const auto& p : in.evals) {
    nlohmann::json j = read_json(p);
    expect_schema(j, p, "fca-eval-v1");
    expect_fields(j, p, {"/config", "/nll", "/byte_ppl", "/model", "/family", "/label"});
    d.evals.push_back({p, std::move(j)});
  }
  for (const auto& p : in.train_logs) d.train_logs.push_back(read_train_log(p));
  label_checkpoints(d);
  check_every_document_renders(d);
  return d;
}

}  // namespace fca
