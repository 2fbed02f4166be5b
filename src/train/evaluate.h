// Evaluation of any model on a split: per-window NLL (nats/byte or token), bits/byte, Byte-PPL, and
// the gate mass where the model's record is gates.
#pragma once
#include <cstdint>
#include <vector>

#include <string>

#include "core/json.h"
#include "data/corpus.h"
#include "models/auditable.h"

namespace fca {

struct EvalResult {
  std::vector<int64_t> windows;     // window indices evaluated
  std::vector<double> window_nll;   // mean NLL over each window's T positions
  double nll = 0;                   // mean over windows, nats per byte
  double bits_per_byte = 0;         // nll / ln 2
  double byte_ppl = 0;              // exp(nll)
  double gate_mass = 0;             // mean of g over layers, tokens and windows
  int seq_len = 0;
  double seconds = 0;
};

// Evaluates any model behind the audit interface on `wanted` evenly spaced windows (0 = every
// window) of T tokens of the tokenized split, in batches of `batch`; NLL is per token (per byte for
// byte-level models); gate_mass is the mean recorded gate where the record is gates
// (AuditableModel::coefficients_are_gates), else -1. show_progress draws a progress bar on stderr.
EvalResult evaluate_auditable(AuditableModel& model, const TextSplit& split, int T, int64_t wanted, int batch,
                              bool show_progress);

// What the evaluation document (schema fca-eval-v1) says about the model: its path (or "external:
// <command>"), family (its name in the registry, or external), the label tables and figures
// show (models/registry.h ModelFamily::label; an external model's description), its config, and
// whether the unit is a byte or a token.
struct EvaluatedModel {
  std::string path, family, label;
  nlohmann::json config;
  std::string unit = "byte";
};
// The evaluation document of `r` on `split` (written by fca eval and fca study, read by the report);
// `provenance` is the caller's (model and data hashes added).
nlohmann::ordered_json eval_document(const EvaluatedModel& model, const std::string& split, int seq_len, const EvalResult& r,
                                     const nlohmann::ordered_json& provenance);

}  // namespace fca
