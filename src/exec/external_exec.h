// `fca exec --external COMMAND`: claim 3 for a model fca does not implement. The adapter process
// (docs/external-protocol.md, "Claim 3") runs, counts and times each pass of its model in its own
// process, on its own device; fca picks the windows, checks every answer, compares the replay's
// logits digests with the live pass's and times every mode in the same interleaved rounds as the
// native models (exec/timing.h). The entry it writes is exec.json's family "external".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/safetensors.h"
#include "data/corpus.h"
#include "exec/exec_options.h"
#include "exec/timed_modes.h"

namespace fca {

// How an adapter counts FLOPs (exec.json's flop_convention_external).
inline constexpr const char* kExternalFlopConvention =
    "every aten operator that runs, seen at PyTorch's dispatcher: matrix products by formula (multiply-add = 2: mm, addmm, "
    "bmm, baddbmm, mv, addmv, dot, convolutions, and scaled dot-product attention as 2 x 2 B H L S E, the full L x S "
    "whatever the mask), attributed to the controllers when issued inside a controller module; every other operator "
    "listed by name with its calls, in zero_ops (element-wise, reductions, normalisation, softmax, indexing, copies, "
    "views: 0 FLOPs by convention) or in uncounted_ops (no formula: never counted as 0 silently)";

// exec_prepare's answer, checked: the modes in the adapter's order (live first, then any of replay,
// static_profile, reference), where and how it times, and its unit kinds.
struct ExternalExecSetup {
  std::vector<std::string> modes;
  std::string reference_label;  // the reference mode's label ("Dense"); "" when none is offered
  std::string device, timer;    // timer: "perf_counter" or "cuda_events"
  int64_t threads = 0;
  std::string timed_pass;        // what the adapter times, in words (a hand-written adapter's run() or forward())
  nlohmann::ordered_json units;  // unit kind -> matched modules, e.g. {"blocks": 4}
};
ExternalExecSetup parse_exec_prepare(const SafetensorsReader& answer);

// The counted fields of one mode's exec.json entry from the `counts` JSON text of its exec_pass
// answer (total_blocks, executed_blocks, executed_units_per_token, unit_rows_per_pass,
// unit_calls_per_pass, controller_evaluations_per_pass, gflop_per_pass, gflop_per_token,
// gflop_per_pass_by_kind, gemm_ops, zero_ops, uncounted_ops, modules). Checks every field's type
// and range (counts integers >= 0, FLOPs finite and >= 0), the unit kinds and their modules against
// exec_prepare's `units`, and the controller: live evaluates it (>= 1), replay and static_profile
// never (0). Errors start with `where` (the answer) and name the field.
nlohmann::ordered_json external_counted_fields(const std::string& counts, const std::string& mode,
                                               const nlohmann::ordered_json& units, int64_t tokens_per_pass,
                                               const std::string& where);

// exec_pass's answer in `mode` for evaluation windows w0 .. w0 + n - 1: the NLL per window into
// `nll` [n], each finite; with `counted` (a counted pass), its external_counted_fields there.
// Returns the logits digest.
std::string parse_exec_pass(const SafetensorsReader& answer, const std::string& mode, int w0, int n, double* nll,
                            nlohmann::ordered_json* counted, const nlohmann::ordered_json& units, int64_t tokens_per_pass);

// The adapter's seconds of one timed pass: exec_time's `seconds`, finite and in (0, 1e6).
double external_seconds(const SafetensorsReader& answer);

// Starts the adapter `command` and measures its model: exec_prepare, then per mode one counted
// exec_pass of the timing batch (the first --batch evaluation windows) and the NLL over the
// evaluation windows (replay's digests compared with live's, batch by batch); the modes' exec_time
// measurements go to `timed` (the adapter stays open until `timed` is destroyed), and the live mode's
// saving against the reference when one is offered. Returns the model's exec.json entry.
nlohmann::ordered_json measure_external(const std::string& command, const Corpus& corpus, const ExecOptions& options,
                                        TimedModes& timed);

}  // namespace fca
