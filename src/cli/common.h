// Helpers shared by the subcommands: the model-shape flags, thread and data flags, JSON output.
#pragma once
#include <CLI/CLI.hpp>
#include "core/json.h"
#include <string>

#include "models/gated/config.h"

namespace fca::cli {

// Flags that describe a gated model's shape: --gate, --gate-value, --layers, --dim, --heads, --seq.
struct ModelShapeFlags {
  std::string gate = "featuregate";
  double gate_value = 0.6;
  int layers = 6, dim = 256, heads = 4, seq = 256;
  void add_to(CLI::App& app);
  GatedConfig config() const;  // validated; errors name the flag
};

// Validators whose messages say plainly what was wrong (CLI11's own print the range's bounds, e.g.
// DBL_MAX in 309 digits). A number must parse completely, be finite and representable (1e-400
// underflows: refused, not read as 0).
extern const CLI::Validator positive_number;      // > 0
extern const CLI::Validator non_negative_number;  // >= 0
extern const CLI::Validator unsigned_integer;     // 0 .. 2^64-1, digits only (CLI11 would wrap "-1")

// --threads N (0 = all cores); applied with apply_threads() before any work.
void add_threads_flag(CLI::App& app, int& threads);
void apply_threads(int threads);

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
void add_convert_command(CLI::App& app);

}  // namespace fca::cli
