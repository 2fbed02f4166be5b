// `fca paper`: the reproduction of "Dynamic Parameterization Is Not Dynamic Inference" (arXiv
// 2607.26192) from one config: the same study (study.h) on each corpus, then the paper's figures
// measured from the study's result files (paper.json), printed beside the paper's own values (a
// committed values file) in paper.md, paper.html and a section of each corpus's report.html.
// docs/paper.md describes the variants, the corpora and every figure.
#pragma once
#include <string>
#include <vector>

#include "core/json.h"
#include "study/study.h"

namespace fca {

// One corpus of the reproduction and the paper's corpus it stands in for.
struct PaperCorpus {
  std::string name;           // the output sub-folder, "nlp-corpus"
  std::string data;           // the corpus folder (train/valid/test.txt)
  std::string stands_in_for;  // "OpenWebText (OWT)"
  std::string paper_key;      // the paper corpus's key in figure ids, "owt"
};

// A machine class of the plan: its peak is an assumption written in the config (the plan also
// measures this machine's). Native classes run fca's engine at the plan's efficiency of their SGEMM
// peak; torch classes (GPUs: --engine torch) run fca_torch at `efficiency` (model FLOP utilisation)
// of their bf16 peak, with `source` saying where that utilisation comes from.
struct PlanMachine {
  std::string name;
  double peak_gflops = 0;  // native: the SGEMM peak; torch: the dense bf16 peak
  double memory_gib = 0;   // per rank (a GPU's memory for torch classes)
  std::string engine = "native";
  double efficiency = 0;   // 0: the plan's efficiency
  std::string source;      // where the efficiency comes from (torch classes)
};

struct PaperConfig {
  std::string title, out;
  std::string values;  // the paper's values (configs/paper-values.json)
  std::vector<PaperCorpus> corpora;
  StudyConfig study;  // "data" and "out" are each corpus's
  // --plan: the classes printed besides this machine, the MPI rank counts, and the share of the
  // SGEMM peak a training step achieves (an assumption; docs/paper.md quotes fca bench's measurement).
  std::vector<PlanMachine> plan_machines;
  std::vector<int> plan_ranks{1};
  double plan_efficiency = 0.5;
};

// The variants the paper's figures read, by name: each must be in the config with this arch and gate.
// Anything else in the config is trained, audited and reported, but no paper figure reads it.
const std::vector<std::string>& paper_variant_names();

// Reads a paper config; every field is checked (unknown keys, types, ranges, the paper's variants)
// before any work. `where` names the file in errors.
PaperConfig parse_paper_config(const nlohmann::json& config, const std::string& where);

// Runs the study on every corpus into <out>/<corpus>/ (resumable: finished pieces are skipped),
// measures the paper's figures into <out>/paper.json, writes <out>/paper.md and <out>/paper.html and
// adds the paper section to every corpus's report.html. Returns paper.md's path.
std::string run_paper(const PaperConfig& c, const std::string& config_path, bool progress);

// The plan of a paper config without running it: per variant its parameters, training FLOPs and
// memory, and the estimated time of the whole reproduction per machine class and MPI rank count.
nlohmann::ordered_json paper_plan(const PaperConfig& c, const std::string& config_path);
std::string paper_plan_text(const nlohmann::ordered_json& plan);

// The paper's figures measured from the studies in <out>/<corpus>/ beside the values file's entries:
// fca-paper-v1 (docs/paper.md). Throws Error when a figure has no entry in the values file.
nlohmann::ordered_json paper_figures(const PaperConfig& c, const std::string& out);

}  // namespace fca
