// `fca exec` for the hyper-connection family (docs/hyper.md, "Execution"): every
// sub-block always runs, so the question is what the n streams cost. Modes: live (the controller
// computes each site's square), replay (the recorded squares, controller off), cross_input (another
// window's squares), identity_mixing (the identity squares of docs/hyper.md: plain Pre-Norm through the
// stream machinery) and dense_same_shape. The stream mixing and the controller are counted as their
// own FLOP rows and checked against the formulas below.
#pragma once
#include "exec/exec_family.h"
#include "models/hyper/config.h"

namespace fca {

// The family's entry in the exec layer's family table.
ExecFamily hyper_exec_family();

// FLOPs per forward pass over B windows of T tokens, by the family's formulas (never from counters):
// the trunk's GEMMs and head; the mixing (read, write and mix at every site, the final collapse); the
// live controller (SHC 0; DHC and mHC their projection GEMMs plus the element-wise work).
double hyper_gemm_flops(const HyperConfig& config, int B, int T);
double hyper_mixing_flops(const HyperConfig& config, int B, int T);
double hyper_controller_flops(const HyperConfig& config, int B, int T);

}  // namespace fca
