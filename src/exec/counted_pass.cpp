#include "exec/counted_pass.h"

#include <cstdio>

#include "core/error.h"

namespace fca {

bool counters_agree(const ExecCounters& c, const ExpectedCounts& e) {
  return c.blocks_executed.load() == e.blocks && double(c.gemm_flops.load()) == e.gemm_flops &&
         double(c.controller_flops.load()) == e.controller_flops && double(c.mixing_flops.load()) == e.mixing_flops &&
         c.controller_evaluations.load() == e.controller_evaluations && c.routed_rows.load() == e.routed_rows &&
         c.propagated_rows.load() == e.propagated_rows;
}

void check_counters(const std::string& mode, const ExecCounters& c, const ExpectedCounts& e) {
  if (counters_agree(c, e)) return;
  std::string diff;
  auto compare = [&](const char* what, double counted, double expected) {
    if (counted == expected) return;
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s%s %.0f counted, %.0f expected", diff.empty() ? "" : "; ", what, counted, expected);
    diff += buf;
  };
  compare("blocks", double(c.blocks_executed.load()), double(e.blocks));
  compare("GEMM FLOPs", double(c.gemm_flops.load()), e.gemm_flops);
  compare("controller FLOPs", double(c.controller_flops.load()), e.controller_flops);
  compare("mixing FLOPs", double(c.mixing_flops.load()), e.mixing_flops);
  compare("controller evaluations", double(c.controller_evaluations.load()), double(e.controller_evaluations));
  compare("routed rows", double(c.routed_rows.load()), double(e.routed_rows));
  compare("propagated rows", double(c.propagated_rows.load()), double(e.propagated_rows));
  throw Error("execution counters disagree with the graph (" + mode + "): " + diff);
}

nlohmann::ordered_json counter_fields(const ExecCounters& c, const ExpectedCounts& expected, int64_t tokens_per_pass) {
  const double gemm = double(c.gemm_flops.load()), controller = double(c.controller_flops.load()),
               mixing = double(c.mixing_flops.load()), total = gemm + controller + mixing;
  nlohmann::ordered_json j;
  j["executed_blocks"] = c.blocks_executed.load();
  j["controller_evaluations_per_pass"] = c.controller_evaluations.load();
  j["routed_rows_per_pass"] = c.routed_rows.load();
  if (c.propagated_rows.load() != 0 || expected.propagated_rows != 0) j["propagated_rows_per_pass"] = c.propagated_rows.load();
  j["gemm_calls_per_pass"] = c.gemm_calls.load();
  j["gflop_per_pass"] = total / 1e9;
  j["gflop_per_token"] = total / 1e9 / double(tokens_per_pass);
  j["gflop_per_pass_by_kind"] = {{"gemm", gemm / 1e9}, {"controller", controller / 1e9}, {"mixing", mixing / 1e9}};
  j["counters_match_graph"] = counters_agree(c, expected);
  return j;
}

}  // namespace fca
