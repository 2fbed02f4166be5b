// What one instrumented forward pass must show, and the check that it did: executed blocks and
// FLOPs by kind (GEMM, controller, mixing; the convention of core/exec_counters.h) from formulas
// written per family in exec/, compared exactly with the counters the code incremented as it ran.
// A pass that reaches a controller it should not, skips a block or runs a kernel twice fails here.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "core/exec_counters.h"
#include "core/json.h"

namespace fca {

// The convention in one line, written into exec.json and exec.md.
inline constexpr const char* kFlopConvention =
    "GEMMs (multiply-add = 2) plus the non-GEMM arithmetic of controllers and mixing (add, subtract, multiply, divide "
    "and exp/log/sqrt/erf/tanh = 1 each; comparisons, selection and copies = 0), counted where the work happens; the "
    "trunk's element-wise work (LayerNorm, softmax, GELU, residual adds) is not counted";

// What the graph of one configuration runs per pass, from the family's formulas (never from the
// counters): compared field by field with what the code counted as it ran.
struct ExpectedCounts {
  int64_t blocks = 0;
  // Integers held in doubles: exact below 2^53 FLOPs per pass.
  double gemm_flops = 0;
  double controller_flops = 0;
  double mixing_flops = 0;
  int64_t controller_evaluations = 0;  // calls into controller code (0 for every replayed source)
  int64_t routed_rows = 0;             // expert rows (MoE), selected tokens (MoD), block rows (exit); 0 elsewhere
  // The family counters (core/exec_counters.h) by name; a counter not named here is expected at 0.
  std::map<std::string, int64_t> family = {};
};

// True when every counter equals its expected value: blocks, GEMM, controller and mixing FLOPs,
// controller evaluations, routed rows and every family counter (registered or expected).
bool counters_agree(const ExecCounters& counters, const ExpectedCounts& expected);
// Throws "execution counters disagree with the graph (<mode>): ..." naming each counter that differs
// with its counted and expected value.
void check_counters(const std::string& mode, const ExecCounters& counters, const ExpectedCounts& expected);
// The counter fields of one mode in exec.json: executed_blocks, controller_evaluations_per_pass,
// routed_rows_per_pass, <family counter>_per_pass (each family counter, in registration order, only
// where it counted or was expected to count), gemm_calls_per_pass, gflop_per_pass and gflop_per_token (all kinds),
// gflop_per_pass_by_kind, and counters_match_graph, computed here by counters_agree.
nlohmann::ordered_json counter_fields(const ExecCounters& counters, const ExpectedCounts& expected, int64_t tokens_per_pass);

}  // namespace fca
