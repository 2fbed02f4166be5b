// Helpers shared by the subcommands: the family flags, thread and data flags, JSON output.
#pragma once
#include <CLI/CLI.hpp>
#include "core/json.h"
#include <functional>
#include <limits>
#include <string>

#include <map>
#include <vector>

#include "models/run_setting.h"
#include "study/torch_engine.h"
#include "train/train_family.h"

namespace fca::cli {

// The flags of a model of any trainable family (train/train_family.h): --arch, the shape every
// family takes (--layers, --dim, --heads, --seq) and each family's own settings (--gate, --top-k,
// ...: one flag per setting key, '_' as '-'), as `fca train` and `fca bench` take them.
struct FamilyFlags {
  std::string arch;  // default: the first family installed
  ModelShape shape;
  void add_to(CLI::App& app, const std::string& arch_help);
  // The settings given for `arch`, resolved (typed, defaults filled in; bad numbers and choices
  // named by flag); a flag of a family other than `arch` is an Error. Checks the shape and settings
  // as the family's `check` does.
  nlohmann::json settings(const CLI::App& app) const;

 private:
  std::map<std::string, std::string> given_;                   // setting key -> text, as given
  std::map<std::string, std::vector<std::string>> families_;   // setting key -> families that have it
};

// The flags of the families' own run-time settings (models/run_setting.h) on `fca audit` or `fca
// exec`: one per declared key, its help the declaration's. A key two families declare is one flag.
class RunSettingFlags {
 public:
  // `declared`: the families' settings in installation order.
  void add_to(CLI::App& app, const std::vector<RunSetting>& declared);
  // The settings given, by key: a list's entries split at commas, every value checked against the
  // declared range (an Error naming the flag).
  std::map<std::string, std::vector<double>> values() const;
  // The flags given, "--exit-threshold" ... ("" when none).
  std::string given_flags() const;

 private:
  std::map<std::string, std::string> text_;      // key -> text as given
  std::map<std::string, RunSetting> settings_;   // key -> its (first) declaration
};

// Validators whose messages say the valid range in words; CLI11 puts the flag before them
// ("--threads: -3 is not a whole number >= 0 (0 = all cores)"). CLI11's own print the range's
// bounds, e.g. DBL_MAX in 309 digits, and its conversion errors name no range. A number must parse
// completely, be finite and representable (1e-400 underflows: refused, not read as 0).
extern const CLI::Validator positive_number;      // a number > 0
extern const CLI::Validator non_negative_number;  // a number >= 0
CLI::Validator number_in(double low, double high);  // a number in [low, high]
// --external-timeout's range: a thousandth of a second to 1e6 s (11.6 days); larger values would
// overflow the deadline's clock arithmetic.
inline constexpr double kMinExternalTimeout = 1e-3, kMaxExternalTimeout = 1e6;
// A whole number >= low and <= high (by default the most an int flag holds); `meaning`, if any,
// follows the range in the message: whole_number(0, "0 = all cores").
CLI::Validator whole_number(int64_t low, const std::string& meaning = "", int64_t high = std::numeric_limits<int>::max());
extern const CLI::Validator unsigned_integer;  // 0 .. 2^64-1, digits only (CLI11 would wrap "-1")

// --threads N (0 = all cores); applied with apply_threads() before any work.
void add_threads_flag(CLI::App& app, int& threads);
// --engine native|torch, --gpus N and --torch-python PATH of fca study and fca paper (study/torch_engine.h).
void add_engine_flags(CLI::App& app, StudyEngine& engine);
void apply_threads(int threads);
// --precision fp32|bf16 (ops/onednn_matmul.h): the process's matrix-product precision, set by
// apply_precision() before any work (always, so a command in a process that ran another starts
// from its own flag).
void add_precision_flag(CLI::App& app, std::string& precision);
void apply_precision(const std::string& precision);

// The callback of a command whose run states --batch sizes: `batch` is the flag's variable (read when
// the callback runs; it must outlive the callback, as the command's shared flags do). An OutOfMemory
// from a run state (core/memory.h) becomes an Error that names the flag, the memory needed and
// available, and a batch that fits: "--batch 1000000000: the run state of 1000000000 windows needs
// 57041.6 GiB, 22.1 GiB available; try --batch 387610".
std::function<void()> naming_batch(const int& batch, std::function<void()> body);

// The --data folder, or the default corpus when empty.
std::string resolve_data_dir(const std::string& flag_value);

// Writes JSON (pretty, 2 spaces) atomically.
void write_json_file(const std::string& path, const nlohmann::ordered_json& j);

// Registration of each subcommand (cmd_*.cpp).
void add_train_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_info_command(CLI::App& app);
void add_trace_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_audit_command(CLI::App& app);
void add_aggregate_command(CLI::App& app);
void add_exec_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_study_command(CLI::App& app);
void add_paper_command(CLI::App& app);
void add_convert_command(CLI::App& app);
void add_families_command(CLI::App& app);

}  // namespace fca::cli
