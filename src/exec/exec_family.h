// The exec layer's part of the family table (models/registry.h has the opening part,
// train/train_family.h the training part): how `fca exec` measures a checkpoint of a family. Each
// family supplies its entry from src/models/<family>/exec/; families/families.cpp installs them.
// Below the table, the pieces every family's measurement is written with.
#pragma once
#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "data/corpus.h"
#include "exec/counted_pass.h"
#include "exec/exec_options.h"
#include "exec/timed_modes.h"
#include "models/run_setting.h"
#include "train/train_family.h"

namespace fca {

// What `fca bench` asks a family to time: a checkpoint, or ("" ) a fresh model of the shape and
// settings (resolved, train/train_family.h), windows of random bytes.
struct BenchRequest {
  std::string model;
  ModelShape shape;
  nlohmann::json settings;
  uint64_t seed = 0;  // initialisation of a fresh model; the windows use seed + 1
  int batch = 8;
  int tokens = 0;       // per window (0: the model's positions)
  bool replay = false;  // forward: recorded coefficients instead of the live controller
};
// What a family's benchmark times: one pass (a forward pass, or an optimizer step), its FLOPs by
// the family's formula, and what the report names.
struct BenchWork {
  nlohmann::ordered_json config;
  std::string name;        // "featuregate L 6 D 256 H 4"
  std::string model_hash;  // of the checkpoint ("" for a fresh model)
  int tokens = 0;
  double flops_per_pass = 0;
  size_t run_state_bytes = 0;
  std::function<void()> pass;  // shares everything it reads
  // A training benchmark's first optimizer step (loss and gradient norm at the starting weights, on
  // the benchmark's batch), run before the timed steps: what a peer that trains the same weights on
  // the same batch must reproduce (bench/compare_pytorch.py). Empty for forward passes.
  std::optional<StepStats> first_step;
};

struct ExecFamily {
  std::string name;  // the registry's name
  // (The optional entries below default to null, so a family's entry names only what it has.)
  // A checkpoint's exec.json entry: every configuration's counted pass (checked against the
  // family's FLOP formulas) and NLL; the passes to time and the savings to compare go to `timed`.
  // The entry carries "path", "model_sha256", "family", "config" (n_layer, d_model, n_head, seq_len
  // at least, and what the family's ModelFamily::label reads), "tokens_per_pass" and "modes", and
  // "dense": true for a Dense transformer (the reference of every latency ratio). exec adds
  // "label", ModelFamily::label of the config, after "family".
  std::function<nlohmann::ordered_json(const std::string& path, const Corpus& corpus, const ExecOptions& options,
                                       TimedModes& timed)>
      measure;
  // Whether the checkpoint has gates a skip sweep can calibrate (--skip-threshold); null: never.
  std::function<bool(const std::string& path)> has_calibratable_gates = nullptr;
  // `fca bench forward` / `bench train` by the family's own formula; null: bench times a forward
  // pass through the audit interface (a checkpoint only) or an optimizer step of the family's
  // Trainable, with the FLOPs counted at the GEMM calls.
  std::function<BenchWork(const BenchRequest&)> bench_forward = nullptr, bench_train = nullptr;
  // The reference every family's execution is compared with (dense_same_shape below): this
  // family's Dense model of L, D, H, T with initialised weights, counted (its counters checked
  // against its formulas) and appended to `modes`. Exactly one installed family provides it, the
  // gated family (its Dense variant, g = 1); null for the others.
  std::function<void(nlohmann::ordered_json& modes, TimedModes& timed, int L, int D, int H, int T,
                     std::shared_ptr<const TokenWindows> timing, int B)>
      same_shape_dense = nullptr;
  // The family's own counters (core/exec_counters.h), registered by add_exec_family: work only this
  // family does, counted where it happens (count_family) and expected by its formulas
  // (ExpectedCounts::family). exec.json's modes carry "<name>_per_pass" and exec.md prints them.
  std::vector<FamilyCounter> counters = {};
  // The family's own exec settings (models/run_setting.h): `fca exec` flags and study "exec" keys,
  // in ExecOptions::family_settings when given; measure reads them with exec_setting.
  std::vector<RunSetting> exec_settings = {};
  // What the family's own modes are, for exec.md's legend (printed for each family among the
  // measured models, after the modes every family has: live, replay, dense_same_shape).
  std::string legend = "";
};

// Installs a family's entry (families/families.cpp, once at start-up); refuses a name used twice.
void add_exec_family(ExecFamily family);
const std::vector<ExecFamily>& exec_families();
// Every installed family's exec settings, in installation order: what `fca exec` builds its flags
// from and a study's "exec" section accepts.
std::vector<RunSetting> exec_run_settings();
// The family of this name; throws Error naming the families exec can measure.
const ExecFamily& exec_family_named(const std::string& name);

// The values of the family's exec setting `key`: the options' when given, else its declared
// default. Error when the family declares no such setting.
std::vector<double> exec_setting(const ExecOptions& options, const ExecFamily& family, const std::string& key);

// The fields every model's entry of exec.json opens with, in this order: path, model_sha256,
// family, config and tokens_per_pass (one timed pass: windows x tokens). A family's measure adds its
// modes and its own fields after them.
nlohmann::ordered_json exec_model_entry(const std::string& path, const std::string& model_sha256, const std::string& family,
                                        nlohmann::ordered_json config, int64_t tokens_per_pass);

// One configuration: a counted pass (counters checked against `expected`, exec/counted_pass.h); the
// pass is handed to `timed` as the next entry of `modes`, which the mode's JSON is appended to.
void count_mode(nlohmann::ordered_json& modes, TimedModes& timed, const std::string& mode, std::function<void()> pass,
                const ExpectedCounts& expected, int total_blocks, int tokens_per_pass, nlohmann::ordered_json extra = {});

// The one entry of `families` that provides same_shape_dense; throws Error when none does or when
// two do (naming both). dense_same_shape looks it up among the installed families.
const ExecFamily& dense_reference_family(const std::vector<ExecFamily>& families);

// dense_same_shape: the Dense model of the same L, D, H, T with initialised weights (latency and
// FLOPs do not depend on the weights' values), the same baseline for every family: the one installed
// family's same_shape_dense (the gated family's Dense variant, g = 1, whose pass evaluates its unit
// gate once per block and counts h + 1 F as mixing, docs/exec.md). Throws Error when no installed
// family, or more than one, provides it.
void dense_same_shape(nlohmann::ordered_json& modes, TimedModes& timed, int L, int D, int H, int T,
                      std::shared_ptr<const TokenWindows> timing, int B);

// GEMM FLOPs of the attention half of one pre-norm block over B windows of T tokens: qkv and proj
// (4 D^2 per row) and QK^T, PV over the pairs the blocked causal kernel executes.
double attention_half_flops(int B, int T, int D);

// Mean over `windows` windows of the per-window NLL that pass_and_loss(w0, n, out) writes for
// windows w0 .. w0 + n - 1, in batches of B; summed in window order.
template <typename PassAndLoss>
double mean_window_nll(int windows, int B, PassAndLoss pass_and_loss) {
  std::vector<double> nll(static_cast<size_t>(windows));
  for (int w0 = 0; w0 < windows; w0 += B) pass_and_loss(w0, std::min(B, windows - w0), nll.data() + w0);
  double s = 0;
  for (double v : nll) s += v;
  return s / windows;
}

}  // namespace fca
