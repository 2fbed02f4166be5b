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
#include "models/external/auditable.h"
#include "models/registry.h"
#include "report/audit_markdown.h"
#include "report/report.h"
#include "train/evaluate.h"
#include "train/trainer.h"

namespace fca {
namespace {

// Whether a checkpoint exists and finished the whole schedule.
bool trained(const std::string& weights_file, int64_t steps) {
  if (!file_exists(weights_file)) return false;
  const SafetensorsReader r(weights_file);
  const auto it = r.metadata().find("train_step");
  return it != r.metadata().end() &&
         parse_integer(it->second, weights_file + ": metadata field \"train_step\"", 0, int64_t(1) << 40) >= steps;
}

// Runs a stage whose run states the config's `setting` sizes (a batch of `batch` windows): an
// OutOfMemory from one of them becomes an Error naming the config and the setting, with a batch
// that fits.
template <typename Stage>
void naming_batch_setting(const std::string& config_path, const std::string& setting, int batch, const Stage& stage) {
  try {
    stage();
  } catch (const OutOfMemory& e) {
    throw Error(config_path + ": " + setting + " " + std::to_string(batch) + ": " + e.advice(setting));
  }
}

void write_json(const std::string& path, const nlohmann::ordered_json& j) {
  write_file_atomically(path, [&](std::ostream& out) { out << j.dump(2) << "\n"; });
}

// audit.md of an audit folder, rendered from its audit.json: after the audit, and on a resumed study
// whose previous run stopped between the two files.
void ensure_audit_markdown(const std::string& audit_dir) {
  if (file_exists(audit_dir + "/audit.md")) return;
  std::ifstream in(audit_dir + "/audit.json");
  if (!in) throw Error(audit_dir + "/audit.json: cannot be read to render audit.md");
  write_audit_markdown(audit_dir, nlohmann::ordered_json::parse(in));
}

// Whether exec_dir/exec.json measured exactly these models, in this order: the native ones by
// checkpoint path, then the adapters' by the command that starts them. A study resumed after its
// variants changed measures again instead of reporting the old set; an unreadable or malformed
// exec.json counts as not measured.
bool exec_measured(const std::string& exec_dir, const std::vector<std::string>& models, const std::vector<std::string>& externals) {
  std::ifstream in(exec_dir + "/exec.json");
  if (!in) return false;
  const nlohmann::json e = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  const size_t n = models.size() + externals.size();
  if (!e.is_object() || !e.contains("models") || !e["models"].is_array() || e["models"].size() != n) return false;
  for (size_t i = 0; i < n; ++i) {
    const bool external = i >= models.size();
    const std::string key = external ? "adapter_command" : "path";
    if (!e["models"][i].is_object() || e["models"][i].value(key, std::string()) != (external ? externals[i - models.size()] : models[i]))
      return false;
  }
  return true;
}

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

StudyConfig parse_study_config(const nlohmann::json& cfg, const std::string& config_path) {
  StudyConfig c;
  const JsonFields root(cfg, config_path,
                        {"title", "data", "out", "seeds", "variants", "train", "audit", "exec", "eval_windows"});
  const JsonFields train = root.object("train", {"batch", "steps", "lr", "warmup", "eval_every", "eval_windows", "checkpoint_every"});
  const JsonFields audit = root.object("audit", {"eval_windows", "calib_windows", "reps", "bootstrap", "seed", "external_timeout"});
  const JsonFields exec = root.object("exec", {"runs", "max_runs", "time_budget_s", "margin", "warmup", "batch", "skip_thresholds", "eval_windows", "calib_windows"});
  constexpr int64_t kMany = int64_t(1) << 24;  // a bound on counts that still fits every int below
  c.out = root.text("out", "");
  c.data = root.text("data", "");
  c.eval_windows = root.integer("eval_windows", 256, 1, kMany);
  // A variant's keys: its name, arch and shape, the adapter command, and the settings of the
  // trainable families (train/train_family.h), each accepted for the families that have it only.
  std::vector<std::string> variant_keys{"name", "arch", "layers", "dim", "heads", "seq", "command", "path", "audit_reps", "gate_value_from"};
  const auto first_setting = ptrdiff_t(variant_keys.size());
  std::string trainable;
  for (const auto& family : train_families()) {
    trainable += family.name + ", ";
    for (const auto& setting : family.settings)
      if (std::find(variant_keys.begin(), variant_keys.end(), setting.key) == variant_keys.end()) variant_keys.push_back(setting.key);
  }
  for (const JsonFields& v : root.objects("variants", variant_keys)) {
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
    for (const auto& other : c.variants)
      if (other.name == x.name) throw Error(v.where() + ": variant name \"" + x.name + "\" is used twice");
    bool trainable_arch = false;
    for (const auto& family : train_families()) trainable_arch = trainable_arch || family.name == x.arch;
    if (!trainable_arch && !untrained)
      throw Error(v.where() + ": 'arch' \"" + x.arch + "\" is not one of " + trainable + "external, pretrained");
    nlohmann::json given = nlohmann::json::object();
    for (auto it = v.json().begin(); it != v.json().end(); ++it)
      if (std::find(variant_keys.begin() + first_setting, variant_keys.end(), it.key()) != variant_keys.end()) given[it.key()] = it.value();
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
    c.variants.push_back(x);
  }
  check_gate_value_sources(c.variants, config_path);
  for (int64_t s : root.integers("seeds", {1}, 0, INT64_MAX)) {
    if (std::find(c.seeds.begin(), c.seeds.end(), uint64_t(s)) != c.seeds.end())
      throw Error(config_path + ": 'seeds' lists " + std::to_string(s) + " twice (a checkpoint counts once)");
    c.seeds.push_back(uint64_t(s));
  }
  // Every setting is read and checked here, before any work starts.
  c.title = root.text("title", "Frozen-Controller Audit study");
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

std::string run_study(const std::string& config_path, const std::string& out_arg, bool progress) {
  const StudyConfig c = parse_study_config(read_json_config(config_path, "study config"), config_path);
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

ReportInputs run_study(const StudyConfig& c, const std::string& config_path, const std::string& out, bool progress) {
  const Corpus corpus(c.data.empty() ? default_corpus_dir() : c.data);
  ensure_folder(out, "the study's output folder");

  int64_t total = 2;  // execution and report
  for (const auto& v : c.variants)
    total += !v.trained() ? 2 + (v.arch == "pretrained") : (v.gate_value_from.empty() ? 3 : 4) * int64_t(c.seeds.size()) + 1;
  int64_t done = 0;
  auto stage = [&](const std::string& what) {
    ++done;
    if (progress) std::fprintf(stderr, "[study %ld/%ld] %s\n", long(done), long(total), what.c_str());
  };
  ReportInputs report;
  report.title = c.title;
  std::vector<std::string> exec_models, exec_externals;
  // The study's audit settings for one model.
  auto audit_options = [&](const std::string& model_path, const std::string& out_dir) {
    AuditOptions a;
    a.model_path = model_path;
    a.eval_windows = c.audit_eval_windows;
    a.calib_windows = c.audit_calib_windows;
    a.reps = c.audit_reps;
    a.bootstrap_resamples = c.audit_bootstrap;
    a.seed = c.audit_seed;
    a.out_dir = out_dir;
    a.progress = progress;
    return a;
  };

  // The order of the work: a variant matched to another's gate mass after every other variant, so
  // that its source is trained first (the report lists its files in this order too).
  std::vector<StudyVariant> order;
  for (const auto& v : c.variants)
    if (v.gate_value_from.empty()) order.push_back(v);
  for (const auto& v : c.variants)
    if (!v.gate_value_from.empty()) order.push_back(v);

  // The gate_value of variant v's checkpoint of `seed`: the gate mass its source's checkpoint of the
  // same seed measures on the calibration (valid) split, kept in <v>-s<seed>.gate-mass.json with the
  // source's content hash (measured again when the source changed).
  auto matched_gate_value = [&](const StudyVariant& v, uint64_t seed) {
    const StudyVariant& source = *std::find_if(c.variants.begin(), c.variants.end(),
                                               [&](const StudyVariant& s) { return s.name == v.gate_value_from; });
    const std::string source_path = checkpoint_path(train_family_named(source.arch), out + "/" + source.name + "-s" + std::to_string(seed));
    const std::string path = out + "/" + v.name + "-s" + std::to_string(seed) + ".gate-mass.json";
    const auto m = open_model(source_path, 8, source.seq);
    const std::string sha = m->content_hash();
    if (std::ifstream in(path); in) {  // unreadable or malformed: measured again
      const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.value("source_sha256", "") == sha && j.contains("gate_mass") && j["gate_mass"].is_number()) {
        stage("measure the gate mass of " + source.name + " seed " + std::to_string(seed) + ": done before, skipped");
        return j["gate_mass"].get<double>();
      }
    }
    stage("measure the gate mass of " + source.name + " seed " + std::to_string(seed) + " for " + v.name);
    const EvalResult r = evaluate_auditable(*m, corpus.split("valid"), source.seq, c.eval_windows, 8, false);
    if (r.gate_mass < 0) throw Error(source_path + ": records no gates, so it has no gate mass for " + v.name);
    nlohmann::ordered_json j;
    j["schema"] = "fca-gate-mass-v1";
    j["variant"] = v.name;
    j["source"] = source_path;
    j["source_sha256"] = sha;
    j["split"] = "valid";
    j["windows"] = r.windows.size();
    j["seq_len"] = source.seq;
    j["gate_mass"] = r.gate_mass;
    j["provenance"] = provenance_base();
    write_json(path, j);
    return r.gate_mass;
  };

  for (const auto& v : order) {
    if (!v.trained()) {
      // One checkpoint as given, not trained and without c.seeds: a model fca does not implement
      // (external: its adapter, in its own process) or one it opens (pretrained: a MUDDPythia
      // folder). It is evaluated, audited once (paired-window intervals) and its execution measured.
      const bool external = v.arch == "external";
      auto open = [&]() -> std::unique_ptr<AuditableModel> {
        if (external) return open_external_model(v.command, c.adapter_timeout_s);
        return open_model(v.path, 8, v.seq);
      };
      // The name result files carry: the adapter's model name, or the checkpoint's path.
      auto model_path = [&](const AuditableModel& m) {
        return external ? static_cast<const ExternalAuditable&>(m).model_path() : v.path;
      };
      const std::string stem = out + "/" + v.name, what = v.name + " (" + v.arch + ")";
      const std::string eval_path = stem + ".eval-test.json";
      if (!file_exists(eval_path)) {
        stage("evaluate " + what);
        const auto m = open();
        const int T = v.seq > 0 ? v.seq : m->max_tokens();
        const EvalResult r = evaluate_auditable(*m, corpus.split("test"), T, c.eval_windows, 8, false);
        auto provenance = provenance_base();
        provenance["model_sha256"] = m->content_hash();
        if (external) provenance["adapter_command"] = v.command;
        auto doc = eval_document({model_path(*m), external ? "external" : m->family(), m->description(),
                                  nlohmann::json::parse(m->config_json()), m->vocab() != 256 ? "token" : "byte"},
                                 "test", T, r, provenance);
        doc["variant"] = v.name;
        write_json(eval_path, doc);
      } else {
        stage("evaluate " + what + ": done before, skipped");
      }
      report.evals.push_back(eval_path);
      const std::string audit_dir = stem + "-audit";
      if (!file_exists(audit_dir + "/audit.json")) {
        stage("audit " + what);
        const auto m = open();
        AuditOptions a = audit_options(model_path(*m), audit_dir);
        a.tokens = v.seq;
        if (v.audit_reps > 0) a.reps = v.audit_reps;
        if (external) a.adapter_command = v.command;
        run_audit(*m, corpus, a);
      } else {
        stage("audit " + what + ": done before, skipped");
      }
      ensure_audit_markdown(audit_dir);
      report.audits.push_back(audit_dir + "/audit.json");
      if (external) exec_externals.push_back(v.command);
      else if (open_model(v.path, 1, v.seq)->vocab() == 256) exec_models.push_back(v.path);
      else stage("measure execution of " + v.name + ": not measured (fca exec times byte-level models on text windows; this checkpoint is token-level)");
      continue;
    }
    std::vector<std::string> variant_audits;
    for (uint64_t seed : c.seeds) {
      const std::string stem = out + "/" + v.name + "-s" + std::to_string(seed);
      const TrainFamily& family = train_family_named(v.arch);
      TrainOptions o;
      o.arch = v.arch;
      o.shape = {v.layers, v.dim, v.heads, v.seq};
      o.settings = v.settings;
      o.batch = c.train_batch;
      o.steps = c.train_steps;
      o.lr = c.train_lr;
      o.warmup = c.train_warmup;
      o.eval_every = c.train_eval_every;
      o.eval_windows = c.train_eval_windows;
      o.checkpoint_every = c.train_checkpoint_every;
      o.seed = seed;
      o.out = checkpoint_path(family, stem);
      o.progress = progress;
      const CheckpointFiles files = family.files(o.out);
      if (!v.gate_value_from.empty()) {
        if (!family.gate_mass_matching)
          throw Error(v.name + ": gate_value_from for arch \"" + v.arch + "\", which has no setting a gate mass can set");
        const std::string& key = family.gate_mass_matching->setting;  // checked when the config was read
        o.settings[key] = matched_gate_value(v, seed);
        if (file_exists(files.weights)) {  // trained (or begun) with the value its source measured then
          const double trained_with = nlohmann::json::parse(open_model(o.out, 1, v.seq)->config_json()).value(key, -1.0);
          if (trained_with != o.settings[key].get<double>())
            throw Error(o.out + ": trained with " + key + " " + std::to_string(trained_with) + ", but " + v.gate_value_from +
                        " seed " + std::to_string(seed) + " now measures a gate mass of " +
                        std::to_string(o.settings[key].get<double>()) + " (was it retrained?); remove " + o.out +
                        " and its state to train " + v.name + " again");
        }
      }
      if (trained(files.weights, o.steps)) {
        stage("train " + v.name + " seed " + std::to_string(seed) + ": done before, skipped");
      } else {
        stage("train " + v.name + " seed " + std::to_string(seed));
        o.resume = file_exists(files.weights) && file_exists(files.state);
        naming_batch_setting(config_path, "train.batch", o.batch, [&] { train_model(o, corpus); });
      }
      report.train_logs.push_back(files.log);

      const std::string eval_path = stem + ".eval-test.json";
      if (!file_exists(eval_path)) {
        stage("evaluate " + v.name + " seed " + std::to_string(seed));
        const int64_t windows = c.eval_windows;
        const auto m = open_model(o.out, 8, v.seq);
        const EvalResult r = evaluate_auditable(*m, corpus.split("test"), v.seq, windows, 8, false);
        const nlohmann::json config = nlohmann::json::parse(m->config_json());
        const ModelFamily& family = family_named(v.arch);
        auto doc = eval_document({o.out, family.name, family.label(config), config, "byte"}, "test", v.seq, r, provenance_base());
        doc["variant"] = v.name;  // the report's quality table groups seeds by it
        write_json(eval_path, doc);
      } else {
        stage("evaluate " + v.name + " seed " + std::to_string(seed) + ": done before, skipped");
      }
      report.evals.push_back(eval_path);

      const std::string audit_dir = stem + "-audit";
      if (!file_exists(audit_dir + "/audit.json")) {
        stage("audit " + v.name + " seed " + std::to_string(seed));
        const AuditOptions a = audit_options(o.out, audit_dir);
        run_audit(*open_model(o.out, std::max(1, a.batch), v.seq), corpus, a);
      } else {
        stage("audit " + v.name + " seed " + std::to_string(seed) + ": done before, skipped");
      }
      ensure_audit_markdown(audit_dir);
      variant_audits.push_back(audit_dir + "/audit.json");
      report.audits.push_back(audit_dir + "/audit.json");  // every checkpoint's tables; one card per variant
      if (seed == c.seeds.front()) exec_models.push_back(o.out);
    }
    if (variant_audits.size() >= 2) {
      stage("aggregate " + v.name + " over " + std::to_string(variant_audits.size()) + " seeds");
      const auto agg = aggregate_audits(variant_audits, c.audit_bootstrap, 1);
      write_json(out + "/" + v.name + "-aggregate.json", agg);
      report.aggregates.push_back(out + "/" + v.name + "-aggregate.json");
    } else {
      stage("aggregate " + v.name + ": one seed, nothing to aggregate");
    }
  }
  const std::string exec_dir = out + "/exec";
  if (!exec_measured(exec_dir, exec_models, exec_externals)) {
    stage("measure execution of " + std::to_string(exec_models.size() + exec_externals.size()) + " models" +
          (file_exists(exec_dir + "/exec.json") ? " (exec.json measured another set of models)" : ""));
    ExecOptions e;
    e.models = exec_models;
    e.externals = exec_externals;
    e.external_timeout_s = c.adapter_timeout_s;
    e.runs = c.exec_runs;
    e.max_runs = c.exec_max_runs;
    e.time_budget_s = c.exec_time_budget_s;
    e.margin = c.exec_margin;
    e.warmup = c.exec_warmup;
    e.batch = c.exec_batch;
    e.skip_thresholds = c.exec_skip_thresholds;
    e.eval_windows = c.exec_eval_windows;
    e.calib_windows = c.exec_calib_windows;
    e.out_dir = exec_dir;
    e.progress = false;
    naming_batch_setting(config_path, "exec.batch", e.batch, [&] { run_exec(corpus, e); });
  } else {
    stage("measure execution: done before, skipped");
  }
  report.execs.push_back(exec_dir + "/exec.json");
  stage("report");
  return report;
}

}  // namespace fca
