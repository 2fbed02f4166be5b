// `fca study`: the whole experiment from one JSON file. Trains every listed variant for every seed,
// evaluates them (a Table-1 style quality table), audits each, aggregates audits across seeds,
// measures execution, and writes the report. Resumable: finished pieces (checkpoints at their final
// step, result files) are skipped; an interrupted training resumes from its checkpoint.
#pragma once
#include <string>

namespace fca {

// Runs the study described by `config_path` into `out_dir` (the config's "out" when empty).
// Returns the report's path.
std::string run_study(const std::string& config_path, const std::string& out_dir, bool progress);

}  // namespace fca
