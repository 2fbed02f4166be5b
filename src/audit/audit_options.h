// What `fca audit` is asked to do (AuditOptions, docs/audit.md): in a header of its own, below
// audit/audit.h's run_audit, so that the phases run_audit is built from (audit/phases.h) take the
// options without including run_audit.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/communicator.h"

namespace fca {

inline constexpr const char* kAuditSchema = "fca-audit-v1";

struct AuditOptions {
  std::string model_path;            // for provenance ("external: <adapter's name>" for an adapter's model)
  std::string adapter_command;       // an adapter's model: the command that started it, for provenance
  int eval_windows = 512;            // N_eval, from the test split
  int calib_windows = 512;           // N_cal, from the valid split
  int tokens = 0;                    // T (0 = the model's maximum)
  int reps = 20;                     // R randomisations per randomised condition
  int batch = 0;                     // windows per forward pass; 0: chosen for throughput (plan.h)
  int bootstrap_resamples = 10000;
  uint64_t seed = 0;                 // the audit seed: randomisations and bootstrap
  std::vector<std::string> conditions;  // empty: every condition that applies
  std::string cache_path;            // empty: <out_dir>/cache.safetensors
  std::string out_dir;
  double small_penalty = 0.002;      // static_profile penalty "practically small" iff upper CI < this
  double high_retention = 0.95;      // retention "high" iff lower CI > this
  double replay_tolerance = 0.0;     // exact replay must be bitwise (0); only for other backends
  // Condition replays of one window batch start after the part of the pass that precedes the
  // first coefficient, computed once per batch (models/prefix_reuse.h). Results are bitwise the
  // same either way; off recomputes everything (for checking that claim).
  bool prefix_reuse = true;
  // token_shuffle and cross_shuffle: one token permutation per (window, layer) shared by every
  // stream (site-joint) instead of one per stream. Moving whole squares keeps structure within a
  // token, such as mHC's doubly stochastic mixing (docs/hyper.md, "The audit's view").
  bool joint_token_shuffle = false;
  bool progress = true;
  // Stop after the plan (windows, tokens, FLOPs, memory and the time estimated from a probe on this
  // machine) and return it as {"plan", "batch_choice", "conditions", "cache_reused"}; nothing written.
  bool plan_only = false;
  // Audit a model whose replay does not depend on the coefficients it is handed (the replay
  // sensitivity probe, replay_probe.h, fails). audit.json and the report then say so prominently.
  bool allow_insensitive_replay = false;
  // Tests: return {"stopped_after_batches": n} once n condition batches have been journalled in this
  // run, as an audit killed there would stop (0: run to the end).
  int stop_after_batches = 0;
  // The ranks this audit runs on (core/communicator.h); null: this process alone.
  const Communicator* communicator = nullptr;
  // The model family's own audit settings (ModelFamily::audit_settings) by key, given by flag or
  // study key: run_audit hands each to the model (set_controller_setting) before anything runs; a
  // model without the setting is an Error naming its family and the key.
  std::map<std::string, double> family_settings;
};

}  // namespace fca
