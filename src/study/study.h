// `fca study`: the whole experiment from one JSON file. Trains every listed variant for every seed,
// evaluates them (a Table-1 style quality table), audits each, aggregates audits across seeds,
// measures execution, and writes the report. Resumable: finished pieces (checkpoints at their final
// step, result files) are skipped; an interrupted training resumes from its checkpoint.
#pragma once
#include <cstdint>
#include "core/json.h"
#include "study/torch_engine.h"
#include "report/report.h"
#include <map>
#include <string>
#include <vector>

namespace fca {

struct StudyVariant {
  std::string name, arch;  // arch: a trainable family (train/train_family.h), "external" or "pretrained"
  std::string command;     // arch "external": the adapter command (a model fca does not implement)
  std::string path;        // arch "pretrained": a checkpoint fca opens (a MUDDPythia folder, a .safetensors file)
  // The untrained arms (external, pretrained) are one checkpoint, audited once: their audit's
  // randomisations (0: the study's audit.reps).
  int audit_reps = 0;
  // A gated "fixed" variant matched to another's gate mass (the paper's Uniform-Matched): the name of
  // a gated variant with learned gates; each seed's gate_value is the gate mass that variant's
  // checkpoint of the same seed measures on the calibration (valid) split. Trained after it.
  std::string gate_value_from;
  nlohmann::json settings = nlohmann::json::object();  // the family's own settings, resolved (defaults filled in)
  int layers = 4, dim = 128, heads = 4, seq = 128;
  // Whether fca trains this variant (one checkpoint per seed), or takes one checkpoint as given.
  bool trained() const { return arch != "external" && arch != "pretrained"; }
};

// A study config, every field checked (unknown keys, types, ranges, names) before any work.
struct StudyConfig {
  std::string title, out, data;
  int64_t eval_windows = 256;
  std::vector<StudyVariant> variants;
  std::vector<uint64_t> seeds;
  int audit_eval_windows = 128, audit_calib_windows = 128, audit_reps = 5, audit_bootstrap = 2000;
  uint64_t audit_seed = 1;
  double adapter_timeout_s = 600;
  int train_batch = 16;
  int64_t train_steps = 600;
  double train_lr = 2e-3;
  int64_t train_warmup = 30, train_eval_every = 200, train_eval_windows = 32, train_checkpoint_every = 200;
  int exec_runs = 20, exec_max_runs = 200, exec_warmup = 3, exec_batch = 8;
  double exec_time_budget_s = 60, exec_margin = 0.05;  // exec/exec.h
  std::vector<double> exec_skip_thresholds;
  int exec_eval_windows = 64, exec_calib_windows = 64;
  // The families' own audit and exec settings (models/run_setting.h), keys of the "audit" and "exec"
  // sections; an audit setting reaches the models of the families that declare it.
  std::map<std::string, double> audit_family_settings;
  std::map<std::string, std::vector<double>> exec_family_settings;
  // Which engine trains and audits the gated and MUDD variants (study/torch_engine.h); set by the
  // commands' --engine, --gpus and --torch-python, not by the config.
  StudyEngine engine;
};

// Reads a study config (`where` names it in errors); throws Error on anything it does not accept.
StudyConfig parse_study_config(const nlohmann::json& config, const std::string& where);

// A JSON config file (`what` names it in errors: "study config").
nlohmann::json read_json_config(const std::string& path, const std::string& what);

// Runs the study described by `config_path` into `out_dir` (the config's "out" when empty), writes
// its report and returns the report's path.
std::string run_study(const std::string& config_path, const std::string& out_dir, bool progress,
                      const StudyEngine& engine = {});
// Runs a parsed study into `out` (`config_path` names it in errors): everything but the report;
// returns the report's inputs, in the study's order.
ReportInputs run_study(const StudyConfig& c, const std::string& config_path, const std::string& out, bool progress);
// <out>/report.html and report.md from `report`; returns report.html's path.
std::string write_study_report(const ReportInputs& report, const std::string& out);

}  // namespace fca
