// FLOPs of one MUDD forward pass by formula, under the convention of core/exec_counters.h; exec
// checks them against the counters of every measured pass. docs/exec.md derives them.
#pragma once
#include "models/mudd/config.h"

namespace fca {

// GEMMs: per block the Q, K, V, O projections (8 N D^2), attention over the executed pairs
// (4 B pairs D), the FFN (4 N D F_i); the DA generators' two GEMMs (2 N D H_i + 2 N H_i C_i S_i)
// when they run (`generator`: the live source); the head 2 N D V.
double mudd_gemm_flops(const MuddConfig& c, int B, int T, bool generator);
// The DA generators' non-GEMM arithmetic (RMSNorm, exact GELU, the static bias), live passes only.
double mudd_controller_flops(const MuddConfig& c, int B, int T);
// Calls into controller code in a live pass: one DA generator per block.
int64_t mudd_controller_evaluations(const MuddConfig& c);
// Source mixing: each of C_i streams of each row is D products and (S_i - 1) D multiply-adds.
double mudd_mixing_flops(const MuddConfig& c, int B, int T);

}  // namespace fca
