// paper.json: the paper's figures measured from the result files of the studies in <out>/<corpus>/
// (eval, aggregate, audit and exec JSON; never a model), each beside its entry in the values file.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "audit/statistics.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/sha256.h"
#include "ops/provenance.h"
#include "study/paper.h"
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

std::string fmt(const char* format, double a, double b = 0, double c = 0, double d = 0) {
  char buf[200];
  std::snprintf(buf, sizeof buf, format, a, b, c, d);
  return buf;
}

// One measured cell: its text and its central value (null when undefined).
struct Measured {
  std::string text;
  nlohmann::ordered_json value;
};

// The figures of one corpus's study folder.
class StudyFigures {
 public:
  StudyFigures(const PaperConfig& c, std::string dir) : c_(c), dir_(std::move(dir)) {}

  // Per seed, a field of <variant>-s<seed>.eval-test.json.
  std::vector<double> per_seed(const std::string& variant, const std::string& field) const {
    std::vector<double> v;
    for (uint64_t seed : c_.study.seeds) {
      const std::string path = dir_ + "/" + variant + "-s" + std::to_string(seed) + ".eval-test.json";
      v.push_back(number_at(read_result(path), "/" + field, path));
    }
    return v;
  }
  Measured mean_sd(const std::string& variant, const std::string& field, const char* format) const {
    const auto v = per_seed(variant, field);
    return {fmt(format, mean(v), sample_sd(v)) + " (n " + std::to_string(v.size()) + ")", mean(v)};
  }
  // Seeds where variant a's Byte-PPL is below b's (same seed).
  Measured wins(const std::string& a, const std::string& b) const {
    const auto pa = per_seed(a, "byte_ppl"), pb = per_seed(b, "byte_ppl");
    int k = 0;
    for (size_t i = 0; i < pa.size(); ++i) k += pa[i] < pb[i];
    return {std::to_string(k) + " of " + std::to_string(pa.size()) + " seeds", k};
  }
  int win_count(const std::string& a, const std::string& b) const { return wins(a, b).value.get<int>(); }

  const nlohmann::json& aggregate(const std::string& variant) const {
    auto it = aggregates_.find(variant);
    if (it == aggregates_.end()) it = aggregates_.emplace(variant, read_result(dir_ + "/" + variant + "-aggregate.json")).first;
    return it->second;
  }
  const nlohmann::json& figure(const std::string& variant, const std::string& name) const {
    const auto& a = aggregate(variant);
    if (!a.contains("figures") || !a["figures"].contains(name))
      throw Error(dir_ + "/" + variant + "-aggregate.json: figures has no \"" + name + "\"");
    return a["figures"][name];
  }
  // mean [95% CI over checkpoints], or the aggregate's reason it is undefined.
  Measured interval(const std::string& variant, const std::string& name, double scale = 1, const char* unit = "") const {
    const auto& f = figure(variant, name);
    if (f["mean"].is_null()) return {f.value("note", std::string("undefined")), nullptr};
    const double m = f["mean"].get<double>() * scale;
    return {fmt("%.4g [%.4g, %.4g]", m, f["ci95"][0].get<double>() * scale, f["ci95"][1].get<double>() * scale) + unit, m};
  }
  // A condition's penalty: the interval over checkpoints, the mean MC SE of its audits and the
  // seeds where it is positive.
  Measured penalty(const std::string& variant, const std::string& condition) const {
    Measured m = interval(variant, "delta_nll." + condition);
    if (m.value.is_null()) return m;
    double mc_se = 0;
    bool randomised = false;
    for (uint64_t seed : c_.study.seeds) {
      const std::string path = dir_ + "/" + variant + "-s" + std::to_string(seed) + "-audit/audit.json";
      const nlohmann::json audit = read_result(path);
      for (const auto& cond : audit["conditions"])
        if (cond["name"] == condition && cond["mc_se"].is_number()) mc_se += cond["mc_se"].get<double>(), randomised = true;
    }
    const auto& values = figure(variant, "delta_nll." + condition)["values"];
    int positive = 0;
    for (const auto& v : values) positive += v.get<double>() > 0;
    m.text += randomised ? fmt("; MC SE %.2g", mc_se / double(c_.study.seeds.size())) : "; MC SE: not randomised";
    m.text += "; > 0 in " + std::to_string(positive) + " of " + std::to_string(values.size()) + " seeds";
    return m;
  }

  // The exec.json entry of a variant's first-seed checkpoint, mode "live".
  const nlohmann::json& live_mode(const std::string& variant) const {
    if (exec_.is_null()) exec_ = read_result(dir_ + "/exec/exec.json");
    const auto v = std::find_if(c_.study.variants.begin(), c_.study.variants.end(), [&](const StudyVariant& x) { return x.name == variant; });
    const std::string path = checkpoint_path(train_family_named(v->arch), dir_ + "/" + variant + "-s" + std::to_string(c_.study.seeds.front()));
    for (const auto& m : exec_["models"])
      if (m.value("path", "") == path)
        for (const auto& mode : m["modes"])
          if (mode["mode"] == "live") return mode;
    throw Error(dir_ + "/exec/exec.json: no live mode of " + path);
  }
  const nlohmann::json& exec() const { return exec_; }
  const std::string& dir() const { return dir_; }

 private:
  const PaperConfig& c_;
  std::string dir_;
  mutable std::map<std::string, nlohmann::json> aggregates_;
  mutable nlohmann::json exec_;
};

// A row of a section: one cell per corpus, made by `cell`.
struct RowSpec {
  std::string id, label;
  std::function<Measured(const StudyFigures&)> cell;
};
struct SectionSpec {
  std::string id, title, note;
  std::vector<RowSpec> rows;
};

std::string variant_label(const std::string& v) {
  static const std::map<std::string, std::string> labels{
      {"dense", "Dense"}, {"uniform", "Uniform"}, {"layerstatic", "LayerStatic"}, {"featuregate", "FeatureGate"},
      {"uniform-matched", "Uniform-Matched"}, {"uniform-0.60", "Uniform-0.60"}, {"mudd", "MUDD"}};
  return labels.at(v);
}

std::vector<SectionSpec> sections(const PaperConfig& c) {
  std::vector<SectionSpec> s;
  SectionSpec t1{"table1", "Table 1: quality on the test split",
                 "Byte-PPL and gate mass: mean ± sd over the seeds' checkpoints; wins: seeds where the first variant's Byte-PPL is lower.", {}};
  for (const std::string& v : paper_variant_names())
    t1.rows.push_back({"table1.byte_ppl." + v, variant_label(v) + " Byte-PPL",
                       [v](const StudyFigures& f) { return f.mean_sd(v, "byte_ppl", "%.3f ± %.3f"); }});
  for (const std::string v : {"uniform", "layerstatic", "featuregate", "uniform-matched", "uniform-0.60"})
    t1.rows.push_back({"table1.gate_mass." + v, variant_label(v) + " gate mass",
                       [v](const StudyFigures& f) { return f.mean_sd(v, "gate_mass", "%.3f ± %.3f"); }});
  t1.rows.push_back({"table1.wins.layerstatic_vs_uniform", "LayerStatic beats Uniform",
                     [](const StudyFigures& f) { return f.wins("layerstatic", "uniform"); }});
  t1.rows.push_back({"table1.wins.featuregate_vs_uniform_matched", "FeatureGate beats Uniform-Matched",
                     [](const StudyFigures& f) { return f.wins("featuregate", "uniform-matched"); }});
  s.push_back(t1);

  SectionSpec f2{"figure2", "Figure 2: FeatureGate's NLL penalty per condition",
                 "ΔNLL (nats per byte) against the correct coefficients: mean over checkpoints [95% bootstrap interval over checkpoints]; "
                 "the Monte Carlo standard error of the randomised conditions (mean over checkpoints); the seeds with a positive penalty.", {}};
  for (const std::string cond : {"cross_input", "token_shuffle", "cross_shuffle", "layer_position_mean", "static_profile", "structure_removed"})
    f2.rows.push_back({"figure2." + cond, cond, [cond](const StudyFigures& f) { return f.penalty("featuregate", cond); }});
  s.push_back(f2);

  SectionSpec f4{"figure4", "Figure 4: static-profile retention of the Correct-to-GlobalMean gap (FeatureGate)",
                 "Retention = 1 − ΔNLL(profile) / ΔNLL(GlobalMean), in per cent; mean [95% interval over checkpoints].", {}};
  f4.rows.push_back({"figure4.gap", "Correct-to-GlobalMean gap (ΔNLL of structure_removed)",
                     [](const StudyFigures& f) { return f.interval("featuregate", "delta_nll.structure_removed"); }});
  for (const std::string p : {"static_profile", "layer_position_mean"})
    f4.rows.push_back({"figure4.retention." + p, "retention of " + p,
                       [p](const StudyFigures& f) { return f.interval("featuregate", "retention." + p, 100, "%"); }});
  s.push_back(f4);

  SectionSpec fx{"factors", "Factor effects and the variance share of layer identity (FeatureGate)",
                 "Factorial contrasts of input and token reassignment (ΔNLL); the share of the coefficients' total sum of squares "
                 "that layer identity explains (per cent). Mean [95% interval over checkpoints].", {}};
  for (const std::string e : {"input", "token", "interaction"})
    fx.rows.push_back({"factors." + e, e + " effect", [e](const StudyFigures& f) {
                         Measured m = f.interval("featuregate", "factor_effect." + e);
                         const auto& fig = f.figure("featuregate", "factor_effect." + e);
                         if (fig.contains("holm_p") && fig["holm_p"].is_number()) m.text += fmt("; Holm p %.3g", fig["holm_p"].get<double>());
                         return m;
                       }});
  fx.rows.push_back({"factors.layer_variance_share", "variance share of layer identity",
                     [](const StudyFigures& f) { return f.interval("featuregate", "variance_share.coordinate", 100, "%"); }});
  s.push_back(fx);

  SectionSpec ex{"execution", "Execution at batch " + std::to_string(c.study.exec_batch),
                 "Median latency of one forward pass over a batch (live controller), first seed's checkpoint; all timed in the "
                 "same interleaved rounds. FeatureGate against Dense: the median per-round latency ratio [95% interval].", {}};
  for (const std::string v : {"dense", "uniform", "layerstatic", "featuregate"})
    ex.rows.push_back({"execution.ms_per_batch." + v, variant_label(v) + " ms per batch", [v](const StudyFigures& f) {
                         const auto& m = f.live_mode(v);
                         const double ms = m["latency"]["median_s"].get<double>() * 1e3;
                         return Measured{fmt("%.3f ms (p10 %.3f, p90 %.3f); ", ms, m["latency"]["p10_s"].get<double>() * 1e3,
                                             m["latency"]["p90_s"].get<double>() * 1e3) +
                                             std::to_string(m["executed_blocks"].get<int>()) + " of " +
                                             std::to_string(m["total_blocks"].get<int>()) + " blocks executed",
                                         ms};
                       }});
  auto ratio = [](const StudyFigures& f) -> const nlohmann::json& { return f.live_mode("featuregate")["latency_ratio_to_dense"]; };
  ex.rows.push_back({"execution.featuregate_slower_pct", "FeatureGate % slower than Dense", [ratio](const StudyFigures& f) {
                       const auto& r = ratio(f);
                       if (r.is_null() || r["estimate"].is_null()) return Measured{"undefined (no Dense timed beside it)", nullptr};
                       const double e = r["estimate"].get<double>();
                       return Measured{fmt("%+.1f%% [%+.1f%%, %+.1f%%]", 100 * (e - 1), 100 * (r["ci95"][0].get<double>() - 1),
                                           100 * (r["ci95"][1].get<double>() - 1)) + ": " + r["difference"].get<std::string>(),
                                       100 * (e - 1)};
                     }});
  ex.rows.push_back({"execution.featuregate_lower_throughput_pct", "FeatureGate % lower throughput than Dense", [ratio](const StudyFigures& f) {
                       const auto& r = ratio(f);
                       if (r.is_null() || r["estimate"].is_null()) return Measured{"undefined (no Dense timed beside it)", nullptr};
                       // Throughput is the inverse of latency: 1 - 1/ratio; the interval's ends map in order.
                       const double e = r["estimate"].get<double>();
                       return Measured{fmt("%+.1f%% [%+.1f%%, %+.1f%%]", 100 * (1 - 1 / e), 100 * (1 - 1 / r["ci95"][0].get<double>()),
                                           100 * (1 - 1 / r["ci95"][1].get<double>())),
                                       100 * (1 - 1 / e)};
                     }});
  s.push_back(ex);

  SectionSpec mu{"mudd", "The MUDD contrast",
                 "MUDD's penalties (ΔNLL) for reassigning its mixing coefficients across inputs and shuffling them across tokens, "
                 "and the retention of StaticMixMean against SourceUniformMean (per cent). Mean [95% interval over checkpoints].", {}};
  mu.rows.push_back({"mudd.cross_input", "cross_input", [](const StudyFigures& f) { return f.penalty("mudd", "cross_input"); }});
  mu.rows.push_back({"mudd.token_shuffle", "token_shuffle", [](const StudyFigures& f) { return f.penalty("mudd", "token_shuffle"); }});
  mu.rows.push_back({"mudd.retention.static_profile", "StaticMixMean retention against SourceUniformMean",
                     [](const StudyFigures& f) { return f.interval("mudd", "retention.static_profile", 100, "%"); }});
  s.push_back(mu);
  return s;
}

// The paper's qualitative claims that the sources available to fca state with a direction, each
// decided from the measured figures of one corpus: {verdict, reason}.
struct ClaimSpec {
  std::string id, claim, source;
  std::function<std::pair<std::string, std::string>(const StudyFigures&)> decide;
};

std::vector<ClaimSpec> claims() {
  std::vector<ClaimSpec> c;
  c.push_back({"claim.coefficients_vary", "FeatureGate's coefficients vary across inputs and tokens",
               "claim 1 of the paper (coefficient variation)", [](const StudyFigures& f) -> std::pair<std::string, std::string> {
                 // Everything but layer identity is variation across inputs or tokens (the residual is
                 // the three-way interaction): more than 1% of the sum of squares in every checkpoint.
                 const auto& values = f.figure("featuregate", "variance_share.coordinate")["values"];
                 double least = 1;
                 for (const auto& v : values) {
                   if (!v.is_number()) return {"not comparable", "the variance shares are undefined (no variation at all)"};
                   least = std::min(least, 1 - v.get<double>());
                 }
                 return {least > 0.01 ? "reproduces" : "does not reproduce",
                         fmt("the share of the sum of squares beyond layer identity is %.2f%% in the checkpoint with the least "
                             "(criterion: above 1%% in every checkpoint)", 100 * least)};
               }});
  c.push_back({"claim.static_penalty_small", "A static profile replaces FeatureGate's dynamic coefficients at a practically small penalty",
               "the paper's thesis (its title); the audit protocol's prespecified criterion", [](const StudyFigures& f) -> std::pair<std::string, std::string> {
                 const auto& crit = f.aggregate("featuregate")["criteria"];
                 if (!crit.contains("static_penalty_small")) return {"not comparable", "the aggregate has no static-penalty criterion"};
                 const auto& k = crit["static_penalty_small"];
                 if (k["value"].is_null()) return {"not comparable", "the static_profile penalty is undefined"};
                 return {k["holds"].get<bool>() ? "reproduces" : "does not reproduce",
                         fmt("upper 95%% bound of the static_profile ΔNLL over checkpoints %.4g (criterion: below %.4g)",
                             k["value"].get<double>(), k["threshold"].get<double>())};
               }});
  c.push_back({"claim.retention_high", "The static profile retains most of the Correct-to-GlobalMean gap (Figure 4)",
               "the paper's Figure 4; the audit protocol's prespecified criterion", [](const StudyFigures& f) -> std::pair<std::string, std::string> {
                 const auto& crit = f.aggregate("featuregate")["criteria"];
                 if (!crit.contains("retention_high") || crit["retention_high"]["value"].is_null())
                   return {"not comparable", "retention is undefined: " +
                                                 f.figure("featuregate", "retention.static_profile").value("note", std::string("no reason given"))};
                 const auto& k = crit["retention_high"];
                 return {k["holds"].get<bool>() ? "reproduces" : "does not reproduce",
                         fmt("lower 95%% bound of the retention over checkpoints %.1f%% (criterion: above %.0f%%)",
                             100 * k["value"].get<double>(), 100 * k["threshold"].get<double>())};
               }});
  c.push_back({"claim.no_compute_saved", "FeatureGate saves no compute: it executes every block and is slower than Dense",
               "claim 3 of the paper (actual execution)", [](const StudyFigures& f) -> std::pair<std::string, std::string> {
                 const auto& m = f.live_mode("featuregate");
                 const auto& r = m["latency_ratio_to_dense"];
                 if (r.is_null() || r["estimate"].is_null()) return {"not comparable", "no Dense model was timed beside it"};
                 const bool every_block = m["executed_blocks"] == m["total_blocks"];
                 const std::string difference = r["difference"];
                 const std::string why = std::to_string(m["executed_blocks"].get<int>()) + " of " + std::to_string(m["total_blocks"].get<int>()) +
                                         " blocks executed; latency ratio to Dense " + fmt("%.3f [%.3f, %.3f]", r["estimate"].get<double>(),
                                                                                              r["ci95"][0].get<double>(), r["ci95"][1].get<double>()) +
                                         " (" + difference + ")";
                 return {every_block && difference == "slower" ? "reproduces" : "does not reproduce", why};
               }});
  c.push_back({"claim.layerstatic_beats_uniform", "LayerStatic beats Uniform for all seeds", "the paper's Table 1",
               [](const StudyFigures& f) -> std::pair<std::string, std::string> {
                 const Measured w = f.wins("layerstatic", "uniform");
                 const size_t n = f.per_seed("uniform", "byte_ppl").size();
                 return {w.value.get<size_t>() == n ? "reproduces" : "does not reproduce", "lower test Byte-PPL in " + w.text};
               }});
  return c;
}

}  // namespace

nlohmann::ordered_json paper_figures(const PaperConfig& c, const std::string& out) {
  const nlohmann::json values = read_json_config(c.values, "paper values file");
  if (!values.is_object() || values.value("schema", "") != "fca-paper-values-v1")
    throw Error(c.values + ": schema is not \"fca-paper-values-v1\"");
  for (const char* key : {"paper", "not_available_because", "values"})
    if (!values.contains(key)) throw Error(c.values + ": '" + std::string(key) + "' is missing");
  const nlohmann::json& paper_values = values["values"];
  std::set<std::string> used;
  // The paper's value of figure `id`: a number, a text, or null (not available); a figure without an
  // entry is an error, so that no figure is printed without the paper's column.
  auto paper_value = [&](const std::string& id) {
    if (!paper_values.contains(id))
      throw Error(c.values + ": no entry for figure \"" + id + "\"; add it with the paper's value, or null when the paper's value is not available");
    const auto& v = paper_values[id];
    if (!v.is_null() && !v.is_number() && !v.is_string()) throw Error(c.values + ": figure \"" + id + "\" must be a number, a text or null");
    used.insert(id);
    return nlohmann::ordered_json(v);
  };

  std::vector<StudyFigures> studies;
  for (const PaperCorpus& k : c.corpora) studies.emplace_back(c, out + "/" + k.name);

  nlohmann::ordered_json p;
  p["schema"] = "fca-paper-v1";
  p["title"] = c.title;
  p["paper"] = values["paper"];
  p["paper_values"] = {{"file", c.values}, {"sha256", sha256_file(c.values)}, {"not_available_because", values["not_available_because"]}};
  p["corpora"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < c.corpora.size(); ++i)
    p["corpora"].push_back({{"name", c.corpora[i].name}, {"data", c.corpora[i].data}, {"stands_in_for", c.corpora[i].stands_in_for},
                            {"paper_key", c.corpora[i].paper_key}, {"study", studies[i].dir()}});
  p["seeds"] = c.study.seeds;
  p["sections"] = nlohmann::ordered_json::array();
  for (const SectionSpec& s : sections(c)) {
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const RowSpec& r : s.rows) {
      nlohmann::ordered_json cells = nlohmann::ordered_json::array();
      for (size_t i = 0; i < c.corpora.size(); ++i) {
        const Measured m = r.cell(studies[i]);
        const std::string id = r.id + "." + c.corpora[i].paper_key;
        cells.push_back({{"corpus", c.corpora[i].name}, {"id", id}, {"measured", m.text}, {"value", m.value}, {"paper", paper_value(id)}});
      }
      rows.push_back({{"id", r.id}, {"label", r.label}, {"cells", cells}});
    }
    p["sections"].push_back({{"id", s.id}, {"title", s.title}, {"note", s.note}, {"rows", rows}});
  }
  p["claims"] = nlohmann::ordered_json::array();
  for (const ClaimSpec& k : claims())
    for (size_t i = 0; i < c.corpora.size(); ++i) {
      const auto [verdict, reason] = k.decide(studies[i]);
      const std::string id = k.id + "." + c.corpora[i].paper_key;
      p["claims"].push_back({{"id", id}, {"claim", k.claim}, {"source", k.source}, {"corpus", c.corpora[i].name},
                             {"verdict", verdict}, {"reason", reason}, {"paper", paper_value(id)}});
    }
  // An entry the page does not print is a stale or misspelt id.
  for (auto it = paper_values.begin(); it != paper_values.end(); ++it)
    if (!used.count(it.key()))
      throw Error(c.values + ": entry \"" + it.key() + "\" is no figure of the page (misspelt, or another corpus's paper_key?)");
  auto prov = provenance_base();
  prov["config_seeds"] = c.study.seeds;
  for (size_t i = 0; i < c.corpora.size(); ++i) {
    const nlohmann::json e = studies[i].exec().is_null() ? read_result(studies[i].dir() + "/exec/exec.json") : studies[i].exec();
    prov["data"][c.corpora[i].name] = e["provenance"]["data"];
  }
  p["provenance"] = prov;
  return p;
}

}  // namespace fca
