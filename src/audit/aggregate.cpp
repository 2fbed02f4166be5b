#include "audit/aggregate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "audit/audit.h"
#include "audit/statistics.h"
#include "core/error.h"
#include "ops/provenance.h"
#include "core/rng.h"
#include "core/undefined_statistic.h"

namespace fca {
namespace {

nlohmann::json read_audit(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("schema"))
    throw Error(path + ": field 'schema' is missing (expected \"" + std::string(kAuditSchema) + "\")");
  if (j["schema"] != kAuditSchema)
    throw Error(path + ": schema is " + j["schema"].dump() + ", expected \"" + kAuditSchema + "\"");
  for (const char* f : {"conditions", "factor_effects", "retention", "variance", "model", "provenance"})
    if (!j.contains(f)) throw Error(path + ": field '" + std::string(f) + "' is missing");
  return j;
}

// A JSON value at a '/'-separated path, or throws naming the file and path.
// The figure at a JSON pointer: a number, or NaN where the audit records it as undefined (null,
// e.g. a retention whose structure_removed penalty is 0). A missing field is an error.
double figure_at(const nlohmann::json& j, const std::string& pointer, const std::string& path) {
  const nlohmann::json::json_pointer p(pointer);
  if (!j.contains(p)) throw Error(path + ": field '" + pointer + "' is missing");
  if (j.at(p).is_null()) return std::nan("");
  if (!j.at(p).is_number()) throw Error(path + ": field '" + pointer + "' is not a number");
  return j.at(p).get<double>();
}

// Why the figure at `pointer` is undefined: the "note" of the nearest enclosing object that has one
// (a retention entry's own, the variance block's for its shares).
std::string reason_at(const nlohmann::json& j, std::string pointer) {
  while (!pointer.empty()) {
    pointer = pointer.substr(0, pointer.find_last_of('/'));
    const nlohmann::json::json_pointer p(pointer);
    if (j.contains(p) && !undefined_reason(j.at(p)).empty()) return undefined_reason(j.at(p));
  }
  return "recorded as null";
}

// The field at `pointer`, as JSON, or null when absent (settings an older audit may lack).
nlohmann::json field_or_null(const nlohmann::json& j, const std::string& pointer) {
  const nlohmann::json::json_pointer p(pointer);
  return j.contains(p) ? j.at(p) : nlohmann::json();
}

// An audit run with --allow-insensitive-replay: its replay ignored the coefficients it was handed,
// so each of its penalties is 0 by construction. Pooled, those zeros would count as evidence of no
// functional dependence. Throws naming the file.
void check_replay_sensitive(const nlohmann::json& audit, const std::string& path) {
  const nlohmann::json passed = field_or_null(audit, "/replay_sensitivity/passed");
  if (passed.is_null()) throw Error("aggregate: " + path + ": field '/replay_sensitivity/passed' is missing");
  if (passed != true)
    throw Error("aggregate: " + path + " was audited with --allow-insensitive-replay (/replay_sensitivity/passed is " +
                passed.dump() + "): its replay did not depend on the coefficients it was handed, so its penalties are 0 "
                "by construction, not evidence, and it does not combine with other audits");
}

// Audits combine only when they are audits of different checkpoints of one configuration, made
// with one protocol by one fca: the same windows of the same data, the same randomisation seed,
// repetitions and token shuffle, the same exit threshold (an exit model's records depend on it),
// the same static profile and structure removal (an adapter names its own), the same replay
// tolerance, the same thresholds, the same fca version. Every audit must carry the hashes that say
// what it audited (model, evaluation and calibration data): two audits both lacking one would
// otherwise compare equal. Throws naming both files, the field that differs and both values. The batch is not part of the protocol: it only groups windows into passes (and by
// default a probe chooses it per run; fca's own models give the same results at any batch,
// docs/audit.md).
void check_combinable(const std::vector<nlohmann::json>& audits, const std::vector<std::string>& paths) {
  static const std::vector<std::string> same{
      "/model/family",           "/model/description",           "/model/coefficient_shape",     "/model/record_kind",
      "/model/static_profile",   "/model/structure_removed",     "/provenance/fca_version",
      "/settings/eval_windows",  "/settings/calib_windows",      "/settings/seq_len",
      "/settings/reps",          "/settings/seed",               "/settings/token_shuffle",
      "/settings/bootstrap_resamples", "/settings/conditions",
      "/routing/controller_setting",   "/exact_replay/tolerance",
      "/provenance/data/eval_split_sha256", "/provenance/data/calib_split_sha256",
      "/criteria/static_penalty_small/threshold", "/criteria/retention_high/threshold"};
  for (size_t i = 0; i < audits.size(); ++i) {
    check_replay_sensitive(audits[i], paths[i]);
    for (const char* hash : {"/provenance/model_sha256", "/provenance/data/eval_split_sha256", "/provenance/data/calib_split_sha256"}) {
      const nlohmann::json h = field_or_null(audits[i], hash);
      if (!h.is_string() || h.get<std::string>().empty())
        throw Error("aggregate: " + paths[i] + ": field '" + hash + "' is " +
                    (audits[i].contains(nlohmann::json::json_pointer(hash)) ? h.dump() : std::string("missing")) +
                    ", expected a SHA-256: an audit that does not say what it audited does not combine");
    }
  }
  for (size_t i = 1; i < audits.size(); ++i) {
    for (const auto& f : same) {
      const nlohmann::json a = field_or_null(audits[0], f), b = field_or_null(audits[i], f);
      if (a != b)
        throw Error("aggregate: " + paths[i] + " and " + paths[0] + " differ in " + f + " (expected " + a.dump() + " as in " +
                    paths[0] + ", found " + b.dump() + "): only audits of one configuration, made with the same protocol, combine");
    }
    for (size_t k = 0; k < i; ++k) {
      const nlohmann::json hi = field_or_null(audits[i], "/provenance/model_sha256"), hk = field_or_null(audits[k], "/provenance/model_sha256");
      if (hi == hk)
        throw Error("aggregate: " + paths[i] + " and " + paths[k] + " audit the same checkpoint (model_sha256 " + hi.dump() +
                    "): a checkpoint counts once");
    }
  }
}

}  // namespace

namespace {

// The figures, as JSON pointers into each audit.json: all of the first audit's conditions, factor
// effects, retentions and variance shares.
std::vector<std::pair<std::string, std::string>> aggregated_figures(const nlohmann::json& first) {
  std::vector<std::pair<std::string, std::string>> figures;  // name, pointer
  for (size_t c = 0; c < first["conditions"].size(); ++c) {
    const std::string name = first["conditions"][c]["name"];
    if (name != "correct") figures.push_back({"delta_nll." + name, "/conditions/" + std::to_string(c) + "/delta_nll"});
  }
  if (!first["factor_effects"].is_null())
    for (const char* f : {"input", "token", "interaction"})
      figures.push_back({std::string("factor_effect.") + f, std::string("/factor_effects/") + f + "/estimate"});
  for (auto it = first["retention"].begin(); it != first["retention"].end(); ++it)
    figures.push_back({"retention." + it.key(), "/retention/" + it.key() + "/estimate"});
  for (auto it = first["variance"]["shares"].begin(); it != first["variance"]["shares"].end(); ++it)
    figures.push_back({"variance_share." + it.key(), "/variance/shares/" + it.key()});
  return figures;
}

// A figure's value in each audit (NaN where undefined) and the pointer it was read at. Conditions
// are matched by name, not position, in the other audits.
std::vector<double> figure_values(const std::vector<nlohmann::json>& audits, const std::vector<std::string>& paths,
                                  const std::string& name, const std::string& pointer, std::vector<std::string>& pointers) {
  std::vector<double> values;
  for (size_t i = 0; i < audits.size(); ++i) {
    std::string ptr = pointer;
    if (name.rfind("delta_nll.", 0) == 0) {
      const std::string cond = name.substr(10);
      bool found = false;
      for (size_t c = 0; c < audits[i]["conditions"].size(); ++c)
        if (audits[i]["conditions"][c]["name"] == cond) ptr = "/conditions/" + std::to_string(c) + "/delta_nll", found = true;
      if (!found) throw Error(paths[i] + ": condition '" + cond + "' is missing (present in " + paths[0] + ")");
    }
    values.push_back(figure_at(audits[i], ptr, paths[i]));
    pointers.push_back(ptr);
  }
  return values;
}

// A figure undefined in some checkpoint: reported with the checkpoints' reasons, not averaged (the
// shared shape of core/undefined_statistic.h).
nlohmann::ordered_json undefined_figure(const std::vector<nlohmann::json>& audits, const std::vector<std::string>& paths,
                                        const std::vector<double>& values, const std::vector<std::string>& pointers) {
  std::vector<std::pair<std::string, std::string>> why;  // reason, the checkpoints it holds in
  size_t undefined = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isnan(values[i])) continue;
    ++undefined;
    const std::string r = reason_at(audits[i], pointers[i]);
    auto it = std::find_if(why.begin(), why.end(), [&](const auto& w) { return w.first == r; });
    if (it == why.end()) why.push_back({r, paths[i]});
    else it->second += ", " + paths[i];
  }
  std::string reasons;
  if (why.size() == 1 && undefined == values.size())
    reasons = "in every checkpoint, " + why[0].first;
  else
    for (const auto& [r, where] : why) reasons += (reasons.empty() ? "" : "; ") + r + " (in " + where + ")";
  nlohmann::ordered_json u = nlohmann::ordered_json::object();
  u["values"] = nlohmann::ordered_json::array();
  for (double v : values) u["values"].push_back(std::isnan(v) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(v));
  u["mean"] = nullptr;
  u["sd"] = nullptr;
  u["ci95"] = nullptr;
  u["sign_flip_p"] = nullptr;
  u["note"] = undefined_note(reasons);
  return u;
}

// The prespecified criteria on the checkpoint-level CIs: the paper's primary analysis (each audit's
// own criteria use window-level CIs within one checkpoint).
nlohmann::ordered_json aggregate_criteria(const nlohmann::json& first, const nlohmann::ordered_json& figs) {
  nlohmann::ordered_json criteria = nlohmann::ordered_json::object();
  const nlohmann::json penalty_threshold = field_or_null(first, "/criteria/static_penalty_small/threshold");
  if (!penalty_threshold.is_null() && figs.contains("delta_nll.static_profile") && !is_undefined_statistic(figs["delta_nll.static_profile"])) {
    const double upper = figs["delta_nll.static_profile"]["ci95"][1];
    criteria["static_penalty_small"] = {{"rule", "upper 95% CI bound of the checkpoint-level mean static_profile DeltaNLL < threshold"},
                                        {"threshold", penalty_threshold}, {"value", upper},
                                        {"holds", upper < penalty_threshold.get<double>()}};
  }
  const nlohmann::json retention_threshold = field_or_null(first, "/criteria/retention_high/threshold");
  if (!retention_threshold.is_null() && figs.contains("retention.static_profile")) {
    const auto& f = figs["retention.static_profile"];
    if (is_undefined_statistic(f)) {
      criteria["retention_high"] = {{"rule", "lower 95% CI bound of the checkpoint-level mean static_profile retention > threshold"},
                                    {"threshold", retention_threshold}, {"value", nullptr}, {"holds", false},
                                    {"note", f["note"]}};
    } else {
      const double lower = f["ci95"][0];
      criteria["retention_high"] = {{"rule", "lower 95% CI bound of the checkpoint-level mean static_profile retention > threshold"},
                                    {"threshold", retention_threshold}, {"value", lower},
                                    {"holds", lower > retention_threshold.get<double>()}};
    }
  }
  return criteria;
}

}  // namespace

nlohmann::ordered_json aggregate_audits(const std::vector<std::string>& paths, int resamples, uint64_t seed) {
  if (paths.size() < 2) throw Error("aggregate needs at least 2 audits, found " + std::to_string(paths.size()));
  std::vector<nlohmann::json> audits;
  for (const auto& p : paths) audits.push_back(read_audit(p));
  check_combinable(audits, paths);
  const auto& first = audits[0];
  nlohmann::ordered_json out;
  out["schema"] = kAggregateSchema;
  out["checkpoints"] = paths.size();
  out["inputs"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < paths.size(); ++i)
    out["inputs"].push_back({{"path", paths[i]},
                             {"model", audits[i]["model"]["description"]},
                             {"model_sha256", audits[i]["provenance"].value("model_sha256", "")}});
  out["bootstrap_resamples"] = resamples;
  out["seed"] = seed;
  nlohmann::ordered_json figs = nlohmann::ordered_json::object();
  uint64_t index = 0;
  std::vector<double> factor_p;
  for (const auto& [name, pointer] : aggregated_figures(first)) {
    std::vector<std::string> pointers;
    const std::vector<double> values = figure_values(audits, paths, name, pointer, pointers);
    if (std::any_of(values.begin(), values.end(), [](double v) { return std::isnan(v); })) {
      figs[name] = undefined_figure(audits, paths, values, pointers);
      continue;
    }
    const Interval ci = bootstrap_mean_ci(values, resamples, derive_seed(seed, 0xA66, index++));
    nlohmann::ordered_json f{{"values", values}, {"mean", mean(values)}, {"sd", sample_sd(values)},
                             {"ci95", {ci.low, ci.high}}, {"sign_flip_p", sign_flip_p_value(values)}};
    if (name.rfind("factor_effect.", 0) == 0) factor_p.push_back(f["sign_flip_p"]);
    figs[name] = f;
  }
  if (factor_p.size() == 3) {
    const std::vector<double> holm = holm_adjust(factor_p);
    int k = 0;
    for (const char* f : {"input", "token", "interaction"}) figs[std::string("factor_effect.") + f]["holm_p"] = holm[size_t(k++)];
  }
  out["figures"] = figs;
  out["criteria"] = aggregate_criteria(first, figs);
  out["provenance"] = provenance_base();
  return out;
}

std::string aggregate_markdown(const nlohmann::ordered_json& a) {
  std::ostringstream md;
  char buf[256];
  md << "# Audit aggregate over " << a["checkpoints"] << " checkpoints\n\n";
  for (const auto& in : a["inputs"]) md << "- `" << in["path"].get<std::string>() << "`: " << in["model"].get<std::string>() << "\n";
  md << "\n| figure | mean | sd | 95% CI (checkpoint bootstrap) | sign-flip p | Holm p |\n|---|---:|---:|---|---:|---:|\n";
  for (auto it = a["figures"].begin(); it != a["figures"].end(); ++it) {
    const auto& f = it.value();
    if (is_undefined_statistic(f)) {
      md << "| " << it.key() << " | " << f["note"].get<std::string>() << " | | | | |\n";
      continue;
    }
    std::snprintf(buf, sizeof buf, "| %s | %.5f | %.5f | [%.5f, %.5f] | %.4g | %s |\n", it.key().c_str(), f["mean"].get<double>(),
                  f["sd"].get<double>(), f["ci95"][0].get<double>(), f["ci95"][1].get<double>(), f["sign_flip_p"].get<double>(),
                  f.contains("holm_p") ? std::to_string(f["holm_p"].get<double>()).c_str() : "–");
    md << buf;
  }
  if (a.contains("criteria") && !a["criteria"].empty()) {
    md << "\n## Prespecified criteria, checkpoint level\n\n| criterion | rule | value | verdict |\n|---|---|---:|---|\n";
    for (auto it = a["criteria"].begin(); it != a["criteria"].end(); ++it) {
      const auto& c = it.value();
      std::snprintf(buf, sizeof buf, "%.5f", c["value"].is_null() ? std::nan("") : c["value"].get<double>());
      md << "| " << it.key() << " | " << c["rule"].get<std::string>() << " (threshold " << c["threshold"].dump() << ") | "
         << (c["value"].is_null() ? std::string("undefined") : std::string(buf)) << " | " << (c["holds"].get<bool>() ? "holds" : "does not hold")
         << " |\n";
    }
  }
  md << "\nThe sign-flip p-value enumerates all 2^n sign assignments of the n checkpoint values (two-sided); with n "
        "checkpoints the smallest attainable p is 2/2^n. Holm adjusts the three factor effects together.\n";
  return md.str();
}

}  // namespace fca
