// A family's own run-time setting: a number (or, for sweeps, a list of numbers) that `fca audit` or
// `fca exec` passes to the family's models, declared by the family (ModelFamily::audit_settings,
// ExecFamily::exec_settings) so that no command names it. The commands build their flags from the
// declarations, --<key with '_' as '-'>, and a study reads the same key in its "audit" or "exec"
// section (docs/adding-a-family.md, "Run-time settings").
#pragma once
#include <string>
#include <vector>

namespace fca {

struct RunSetting {
  std::string key;   // "exit_threshold"; the flag --exit-threshold
  std::string help;  // one line for --help, naming the models it applies to
  double low = 0, high = 1;  // the closed range of every value
  bool list = false;  // a comma-separated list of values (a sweep), else one value
  // The value(s) when none is given (empty: the model's own, e.g. the checkpoint's threshold).
  std::vector<double> default_values = {};
};

// The flag of a setting key: "--" + key with '_' as '-'.
std::string run_setting_flag(const std::string& key);

}  // namespace fca
