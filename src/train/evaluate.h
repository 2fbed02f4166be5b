// Evaluation of a gated model on a split: per-window NLL (nats/byte), bits/byte, Byte-PPL, gate mass.
#pragma once
#include <cstdint>
#include <vector>

#include "data/corpus.h"
#include "models/auditable.h"
#include "models/gated/model.h"

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

// Evaluates `wanted` evenly spaced windows of length T (0 = every window) in batches of `batch`.
// show_progress draws a progress bar on stderr.
EvalResult evaluate_gated(const GatedModel<float>& model, const TextSplit& split, int T, int64_t wanted, int batch,
                          bool show_progress);

// Evaluates any model behind the audit interface (e.g. MUDD folders) on `wanted` evenly spaced
// windows of T tokens of the tokenized split; NLL is per token (per byte for byte-level models);
// gate_mass is -1 (no gates).
EvalResult evaluate_auditable(AuditableModel& model, const TextSplit& split, int T, int64_t wanted, int batch,
                              bool show_progress);

}  // namespace fca
