// run_study (study/study.h) as named phases: for each variant, its checkpoints (given, or trained
// per seed with the gate mass matched where asked), their evaluation, audit and aggregate; then the
// execution of every variant's first checkpoint; each phase skipped when its result file exists.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>

#include "audit/aggregate.h"
#include "audit/audit.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/json.h"
#include "core/memory.h"
#include "core/parse.h"
#include "core/safetensors.h"
#include "exec/exec.h"
#include "models/external/auditable.h"
#include "models/registry.h"
#include "ops/provenance.h"
#include "report/audit_markdown.h"
#include "study/study.h"
#include "train/evaluate.h"
#include "train/trainer.h"
#include "models/base/stream.h"

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

// The study's options for each tool, copied from its config in one place each.
// `family`: the audited model's ("external" for an adapter's), whose declared settings it takes.
AuditOptions study_audit_options(const StudyConfig& c, const std::string& model_path, const std::string& family,
                                 const std::string& out_dir, bool progress) {
  AuditOptions a;
  a.model_path = model_path;
  a.eval_windows = c.audit_eval_windows;
  a.calib_windows = c.audit_calib_windows;
  a.reps = c.audit_reps;
  a.bootstrap_resamples = c.audit_bootstrap;
  a.seed = c.audit_seed;
  a.out_dir = out_dir;
  a.progress = progress;
  for (const ModelFamily& f : model_families())
    if (f.name == family)
      for (const RunSetting& s : f.audit_settings)
        if (const auto given = c.audit_family_settings.find(s.key); given != c.audit_family_settings.end())
          a.family_settings[s.key] = given->second;
  return a;
}

TrainOptions study_train_options(const StudyConfig& c, const StudyVariant& v, uint64_t seed, const std::string& out, bool progress) {
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
  o.out = out;
  o.progress = progress;
  return o;
}

ExecOptions study_exec_options(const StudyConfig& c, std::vector<std::string> models, std::vector<std::string> externals,
                               const std::string& out_dir) {
  ExecOptions e;
  e.models = std::move(models);
  e.externals = std::move(externals);
  e.external_timeout_s = c.adapter_timeout_s;
  e.runs = c.exec_runs;
  e.max_runs = c.exec_max_runs;
  e.time_budget_s = c.exec_time_budget_s;
  e.margin = c.exec_margin;
  e.warmup = c.exec_warmup;
  e.batch = c.exec_batch;
  e.skip_thresholds = c.exec_skip_thresholds;
  e.family_settings = c.exec_family_settings;
  e.eval_windows = c.exec_eval_windows;
  e.calib_windows = c.exec_calib_windows;
  e.out_dir = out_dir;
  e.progress = false;
  return e;
}

// One study's run: its config, folder, progress count and the files its report will read.
class StudyRun {
 public:
  StudyRun(const StudyConfig& c, const std::string& config_path, const std::string& out, bool progress)
      : c_(c), config_path_(config_path), out_(out), progress_(progress),
        corpus_(c.data.empty() ? default_corpus_dir() : c.data) {
    ensure_folder(out, "the study's output folder");
    for (const auto& v : c.variants)
      total_ += !v.trained() ? 2 + (v.arch == "pretrained") : (v.gate_value_from.empty() ? 3 : 4) * int64_t(c.seeds.size()) + 1;
    report_.title = c.title;
  }

  ReportInputs run() {
    // A variant matched to another's gate mass comes after every other variant, so that its source
    // is trained first (the report lists its files in this order too).
    for (const auto& v : c_.variants)
      if (v.gate_value_from.empty()) study_variant(v);
    for (const auto& v : c_.variants)
      if (!v.gate_value_from.empty()) study_variant(v);
    measure_execution();
    stage("report");
    return report_;
  }

 private:
  void stage(const std::string& what) {
    ++done_;
    if (progress_) std::fprintf(stderr, "[study %ld/%ld] %s\n", long(done_), long(total_), what.c_str());
  }
  // Runs `work` as stage `what` unless `result` exists.
  template <typename Work>
  void unless_done(const std::string& result, const std::string& what, const Work& work) {
    if (file_exists(result)) {
      stage(what + ": done before, skipped");
      return;
    }
    stage(what);
    work();
  }

  void study_variant(const StudyVariant& v) {
    if (!v.trained()) return study_given_checkpoint(v);
    std::vector<std::string> variant_audits;
    for (uint64_t seed : c_.seeds) {
      const std::string stem = out_ + "/" + v.name + "-s" + std::to_string(seed);
      const std::string path = train_checkpoint(v, seed, stem);
      evaluate_checkpoint(v, seed, path, stem + ".eval-test.json");
      const std::string audit_dir = stem + "-audit";
      unless_done(audit_dir + "/audit.json", "audit " + v.name + " seed " + std::to_string(seed), [&] {
        if (c_.engine.handles(v.arch)) return audit_through_torch(v, path, audit_dir);
        const AuditOptions a = study_audit_options(c_, path, v.arch, audit_dir, progress_);
        run_audit(*open_model(path, std::max(1, a.batch), v.seq), corpus_, a);
      });
      ensure_audit_markdown(audit_dir);
      variant_audits.push_back(audit_dir + "/audit.json");
      report_.audits.push_back(audit_dir + "/audit.json");  // every checkpoint's tables; one card per variant
      if (seed == c_.seeds.front()) {
        exec_models_.push_back(path);
        // The torch engine's checkpoints are also timed through their adapter, on the model's device.
        if (c_.engine.handles(v.arch)) exec_externals_.push_back(torch_exec_command(c_.engine, path));
      }
    }
    aggregate_variant(v, variant_audits);
  }

  // One checkpoint as given, not trained and without the seeds: a model fca does not implement
  // (external: its adapter, in its own process) or one it opens (pretrained: a MUDDPythia folder).
  // It is evaluated, audited once (paired-window intervals) and its execution measured.
  void study_given_checkpoint(const StudyVariant& v);
  // The torch engine's audit of checkpoint `path`: through fca_torch's hooked adapter, in the model's
  // own process and on its device, as any external model. audit.json names the checkpoint file, so
  // that the report labels its seeds as a native study's.
  void audit_through_torch(const StudyVariant& v, const std::string& path, const std::string& audit_dir) {
    const std::string command = torch_serve_command(c_.engine, path);
    const auto m = open_external_model(command, c_.adapter_timeout_s);
    AuditOptions a = study_audit_options(c_, path, "external", audit_dir, progress_);
    a.tokens = v.seq;
    a.adapter_command = command;
    run_audit(*m, corpus_, a);
  }
  // The checkpoint of variant v and `seed` (trained now unless it finished before); its path.
  std::string train_checkpoint(const StudyVariant& v, uint64_t seed, const std::string& stem);
  void evaluate_checkpoint(const StudyVariant& v, uint64_t seed, const std::string& path, const std::string& eval_path) {
    unless_done(eval_path, "evaluate " + v.name + " seed " + std::to_string(seed), [&] {
      const auto m = open_model(path, 8, v.seq);
      const EvalResult r = evaluate_auditable(*m, corpus_.split("test"), v.seq, c_.eval_windows, 8, false);
      const nlohmann::json config = nlohmann::json::parse(m->config_json());
      const ModelFamily& family = family_named(v.arch);
      auto doc = eval_document({path, family.name, family.label(config), config, "byte"}, "test", v.seq, r, provenance_base());
      doc["variant"] = v.name;  // the report's quality table groups seeds by it
      write_json(eval_path, doc);
    });
    report_.evals.push_back(eval_path);
  }
  // The gate_value of variant v's checkpoint of `seed`: the gate mass its source's checkpoint of the
  // same seed measures on the calibration (valid) split, kept in <v>-s<seed>.gate-mass.json with the
  // source's content hash (measured again when the source changed).
  double matched_gate_value(const StudyVariant& v, uint64_t seed);
  void aggregate_variant(const StudyVariant& v, const std::vector<std::string>& audits) {
    if (audits.size() < 2) return stage("aggregate " + v.name + ": one seed, nothing to aggregate");
    stage("aggregate " + v.name + " over " + std::to_string(audits.size()) + " seeds");
    const std::string path = out_ + "/" + v.name + "-aggregate.json";
    write_json(path, aggregate_audits(audits, c_.audit_bootstrap, 1));
    report_.aggregates.push_back(path);
  }
  void measure_execution() {
    const std::string exec_dir = out_ + "/exec";
    if (exec_measured(exec_dir, exec_models_, exec_externals_)) {
      stage("measure execution: done before, skipped");
    } else {
      stage("measure execution of " + std::to_string(exec_models_.size() + exec_externals_.size()) + " models" +
            (file_exists(exec_dir + "/exec.json") ? " (exec.json measured another set of models)" : ""));
      const ExecOptions e = study_exec_options(c_, exec_models_, exec_externals_, exec_dir);
      naming_batch_setting(config_path_, "exec.batch", e.batch, [&] { run_exec(corpus_, e); });
    }
    report_.execs.push_back(exec_dir + "/exec.json");
  }

  const StudyConfig& c_;
  const std::string config_path_, out_;
  const bool progress_;
  const Corpus corpus_;
  int64_t total_ = 2, done_ = 0;  // stages: 2 for execution and the report, then each variant's
  ReportInputs report_;
  std::vector<std::string> exec_models_, exec_externals_;
};

void StudyRun::study_given_checkpoint(const StudyVariant& v) {
  const bool external = v.arch == "external";
  auto open = [&]() -> std::unique_ptr<AuditableModel> {
    if (external) return open_external_model(v.command, c_.adapter_timeout_s);
    return open_model(v.path, 8, v.seq);
  };
  // The name result files carry: the adapter's model name, or the checkpoint's path.
  auto model_path = [&](const AuditableModel& m) { return external ? static_cast<const ExternalAuditable&>(m).model_path() : v.path; };
  const std::string stem = out_ + "/" + v.name, what = v.name + " (" + v.arch + ")";
  const std::string eval_path = stem + ".eval-test.json";
  unless_done(eval_path, "evaluate " + what, [&] {
    const auto m = open();
    const int T = v.seq > 0 ? v.seq : m->max_tokens();
    const EvalResult r = evaluate_auditable(*m, corpus_.split("test"), T, c_.eval_windows, 8, false);
    auto provenance = provenance_base();
    provenance["model_sha256"] = m->content_hash();
    if (external) provenance["adapter_command"] = v.command;
    auto doc = eval_document({model_path(*m), external ? "external" : m->family(), m->description(),
                              nlohmann::json::parse(m->config_json()), m->vocab() != kByteVocab ? "token" : "byte"},
                             "test", T, r, provenance);
    doc["variant"] = v.name;
    write_json(eval_path, doc);
  });
  report_.evals.push_back(eval_path);
  const std::string audit_dir = stem + "-audit";
  unless_done(audit_dir + "/audit.json", "audit " + what, [&] {
    const auto m = open();
    AuditOptions a = study_audit_options(c_, model_path(*m), external ? "external" : m->family(), audit_dir, progress_);
    a.tokens = v.seq;
    if (v.audit_reps > 0) a.reps = v.audit_reps;
    if (external) a.adapter_command = v.command;
    run_audit(*m, corpus_, a);
  });
  ensure_audit_markdown(audit_dir);
  report_.audits.push_back(audit_dir + "/audit.json");
  if (external) exec_externals_.push_back(v.command);
  else if (open_model(v.path, 1, v.seq)->vocab() == kByteVocab) exec_models_.push_back(v.path);
  else stage("measure execution of " + v.name + ": not measured (fca exec times byte-level models on text windows; this checkpoint is token-level)");
}

std::string StudyRun::train_checkpoint(const StudyVariant& v, uint64_t seed, const std::string& stem) {
  const TrainFamily& family = train_family_named(v.arch);
  TrainOptions o = study_train_options(c_, v, seed, checkpoint_path(family, stem), progress_);
  const CheckpointFiles files = family.files(o.out);
  if (!v.gate_value_from.empty()) {
    if (!family.gate_mass_matching)
      throw Error(v.name + ": gate_value_from for arch \"" + v.arch + "\", which has no setting a gate mass can set");
    const std::string& key = family.gate_mass_matching->setting;  // checked when the config was read
    o.settings[key] = matched_gate_value(v, seed);
    if (file_exists(files.weights)) {  // trained (or begun) with the value its source measured then
      const double trained_with = nlohmann::json::parse(open_model(o.out, 1, v.seq)->config_json()).value(key, -1.0);
      if (trained_with != o.settings[key].get<double>())
        throw Error(o.out + ": trained with " + key + " " + std::to_string(trained_with) + ", but " + v.gate_value_from + " seed " +
                    std::to_string(seed) + " now measures a gate mass of " + std::to_string(o.settings[key].get<double>()) +
                    " (was it retrained?); remove " + o.out + " and its state to train " + v.name + " again");
    }
  }
  if (trained(files.weights, o.steps)) {
    stage("train " + v.name + " seed " + std::to_string(seed) + ": done before, skipped");
  } else {
    stage("train " + v.name + " seed " + std::to_string(seed));
    o.resume = file_exists(files.weights) && file_exists(files.state);
    if (c_.engine.handles(v.arch)) {
      o.resume = true;  // fca_torch: continue from a checkpoint when there is one, which torchrun's restarts need
      train_with_torch(c_.engine, o, corpus_.dir());
      if (!trained(files.weights, o.steps))
        throw Error("the torch engine's trainer ended without a checkpoint of " + std::to_string(o.steps) + " steps at " + files.weights);
    } else {
      naming_batch_setting(config_path_, "train.batch", o.batch, [&] { train_model(o, corpus_); });
    }
  }
  report_.train_logs.push_back(files.log);
  return o.out;
}

double StudyRun::matched_gate_value(const StudyVariant& v, uint64_t seed) {
  const StudyVariant& source =
      *std::find_if(c_.variants.begin(), c_.variants.end(), [&](const StudyVariant& s) { return s.name == v.gate_value_from; });
  const std::string source_path = checkpoint_path(train_family_named(source.arch), out_ + "/" + source.name + "-s" + std::to_string(seed));
  const std::string path = out_ + "/" + v.name + "-s" + std::to_string(seed) + ".gate-mass.json";
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
  const EvalResult r = evaluate_auditable(*m, corpus_.split("valid"), source.seq, c_.eval_windows, 8, false);
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
}

}  // namespace

ReportInputs run_study(const StudyConfig& c, const std::string& config_path, const std::string& out, bool progress) {
  return StudyRun(c, config_path, out, progress).run();
}

}  // namespace fca
