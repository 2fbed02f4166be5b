// `fca exec`: the third claim, actual execution. For each model: what ran (blocks, controller
// evaluations and GEMM FLOPs counted where they happen), what it cost (latency and throughput over
// timed runs), with the live controller, with replayed coefficients, and with every gate forced to
// 1; and a real skip sweep, where blocks whose calibrated static gate is below a threshold are
// removed from the executed graph. Every configuration of every model is timed in the same
// interleaved rounds, and every latency ratio carries a paired bootstrap interval (exec/timing.h).
// Writes exec.json and exec.md.
#pragma once
#include "core/json.h"
#include <map>
#include <string>
#include <vector>

#include "data/corpus.h"

namespace fca {

inline constexpr const char* kExecSchema = "fca-exec-v2";

struct ExecOptions {
  std::vector<std::string> models;
  // Models fca does not implement: the commands that start their adapters (exec/external_exec.h),
  // and the seconds to wait for each of their answers.
  std::vector<std::string> externals;
  double external_timeout_s = 600;
  int batch = 8;
  int runs = 20;            // timed rounds at least (every configuration once per round)
  int max_runs = 200;       // timed rounds at most
  double time_budget_s = 60;  // timed seconds after which no further round starts (beyond `runs`)
  double margin = 0.05;     // practical latency margin: no "faster"/"slower" within it
  int warmup = 3;
  std::vector<double> skip_thresholds;  // each in [0, 1]
  // The families' own settings (ExecFamily::exec_settings) given by flag or study key, by key, each
  // value checked against its declared range; a family reads its own with exec_setting.
  std::map<std::string, std::vector<double>> family_settings;
  int calib_windows = 64;   // valid-split windows for the calibrated static gates
  int eval_windows = 64;    // test-split windows for NLL
  std::string out_dir;
  bool progress = true;
};

// `wanted` evenly spaced windows of T tokens of a split: inputs and targets [count, T].
struct TokenWindows {
  std::vector<int32_t> inputs, targets;
  int count = 0;
};
TokenWindows load_token_windows(const TextSplit& split, int T, int wanted);

// Throws Error naming the flag when the options cannot run: no model at all, --skip-threshold
// without a model it applies to, a bad count, margin or timeout. run_exec checks them first;
// `fca exec` before it opens the corpus.
void check_exec_options(const ExecOptions& options);
nlohmann::ordered_json run_exec(const Corpus& corpus, const ExecOptions& options);
std::string exec_markdown(const nlohmann::ordered_json& exec);
// A latency ratio object of exec.json as text: "x1.042 [1.013, 1.071] no measurable difference at
// this size", or its undefined note.
std::string latency_ratio_text(const nlohmann::json& ratio);
// The saving of exec.json entry `mode` against `reference` given their paired latency ratio: the
// FLOP and latency ratios and savings, and "saves", true only where the FLOPs are lower, the latency
// measurably lower ("faster"), and both passes fully counted ("fully_counted" false on an external
// pass with uncounted operators or unseen work); "note" says why a saving is undefined or refused.
nlohmann::ordered_json saving(const nlohmann::ordered_json& mode, const nlohmann::ordered_json& reference,
                              const nlohmann::ordered_json& latency_ratio);

// An external mode's uncounted_ops as text, "fca_test.opaque_matmul.default x1, ..." ("" when none).
std::string uncounted_ops_text(const nlohmann::json& mode);
// An external mode's unseen_work as text, "moe.0.experts.1: parameter weight [16, 16] took part in no
// counted product x2; ..." ("" when none).
std::string unseen_work_text(const nlohmann::json& mode);

}  // namespace fca
