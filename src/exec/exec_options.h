// What `fca exec` is asked to do (ExecOptions), and the token windows every family's measurement
// times and evaluates: in a header of their own, below exec/exec.h's run_exec, so that the pieces
// run_exec is built from (exec_family.h, external_exec.h) take them without including run_exec.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/corpus.h"

namespace fca {

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

}  // namespace fca
