#include "core/parse.h"
#include "study/study.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include "core/json.h"

#include "audit/aggregate.h"
#include "audit/audit.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/json_fields.h"
#include "core/memory.h"
#include "ops/provenance.h"
#include "core/progress.h"
#include "core/safetensors.h"
#include "exec/exec.h"
#include "exec/exec_family.h"
#include "models/external/auditable.h"
#include "models/registry.h"
#include "report/audit_markdown.h"
#include "report/report.h"
#include "train/evaluate.h"
#include "train/trainer.h"

namespace fca {
namespace {

// The family's gate-mass matching of a variant's arch (train_family.h), or null (none, or arch
// external).
const GateMassMatching* gate_mass_matching(const StudyVariant& v) {
  if (!v.trained()) return nullptr;
  const TrainFamily& family = train_family_named(v.arch);
  return family.gate_mass_matching ? &*family.gate_mass_matching : nullptr;
}

// Each variant with gate_value_from: a variant its family can match to a gate mass, whose source is
// another variant of the study with learned gates (its record is the gates, so its gate mass is
// measured), as the families say.
void check_gate_value_sources(const std::vector<StudyVariant>& variants, const std::string& config_path) {
  std::string matching, learned;  // the families that match, and their learned gates, for messages
  for (const auto& family : train_families())
    if (family.gate_mass_matching) {
      matching += (matching.empty() ? "arch \"" : " or arch \"") + family.name + "\"";
      learned += (learned.empty() ? "" : "; ") + family.name + ": " + family.gate_mass_matching->learned_gates;
    }
  for (const auto& v : variants) {
    if (v.gate_value_from.empty()) continue;
    const std::string where = config_path + ": variant '" + v.name + "': gate_value_from \"" + v.gate_value_from + "\"";
    const GateMassMatching* target = gate_mass_matching(v);
    if (target == nullptr)
      throw Error(where + " sets a setting from a gate mass, but arch \"" + v.arch + "\" has none; the variant must be " +
                  (matching.empty() ? "of a family that has one (none installed)" : matching));
    target->check_target(v.settings, where);
    const auto source = std::find_if(variants.begin(), variants.end(), [&](const StudyVariant& s) { return s.name == v.gate_value_from; });
    if (source == variants.end()) throw Error(where + " names no variant of the study");
    const GateMassMatching* from = gate_mass_matching(*source);
    const std::string instead = from == nullptr ? "arch \"" + source->arch + "\"" : from->unlearned(source->settings);
    if (!instead.empty())
      throw Error(where + ": the source must be a variant with learned gates (" + learned + "), found " + instead);
  }
}

}  // namespace

namespace {

// The keys a variant may have: its name, arch and shape, the adapter command, and the settings of
// the trainable families (train/train_family.h), each accepted for the families that have it only.
// The settings start at index first_setting.
struct VariantKeys {
  std::vector<std::string> keys{"name", "arch", "layers", "dim", "heads", "seq", "command", "path", "audit_reps", "gate_value_from"};
  ptrdiff_t first_setting = ptrdiff_t(keys.size());
  std::string trainable;  // "gated, mudd, ..., " for messages
  VariantKeys() {
    for (const auto& family : train_families()) {
      trainable += family.name + ", ";
      for (const auto& setting : family.settings)
        if (std::find(keys.begin(), keys.end(), setting.key) == keys.end()) keys.push_back(setting.key);
    }
  }
};

// One variant of the config, checked against the variants before it.
StudyVariant parse_variant(const JsonFields& v, const VariantKeys& k, const std::vector<StudyVariant>& earlier,
                           const std::string& config_path) {
  StudyVariant x;
  x.name = v.text("name", "");
  x.arch = v.text("arch", train_families().front().name);  // the first family installed
  x.layers = int(v.integer("layers", 4, 1, 4096));
  x.dim = int(v.integer("dim", 128, 1, 1 << 16));
  x.heads = int(v.integer("heads", 4, 1, 4096));
  const bool untrained = x.arch == "external" || x.arch == "pretrained";
  x.seq = int(v.integer("seq", untrained ? 0 : 128, untrained ? 0 : 1, 1 << 20));  // untrained: 0 = the model's
  x.command = v.text("command", "");  // arch external
  x.path = v.text("path", "");        // arch pretrained
  x.audit_reps = int(v.integer("audit_reps", 0, 2, 100000));
  if (v.has("audit_reps") && !untrained)
    throw Error(v.where() + ": 'audit_reps' is for the untrained arms (arch \"external\", \"pretrained\"); a trained variant's audits use audit.reps");
  x.gate_value_from = v.text("gate_value_from", "");
  if (x.name.empty()) throw Error(v.where() + ": 'name' is missing or empty");
  // The name becomes file names in the output folder: nothing that leaves it or hides in it.
  if (x.name.find('/') != std::string::npos || x.name.find('\\') != std::string::npos || x.name[0] == '.')
    throw Error(v.where() + ": 'name' \"" + x.name + "\" must not contain '/' or '\\' or start with '.' (it names files in the output folder)");
  for (const auto& other : earlier)
    if (other.name == x.name) throw Error(v.where() + ": variant name \"" + x.name + "\" is used twice");
  bool trainable_arch = false;
  for (const auto& family : train_families()) trainable_arch = trainable_arch || family.name == x.arch;
  if (!trainable_arch && !untrained)
    throw Error(v.where() + ": 'arch' \"" + x.arch + "\" is not one of " + k.trainable + "external, pretrained");
  nlohmann::json given = nlohmann::json::object();
  for (auto it = v.json().begin(); it != v.json().end(); ++it)
    if (std::find(k.keys.begin() + k.first_setting, k.keys.end(), it.key()) != k.keys.end()) given[it.key()] = it.value();
  if (untrained && !given.empty())
    throw Error(v.where() + ": \"" + given.begin().key() + "\" is a setting of a trainable family, not of arch \"" + x.arch + "\"");
  if (!untrained) {
    const TrainFamily& family = train_family_named(x.arch);
    x.settings = resolve_settings(family, given, v.where());
    family.check({x.layers, x.dim, x.heads, x.seq}, x.settings, v.where());
  }
  if ((x.arch == "external") != !x.command.empty())
    throw Error(config_path + ": variant '" + x.name + "': " +
                (x.command.empty() ? "arch \"external\" needs a 'command' (the adapter to start)"
                                   : "'command' belongs to arch \"external\" only"));
  if ((x.arch == "pretrained") != !x.path.empty())
    throw Error(config_path + ": variant '" + x.name + "': " +
                (x.path.empty() ? "arch \"pretrained\" needs a 'path' (the checkpoint to audit)" : "'path' belongs to arch \"pretrained\" only"));
  if (const GateMassMatching* m = gate_mass_matching(x); m != nullptr && !x.gate_value_from.empty() && given.contains(m->setting))
    throw Error(v.where() + ": give '" + m->setting + "' or 'gate_value_from', not both");
  return x;
}

// The train, audit and exec settings, each read and checked before any work starts.
void parse_tool_settings(StudyConfig& c, const JsonFields& train, const JsonFields& audit, const JsonFields& exec) {
  constexpr int64_t kMany = int64_t(1) << 24;  // a bound on counts that still fits every int below
  c.audit_eval_windows = int(audit.integer("eval_windows", 128, 2, kMany));
  c.audit_calib_windows = int(audit.integer("calib_windows", 128, 1, kMany));
  c.audit_reps = int(audit.integer("reps", 5, 2, 100000));
  c.audit_bootstrap = int(audit.integer("bootstrap", 2000, 1, kMany));
  c.audit_seed = uint64_t(audit.integer("seed", 1, 0, INT64_MAX));
  c.adapter_timeout_s = audit.number("external_timeout", 600.0, 1e-3, 1e7);
  c.train_batch = int(train.integer("batch", 16, 1, 1 << 16));
  c.train_steps = train.integer("steps", 600, 1, kMany);
  c.train_lr = train.number("lr", 2e-3, 1e-12, 10.0);
  c.train_warmup = train.integer("warmup", 30, 0, kMany);
  c.train_eval_every = train.integer("eval_every", 200, 0, kMany);
  c.train_eval_windows = train.integer("eval_windows", 32, 1, kMany);
  c.train_checkpoint_every = train.integer("checkpoint_every", 200, 0, kMany);
  c.exec_runs = int(exec.integer("runs", 20, 1, kMany));
  c.exec_max_runs = int(exec.integer("max_runs", std::max(200, c.exec_runs), c.exec_runs, kMany));
  c.exec_time_budget_s = exec.number("time_budget_s", 60, 0, 1e6);
  c.exec_margin = exec.number("margin", 0.05, 1e-6, 0.999999);
  c.exec_warmup = int(exec.integer("warmup", 3, 0, kMany));
  c.exec_batch = int(exec.integer("batch", 8, 1, 1 << 16));
  c.exec_skip_thresholds = exec.numbers("skip_thresholds", {}, 0.0, 1.0);
  c.exec_eval_windows = int(exec.integer("eval_windows", 64, 1, kMany));
  c.exec_calib_windows = int(exec.integer("calib_windows", 64, 1, kMany));
  for (const RunSetting& s : audit_run_settings())
    if (audit.has(s.key)) c.audit_family_settings[s.key] = audit.number(s.key, 0, s.low, s.high);
  for (const RunSetting& s : exec_run_settings())
    if (exec.has(s.key))
      c.exec_family_settings[s.key] =
          s.list ? exec.numbers(s.key, {}, s.low, s.high) : std::vector<double>{exec.number(s.key, 0, s.low, s.high)};
}

// A section's keys: its own, then the families' settings of that section.
std::vector<std::string> with_family_keys(std::vector<std::string> keys, const std::vector<RunSetting>& settings) {
  for (const RunSetting& s : settings) keys.push_back(s.key);
  return keys;
}

}  // namespace

StudyConfig parse_study_config(const nlohmann::json& cfg, const std::string& config_path) {
  StudyConfig c;
  const JsonFields root(cfg, config_path,
                        {"title", "data", "out", "seeds", "variants", "train", "audit", "exec", "eval_windows"});
  const JsonFields train = root.object("train", {"batch", "steps", "lr", "warmup", "eval_every", "eval_windows", "checkpoint_every"});
  const JsonFields audit =
      root.object("audit", with_family_keys({"eval_windows", "calib_windows", "reps", "bootstrap", "seed", "external_timeout"},
                                            audit_run_settings()));
  const JsonFields exec = root.object("exec", with_family_keys({"runs", "max_runs", "time_budget_s", "margin", "warmup", "batch",
                                                                "skip_thresholds", "eval_windows", "calib_windows"},
                                                               exec_run_settings()));
  constexpr int64_t kMany = int64_t(1) << 24;  // a bound on counts that still fits every int below
  c.out = root.text("out", "");
  c.data = root.text("data", "");
  c.eval_windows = root.integer("eval_windows", 256, 1, kMany);
  const VariantKeys keys;
  for (const JsonFields& v : root.objects("variants", keys.keys)) c.variants.push_back(parse_variant(v, keys, c.variants, config_path));
  check_gate_value_sources(c.variants, config_path);
  for (int64_t s : root.integers("seeds", {1}, 0, INT64_MAX)) {
    if (std::find(c.seeds.begin(), c.seeds.end(), uint64_t(s)) != c.seeds.end())
      throw Error(config_path + ": 'seeds' lists " + std::to_string(s) + " twice (a checkpoint counts once)");
    c.seeds.push_back(uint64_t(s));
  }
  c.title = root.text("title", "Frozen-Controller Audit study");
  parse_tool_settings(c, train, audit, exec);
  return c;
}

nlohmann::json read_json_config(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open the " + what);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
}

std::string run_study(const std::string& config_path, const std::string& out_arg, bool progress, const StudyEngine& engine) {
  StudyConfig c = parse_study_config(read_json_config(config_path, "study config"), config_path);
  check_study_engine(engine, "fca study");
  c.engine = engine;
  const std::string out = !out_arg.empty() ? out_arg : c.out;
  if (out.empty()) throw Error(config_path + ": no 'out' folder (or pass --out)");
  return write_study_report(run_study(c, config_path, out, progress), out);
}

std::string write_study_report(const ReportInputs& report, const std::string& out) {
  const ReportData d = load_report_data(report);
  const std::string html_path = out + "/report.html";
  write_file_atomically(html_path, [&](std::ostream& s) { s << report_html(d); });
  write_file_atomically(out + "/report.md", [&](std::ostream& s) { s << report_markdown(d); });
  return html_path;
}

}  // namespace fca
