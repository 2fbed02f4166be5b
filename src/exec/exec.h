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
#include "exec/exec_options.h"

namespace fca {

inline constexpr const char* kExecSchema = "fca-exec-v2";

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
