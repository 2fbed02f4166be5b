// The counters a counted pass of an exit model must show, from its depth record's figures
// (models/exit/figures.h): exec's check of every mode.
#pragma once
#include "exec/counted_pass.h"
#include "models/exit/figures.h"

namespace fca {

inline ExpectedCounts exit_expected_counts(const ExitPassFigures& f) {
  ExpectedCounts e;
  e.blocks = f.blocks;
  e.gemm_flops = f.gemm();
  e.controller_flops = f.controller;
  e.mixing_flops = 0;
  e.controller_evaluations = f.controller_evaluations;
  for (int64_t a : f.active) e.routed_rows += a;
  int64_t& propagated = e.family[kPropagatedRows];
  for (int64_t p : f.propagated) propagated += p;
  return e;
}

}  // namespace fca
