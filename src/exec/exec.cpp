#include "exec/exec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "core/parse.h"
#include "core/exec_counters.h"
#include "core/file_io.h"
#include "core/progress.h"
#include "ops/provenance.h"
#include "core/undefined_statistic.h"
#include "core/sha256.h"
#include "exec/counted_pass.h"
#include "exec/exec_family.h"
#include "exec/external_exec.h"
#include "models/registry.h"
#include "exec/timed_modes.h"
#include "exec/timing.h"

namespace fca {
namespace {

// A family's exec.json entry with "label" (ModelFamily::label of its config, the one label
// formatter of results and the report) inserted after "family".
nlohmann::ordered_json with_label(const nlohmann::ordered_json& entry, const ModelFamily& family) {
  nlohmann::ordered_json out;
  for (const auto& [key, value] : entry.items()) {
    out[key] = value;
    if (key == "family") out["label"] = family.label(entry.at("config"));
  }
  if (!out.contains("label")) throw Error("internal error: the " + family.name + " family's exec entry has no \"family\"");
  return out;
}


}  // namespace

nlohmann::ordered_json saving(const nlohmann::ordered_json& mode, const nlohmann::ordered_json& reference,
                              const nlohmann::ordered_json& latency_ratio) {
  const nlohmann::ordered_json flops = ratio_or_null(mode["gflop_per_token"].get<double>(), reference["gflop_per_token"].get<double>());
  const bool latency_defined = !latency_ratio["estimate"].is_null();
  std::string partial;  // the passes counted only in part (native passes are counted from the graph: always in full)
  for (const auto* m : {&mode, &reference})
    if (!m->value("fully_counted", true)) partial += std::string(partial.empty() ? "" : " and ") + (*m)["mode"].get<std::string>();
  nlohmann::ordered_json s{{"mode", mode["mode"]},
                           {"against", reference["mode"]},
                           {"flop_ratio", flops},
                           {"latency_ratio", latency_ratio},
                           {"flop_saving", flops.is_null() ? flops : nlohmann::ordered_json(1.0 - flops.get<double>())},
                           {"latency_saving", latency_defined ? nlohmann::ordered_json(1.0 - latency_ratio["estimate"].get<double>())
                                                              : nlohmann::ordered_json(nullptr)},
                           {"fully_counted", partial.empty()},
                           {"saves", partial.empty() && !flops.is_null() && latency_defined && flops.get<double>() < 1.0 &&
                                         latency_ratio["difference"] == "faster"}};
  if (!partial.empty())
    s["note"] = "the " + partial + " pass" + (partial.find(" and ") == std::string::npos ? " was" : "es were") +
                " not fully counted (operators without a FLOP formula, or work the counter could not see), so the FLOPs "
                "compare partial counts";
  else if (flops.is_null())
    s["note"] = undefined_note(std::string("the reference ") + reference["mode"].get<std::string>() +
                               " has no counted FLOPs, so the ratio divides by 0");
  else if (!latency_defined)
    s["note"] = latency_ratio["note"];
  return s;
}

namespace {

// A family's exec setting given for none of the measured models' families would change nothing:
// refused, naming the flag and the families that take it.
void check_family_settings(const ExecOptions& o) {
  for (const auto& [key, values] : o.family_settings) {
    std::string takers;
    bool measured = false;
    for (const ExecFamily& family : exec_families())
      for (const RunSetting& s : family.exec_settings) {
        if (s.key != key) continue;
        takers += (takers.empty() ? "" : ", ") + family.name;
        for (const auto& path : o.models) measured = measured || family_of(path).name == family.name;
      }
    if (takers.empty()) throw Error("exec: no installed family takes the setting " + run_setting_flag(key));
    if (!measured)
      throw Error("exec: " + run_setting_flag(key) + " applies to models of the " + takers + " family, and none of the models is one");
  }
}

}  // namespace

void check_exec_options(const ExecOptions& o) {
  if (o.models.empty() && o.externals.empty()) throw Error("exec needs at least one --model or --external");
  if (o.runs < 1 || o.warmup < 0 || o.batch < 1) throw Error("exec: --runs and --batch must be positive");
  for (double t : o.skip_thresholds)
    if (!(t >= 0.0 && t <= 1.0)) throw Error("--skip-threshold " + number_text(t) + " is outside [0, 1]");
  if (!o.skip_thresholds.empty() && o.models.empty())
    throw Error("--skip-threshold applies to fca's own models (--model), and only --external models are given: an "
                "adapter's model has no skip sweep");
  if (!o.skip_thresholds.empty()) {
    bool any = false;
    for (const auto& path : o.models) {
      const ExecFamily& family = exec_family_named(family_of(path).name);
      any = any || (family.has_calibratable_gates && family.has_calibratable_gates(path));
    }
    if (!any)
      throw Error("--skip-threshold needs a model with calibratable gates (a gated model whose gate is uniform, layerstatic "
                  "or featuregate); " + std::string(o.models.size() == 1 ? o.models[0] + " has none" : "none of the models has one"));
  }
  if (o.max_runs < o.runs) throw Error("exec: --max-runs " + std::to_string(o.max_runs) + " is below --runs " + std::to_string(o.runs));
  if (!(o.margin > 0 && o.margin < 1)) throw Error("exec: --margin must be in (0, 1), found " + number_text(o.margin));
  if (!(o.time_budget_s >= 0)) throw Error("exec: --time-budget must be >= 0 seconds");
  if (!o.externals.empty() && !(o.external_timeout_s > 0 && std::isfinite(o.external_timeout_s)))
    throw Error("exec: --external-timeout must be a positive number of seconds, found " + number_text(o.external_timeout_s));
  for (const auto& path : o.models) (void)exec_family_named(family_of(path).name);  // a wrong --model fails before the peak probe
  check_family_settings(o);
}

namespace {

nlohmann::ordered_json exec_settings_json(const ExecOptions& o) {
  nlohmann::ordered_json settings = {{"batch", o.batch},
                                     {"runs", o.runs},
                                     {"max_runs", o.max_runs},
                                     {"time_budget_s", o.time_budget_s},
                                     {"margin", o.margin},
                                     {"warmup", o.warmup},
                                     {"skip_thresholds", o.skip_thresholds},
                                     {"calib_windows", o.calib_windows},
                                     {"eval_windows", o.eval_windows}};
  if (!o.family_settings.empty()) settings["family_settings"] = o.family_settings;
  if (!o.externals.empty()) {
    settings["externals"] = o.externals;
    settings["external_timeout_s"] = o.external_timeout_s;
  }
  return settings;
}

// Phase 1: every model's configurations, counted passes (checked against the graph) and NLL, each
// model's entry appended to `models` and its passes handed to `timed`.
void count_every_model(const Corpus& corpus, const ExecOptions& o, TimedModes& timed, nlohmann::ordered_json& models) {
  Progress bar("exec: count", int64_t(o.models.size() + o.externals.size()), "model");
  for (size_t mi = 0; mi < o.models.size(); ++mi) {
    const std::string& path = o.models[mi];
    timed.start_model(mi);
    const ModelFamily& family = family_of(path);
    models.push_back(with_label(exec_family_named(family.name).measure(path, corpus, o, timed), family));
    if (o.progress) bar.update(int64_t(mi + 1));
  }
  for (const std::string& command : o.externals) {
    timed.start_model(models.size());
    models.push_back(measure_external(command, corpus, o, timed));
    if (o.progress) bar.update(int64_t(models.size()));
  }
  if (o.progress) bar.finish();
}

// Which timed passes are compared with which (phase 2), by the models' entries: every native
// configuration with the live Dense model with the most blocks among the --models (when one is
// given), every skip with the unskipped static gates, the families' savings; every mode of an
// external model with its own reference mode (when it offers one), never with a native Dense
// (another process, another device and timer).
class WantedRatios {
 public:
  // Reads the entries once: `models` is not kept (the document grows while the ratios are written).
  WantedRatios(const nlohmann::ordered_json& models, const TimedModes& timed) {
    int dense_layers = -1;
    for (size_t mi = 0; mi < models.size(); ++mi) {
      const auto& m = models[mi];
      if (m.value("dense", false) && m["config"]["n_layer"].get<int>() > dense_layers) {
        dense_layers = m["config"]["n_layer"];
        dense_reference = timed.find(mi, "modes", 0);
      }
    }
    for (size_t i = 0; i < timed.modes().size(); ++i) {
      const TimedMode& t = timed.modes()[i];
      const auto& m = models[t.model];
      external_.push_back(m["family"] == "external");
      long reference = -1;  // an external mode's: its model's reference mode, if it offers one
      if (external_.back() && !m["reference"].is_null())
        for (size_t k = 0; k < m["modes"].size(); ++k)
          if (m["modes"][k]["mode"] == m["reference"]["mode"]) reference = timed.find(t.model, "modes", k);
      external_reference_.push_back(reference);
      unskipped_.push_back(t.list == "skip_sweep" ? timed.find(t.model, "skip_sweep", 0) : -1);
    }
    for (size_t i = 0; i < timed.modes().size(); ++i) {
      const long reference = external_[i] ? external_reference_[i] : dense_reference;
      if (reference >= 0) pairs.push_back({i, size_t(reference)});
    }
    for (size_t i = 0; i < timed.modes().size(); ++i)
      if (unskipped_[i] >= 0) pairs.push_back({i, size_t(unskipped_[i])});
    for (const auto& s : timed.savings())
      pairs.push_back({size_t(timed.find(s.model, "modes", s.mode)), size_t(timed.find(s.model, "modes", s.against))});
  }
  bool is_external(size_t i) const { return external_[i]; }
  long external_reference(size_t i) const { return external_reference_[i]; }  // timed index, or -1
  long unskipped(size_t i) const { return unskipped_[i]; }                    // a skip's unskipped pass, or -1

  long dense_reference = -1;  // timed index of the Dense reference's live mode, or -1
  std::vector<std::pair<size_t, size_t>> pairs;

 private:
  std::vector<bool> external_;
  std::vector<long> external_reference_, unskipped_;
};

// Phase 3: every configuration of every model timed in the same interleaved rounds.
InterleavedTiming time_every_mode(TimedModes& timed, const WantedRatios& wanted, const ExecOptions& o) {
  InterleavedOptions io;
  io.warmup = o.warmup;
  io.min_rounds = o.runs;
  io.max_rounds = o.max_runs;
  io.time_budget_s = o.time_budget_s;
  io.margin = o.margin;
  Progress bar("exec: time", o.runs, "round");
  InterleavedTiming timing = time_interleaved(
      timed.modes().size(), [&](size_t i) { return timed.modes()[i].measure(); }, wanted.pairs, io, [&](int rounds) {
        if (o.progress) bar.update(std::min(rounds, o.runs), rounds > o.runs ? std::to_string(rounds) + " rounds" : "");
      });
  if (o.progress) bar.finish(std::to_string(timing.rounds) + " rounds: " + timing.stopped_because);
  return timing;
}

// Phase 4: each timed entry's latency and throughput, its ratios, and the families' savings.
void write_latencies(nlohmann::ordered_json& out, const TimedModes& timed, const InterleavedTiming& timing,
                     const WantedRatios& wanted, double margin) {
  auto entry = [&](size_t i) -> nlohmann::ordered_json& {
    const TimedMode& t = timed.modes()[i];
    return out["models"][t.model][t.list][t.index];
  };
  for (size_t i = 0; i < timed.modes().size(); ++i) {
    const TimingStats st = timing_stats(timing.seconds[i]);
    auto& e = entry(i);
    e["latency"] = st.to_json();
    e["tokens_per_s"] = out["models"][timed.modes()[i].model]["tokens_per_pass"].get<double>() / st.median;
  }
  auto ratio = [&](size_t a, size_t b) { return paired_ratio_json(paired_ratio(timing.seconds[a], timing.seconds[b]), margin); };
  const long dense = wanted.dense_reference;
  out["dense_reference"] = nullptr;
  if (dense >= 0)
    out["dense_reference"] = {{"model", out["models"][timed.modes()[size_t(dense)].model]["path"]}, {"mode", "live"},
                              {"latency_s", entry(size_t(dense))["latency"]["median_s"]}};
  for (size_t i = 0; i < timed.modes().size(); ++i) {
    auto& e = entry(i);
    // Null where no Dense model is among the --models, and for every external mode.
    e["latency_ratio_to_dense"] = dense >= 0 && !wanted.is_external(i) ? ratio(i, size_t(dense)) : nlohmann::ordered_json(nullptr);
    if (wanted.is_external(i)) {
      const long reference = wanted.external_reference(i);
      e["latency_ratio_to_reference"] = reference >= 0 ? ratio(i, size_t(reference)) : nlohmann::ordered_json(nullptr);
    }
    if (wanted.unskipped(i) >= 0) e["latency_ratio_to_unskipped"] = ratio(i, size_t(wanted.unskipped(i)));
  }
  for (const auto& s : timed.savings()) {
    auto& m = out["models"][s.model];
    const size_t a = size_t(timed.find(s.model, "modes", s.mode)), b = size_t(timed.find(s.model, "modes", s.against));
    if (!m.contains("savings")) m["savings"] = nlohmann::ordered_json::array();
    m["savings"].push_back(saving(m["modes"][s.mode], m["modes"][s.against], ratio(a, b)));
    // Also on the entry itself: latency_ratio_to_<reference mode>.
    m["modes"][s.mode]["latency_ratio_to_" + m["modes"][s.against]["mode"].get<std::string>()] = m["savings"].back()["latency_ratio"];
  }
}

}  // namespace

nlohmann::ordered_json run_exec(const Corpus& corpus, const ExecOptions& o) {
  check_exec_options(o);
  if (!o.out_dir.empty()) ensure_folder(o.out_dir, "--out");  // before the measurements, not after
  const double peak = measure_sgemm_peak_gflops();
  nlohmann::ordered_json out;
  out["schema"] = kExecSchema;
  out["settings"] = exec_settings_json(o);
  out["flop_convention"] = kFlopConvention;
  if (!o.externals.empty()) out["flop_convention_external"] = kExternalFlopConvention;
  out["sgemm_peak_gflops"] = peak;
  out["models"] = nlohmann::ordered_json::array();
  TimedModes timed;
  count_every_model(corpus, o, timed, out["models"]);
  const WantedRatios wanted(out["models"], timed);
  const InterleavedTiming timing = time_every_mode(timed, wanted, o);
  out["timing"] = {{"order", "interleaved: every configuration once per round, the order rotated by one each round"},
                   {"rounds", timing.rounds},
                   {"timed_s", timing.timed_s},
                   {"stopped_because", timing.stopped_because},
                   {"ratio", "median over rounds of the per-round latency ratio; 95% paired bootstrap interval over rounds (" +
                                 std::to_string(kRatioResamples) + " resamples)"}};
  write_latencies(out, timed, timing, wanted, o.margin);
  auto prov = provenance_base();
  prov["data"] = {{"dir", corpus.dir()}, {"test_sha256", corpus.split("test").content_hash()}};
  out["provenance"] = prov;
  if (!o.out_dir.empty()) {
    // Both documents complete before either is written: a failure leaves neither.
    const std::string json = out.dump(2) + "\n", md = exec_markdown(out);
    ensure_folder(o.out_dir, "--out");
    write_file_atomically(o.out_dir + "/exec.json", [&](std::ostream& s) { s << json; });
    write_file_atomically(o.out_dir + "/exec.md", [&](std::ostream& s) { s << md; });
  }
  return out;
}

std::string latency_ratio_text(const nlohmann::json& r) {
  if (r["estimate"].is_null()) return r.value("note", std::string("undefined"));
  char buf[160];
  std::snprintf(buf, sizeof buf, "x%.3f [%.3f, %.3f] %s", r["estimate"].get<double>(), r["ci95"][0].get<double>(),
                r["ci95"][1].get<double>(), r["difference"].get<std::string>().c_str());
  return buf;
}

std::string uncounted_ops_text(const nlohmann::json& mode) {
  std::string ops;
  for (const auto& [op, calls] : mode["uncounted_ops"].items()) ops += (ops.empty() ? "" : ", ") + op + " x" + calls.dump();
  return ops;
}

std::string unseen_work_text(const nlohmann::json& mode) {
  std::string text;
  for (const auto& u : mode.value("unseen_work", nlohmann::json::array()))
    text += (text.empty() ? "" : "; ") + std::string(u["module"].get<std::string>().empty() ? "(root)" : u["module"].get<std::string>()) +
            ": " + (u["kind"] == "parameter" ? "parameter " : "multiply-then-sum ") + u["what"].get<std::string>() + " x" + u["calls"].dump();
  return text;
}

namespace {

bool is_external_entry(const nlohmann::ordered_json& m) { return m.value("family", std::string()) == "external"; }

// The opening paragraph: batch, rounds, threads, SGEMM peak, how ratios and FLOPs are read.
void exec_markdown_header(std::ostream& md, const nlohmann::ordered_json& e) {
  char buf[64];
  const auto& st = e["settings"];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100 * st["margin"].get<double>());
  const std::string margin = buf;
  md << "# Actual execution\n\nBatch " << st["batch"] << "; every configuration of every model timed in the same interleaved rounds: "
     << e["timing"]["rounds"] << " rounds (at least " << st["runs"] << ", at most " << st["max_runs"] << ") after " << st["warmup"]
     << " warm-up runs of each, stopped because " << e["timing"]["stopped_because"].get<std::string>() << "; "
     << e["provenance"]["threads"] << " threads; SGEMM peak " << std::to_string(int(e["sgemm_peak_gflops"].get<double>()))
     << " GFLOP/s. Latency ratios: the median of the per-round ratios with its 95% paired bootstrap interval; \"faster\" or "
        "\"slower\" only where the whole interval lies beyond the "
     << margin << " margin. FLOPs: " << e["flop_convention"].get<std::string>() << ".\n\n";
}

// The table: one row per mode (and per skip threshold) of every model. An external model: its
// label, executed blocks as rows per token (a fraction where tokens skip blocks; – where the adapter
// names no blocks unit), no mixing kind, the ratio to its reference.
void exec_markdown_table(std::ostream& md, const nlohmann::ordered_json& e, bool any_external) {
  char buf[512];
  const auto external = is_external_entry;
  md << "| model | mode | executed blocks | GFLOP/token | of which controller, MFLOP/token | of which mixing, MFLOP/token | "
        "latency median [p10, p90] ms | tokens/s | "
     << (any_external ? "ratio to Dense (native) / reference (external)" : "ratio to Dense")
     << " | NLL |\n"
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|\n";
  auto row = [&](const nlohmann::ordered_json& m, const nlohmann::ordered_json& r, const std::string& mode) {
    const auto& c = m["config"];
    const bool ext = external(m);
    const std::string name = ext ? m["label"].get<std::string>()
                                 : m["label"].get<std::string>() + " L" + std::to_string(c["n_layer"].get<int>()) + " D" +
                                       std::to_string(c["d_model"].get<int>());
    const auto& ratio_json = r[ext ? "latency_ratio_to_reference" : "latency_ratio_to_dense"];
    const std::string ratio = ratio_json.is_null() ? "–" : latency_ratio_text(ratio_json);
    std::string nll = r.contains("nll") ? std::to_string(r["nll"].get<double>()).substr(0, 6) : "–";
    auto mflop_per_token = [&](const char* kind) {
      if (!r["gflop_per_pass_by_kind"].contains(kind)) return std::string("–");
      char v[32];
      std::snprintf(v, sizeof v, "%.4g", 1e3 * r["gflop_per_pass_by_kind"][kind].get<double>() / m["tokens_per_pass"].get<double>());
      return std::string(v);
    };
    char blocks[64] = "–";
    if (!ext)
      std::snprintf(blocks, sizeof blocks, "%d / %d", r["executed_blocks"].get<int>(), r["total_blocks"].get<int>());
    else if (!r["executed_blocks"].is_null())
      std::snprintf(blocks, sizeof blocks, "%.3g / %d", r["executed_blocks"].get<double>(), r["total_blocks"].get<int>());
    std::snprintf(buf, sizeof buf, "| %s | %s | %s | %.4g | %s | %s | %.2f [%.2f, %.2f] | %.0f | %s | %s |\n", name.c_str(),
                  mode.c_str(), blocks, r["gflop_per_token"].get<double>(),
                  mflop_per_token("controller").c_str(), mflop_per_token("mixing").c_str(),
                  1e3 * r["latency"]["median_s"].get<double>(), 1e3 * r["latency"]["p10_s"].get<double>(),
                  1e3 * r["latency"]["p90_s"].get<double>(), r["tokens_per_s"].get<double>(), ratio.c_str(), nll.c_str());
    md << buf;
  };
  for (const auto& m : e["models"]) {
    for (const auto& r : m["modes"]) row(m, r, r["mode"]);
    if (m.contains("skip_sweep"))
      for (const auto& r : m["skip_sweep"]) {
        std::snprintf(buf, sizeof buf, "skip tau=%.3g", r["threshold"].get<double>());
        row(m, r, buf);
      }
  }
}

// External models: each mode's latency against the reference; what was not counted, and why.
void exec_markdown_externals(std::ostream& md, const nlohmann::ordered_json& e) {
  for (const auto& m : e["models"]) {
    if (!is_external_entry(m)) continue;
    md << "\n" << m["label"].get<std::string>() << " (" << m["path"].get<std::string>() << "), run by its adapter on "
       << m["device"].get<std::string>() << " (timer " << m["timer"].get<std::string>() << "):\n";
    for (const auto& r : m["modes"]) {
      const std::string mode = r["mode"].get<std::string>();
      if (!m["reference"].is_null() && mode != m["reference"]["mode"])
        md << "- `" << mode << "`: " << latency_change_words(r["latency_ratio_to_reference"], m["reference"]["label"]) << "\n";
      const std::string ops = uncounted_ops_text(r);
      if (!ops.empty()) md << "- `" << mode << "` ran operators with no FLOP formula; not counted: " << ops << "\n";
      const std::string unseen = unseen_work_text(r);
      if (!unseen.empty()) md << "- `" << mode << "` ran work the counter could not see (not counted): " << unseen << "\n";
      for (const auto& w : r.value("unit_warnings", nlohmann::json::array())) md << "- `" << mode << "`: " << w.get<std::string>() << "\n";
      const nlohmann::json absent = r.value("absent_units", nlohmann::json::object());
      for (const auto& [kind, why] : absent.items()) md << "- `" << mode << "`: " << kind << " counted as 0: " << why.get<std::string>() << "\n";
    }
  }
}

// Real skips against the same static gates with nothing removed.
void exec_markdown_skips(std::ostream& md, const nlohmann::ordered_json& e) {
  char buf[512];
  for (const auto& m : e["models"]) {
    if (!m.contains("skip_sweep")) continue;
    md << "\n" << m["label"].get<std::string>() << " (" << m["path"].get<std::string>() << "), real skips against the same static gates with "
          "nothing removed (tau = 0):\n";
    for (const auto& r : m["skip_sweep"]) {
      if (r["threshold"].get<double>() == 0.0) continue;
      std::snprintf(buf, sizeof buf, "- tau=%.3g (%d of %d blocks): latency %s\n", r["threshold"].get<double>(), r["executed_blocks"].get<int>(),
                    r["total_blocks"].get<int>(), latency_ratio_text(r["latency_ratio_to_unskipped"]).c_str());
      md << buf;
    }
  }
}

// Each family's savings, claimed only where both FLOPs and latency are measurably lower.
void exec_markdown_savings(std::ostream& md, const nlohmann::ordered_json& e) {
  char buf[512];
  for (const auto& m : e["models"]) {
    if (!m.contains("savings")) continue;
    md << "\n" << m["label"].get<std::string>() << " (" << m["path"].get<std::string>() << "), savings:\n";
    for (const auto& s : m["savings"]) {
      const std::string pair = s["mode"].get<std::string>() + " against " + s["against"].get<std::string>();
      if (!s.value("fully_counted", true) || s["flop_ratio"].is_null() || s["latency_ratio"]["estimate"].is_null()) {
        md << "- " << pair << ": " << s["note"].get<std::string>() << "; no saving claimed\n";
        continue;
      }
      std::snprintf(buf, sizeof buf, "- %s: FLOPs x%.3f, latency %s: %s\n", pair.c_str(),
                    s["flop_ratio"].get<double>(), latency_ratio_text(s["latency_ratio"]).c_str(),
                    s["saves"].get<bool>() ? "saves compute (fewer FLOPs and measurably faster)"
                                           : "no saving claimed (not both fewer FLOPs and measurably faster)");
      md << buf;
    }
    if (m["modes"][0].contains("expert_rows")) {
      md << "- expert rows per layer (live):";
      for (const auto& layer : m["modes"][0]["expert_rows"]) md << " " << layer.dump();
      md << "\n";
    }
  }
}

// The families' own counters (core/exec_counters.h), each mode's count per pass where the mode has
// one: one line per counter and model, after what the counter counts.
void exec_markdown_family_counters(std::ostream& md, const nlohmann::ordered_json& e) {
  for (const FamilyCounter& counter : family_counters()) {
    const std::string key = counter.name + "_per_pass";
    bool described = false;
    for (const auto& m : e["models"]) {
      std::string counts;
      for (const auto& mode : m["modes"])
        if (mode.contains(key)) counts += (counts.empty() ? "" : ", ") + mode["mode"].get<std::string>() + " " + mode[key].dump();
      if (counts.empty()) continue;
      if (!described) md << "\n" << counter.name << " per pass (" << counter.description << "):\n";
      described = true;
      md << "- " << m["label"].get<std::string>() << " (" << m["path"].get<std::string>() << "): " << counts << "\n";
    }
  }
}

// The modes every native model has, then each measured family's own (ExecFamily::legend, in the
// order the families are installed).
void exec_markdown_native_legend(std::ostream& md, const nlohmann::ordered_json& e) {
  md << "\nlive: the controller computes the coefficients (gates, mixing weights, routes, depths); replay: the recorded "
        "coefficients supplied, controller off; dense_same_shape: the Dense model of the same L, D, H with initialised "
        "weights (latency and FLOPs only).";
  for (const ExecFamily& family : exec_families()) {
    const bool measured = std::any_of(e["models"].begin(), e["models"].end(),
                                      [&](const nlohmann::ordered_json& m) { return m["family"] == family.name; });
    if (measured && !family.legend.empty()) md << " " << family.legend;
  }
  md << " NLL in nats/byte on the evaluation windows.\n";
}

void exec_markdown_legend(std::ostream& md, const nlohmann::ordered_json& e, bool any_native, bool any_external) {
  if (any_native) exec_markdown_native_legend(md, e);
  if (any_external)
    md << "\nExternal models (--external): the adapter runs, counts and times each pass in its own process, on its own device "
          "(FLOPs: " << e["flop_convention_external"].get<std::string>() << "; executed blocks: rows of the blocks unit per "
          "token). live runs the model's controller; replay hands back the outputs the controller recorded on the same batch "
          "(its logits checked equal to live's on every batch); static_profile hands the calibration windows' mean output to "
          "every window and token; reference is the adapter's reference model. Ratios against the reference, never against a "
          "native Dense. NLL in nats per token of the adapter's tokenizer.\n";
}

}  // namespace

std::string exec_markdown(const nlohmann::ordered_json& e) {
  std::ostringstream md;
  const bool any_external = std::any_of(e["models"].begin(), e["models"].end(), is_external_entry);
  const bool any_native = !std::all_of(e["models"].begin(), e["models"].end(), is_external_entry);
  exec_markdown_header(md, e);
  exec_markdown_table(md, e, any_external);
  exec_markdown_externals(md, e);
  exec_markdown_skips(md, e);
  exec_markdown_savings(md, e);
  exec_markdown_family_counters(md, e);
  exec_markdown_legend(md, e, any_native, any_external);
  return md.str();
}

}  // namespace fca
