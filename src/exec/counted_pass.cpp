#include "exec/counted_pass.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/error.h"

namespace fca {
namespace {

// Every family counter a check must look at, (name, counted, expected): the registered ones in
// their order, then any the expectation names that no family registered (counted 0).
struct FamilyCount {
  std::string name;
  int64_t counted, expected;
};
std::vector<FamilyCount> family_counts(const ExecCounters& c, const ExpectedCounts& e) {
  std::vector<FamilyCount> out;
  const auto& registered = family_counters();
  for (size_t i = 0; i < registered.size(); ++i) {
    const auto it = e.family.find(registered[i].name);
    out.push_back({registered[i].name, c.family[i].load(), it == e.family.end() ? 0 : it->second});
  }
  for (const auto& [name, expected] : e.family)
    if (std::none_of(out.begin(), out.end(), [&](const FamilyCount& f) { return f.name == name; }))
      out.push_back({name, 0, expected});
  return out;
}

}  // namespace

bool counters_agree(const ExecCounters& c, const ExpectedCounts& e) {
  const std::vector<FamilyCount> family = family_counts(c, e);
  return c.blocks_executed.load() == e.blocks && double(c.gemm_flops.load()) == e.gemm_flops &&
         double(c.controller_flops.load()) == e.controller_flops && double(c.mixing_flops.load()) == e.mixing_flops &&
         c.controller_evaluations.load() == e.controller_evaluations && c.routed_rows.load() == e.routed_rows &&
         std::all_of(family.begin(), family.end(), [](const FamilyCount& f) { return f.counted == f.expected; });
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
  for (const FamilyCount& f : family_counts(c, e)) compare(f.name.c_str(), double(f.counted), double(f.expected));
  throw Error("execution counters disagree with the graph (" + mode + "): " + diff);
}

nlohmann::ordered_json counter_fields(const ExecCounters& c, const ExpectedCounts& expected, int64_t tokens_per_pass) {
  const double gemm = double(c.gemm_flops.load()), controller = double(c.controller_flops.load()),
               mixing = double(c.mixing_flops.load()), total = gemm + controller + mixing;
  nlohmann::ordered_json j;
  j["executed_blocks"] = c.blocks_executed.load();
  j["controller_evaluations_per_pass"] = c.controller_evaluations.load();
  j["routed_rows_per_pass"] = c.routed_rows.load();
  for (const FamilyCount& f : family_counts(c, expected))
    if (f.counted != 0 || f.expected != 0) j[f.name + "_per_pass"] = f.counted;
  j["gemm_calls_per_pass"] = c.gemm_calls.load();
  j["gflop_per_pass"] = total / 1e9;
  j["gflop_per_token"] = total / 1e9 / double(tokens_per_pass);
  j["gflop_per_pass_by_kind"] = {{"gemm", gemm / 1e9}, {"controller", controller / 1e9}, {"mixing", mixing / 1e9}};
  j["counters_match_graph"] = counters_agree(c, expected);
  return j;
}

}  // namespace fca
