// Provenance recorded in every result file: fca version and git commit, machine, threads, time.
// Callers add model and data content hashes and seeds.
#pragma once
#include "core/json.h"
#include <string>

namespace fca {

nlohmann::ordered_json provenance_base();
std::string fca_version_string();  // "fca 0.1.0 (commit abc123...)"
// What the build's numerics depend on: compiler, the instruction sets it targeted and the flags,
// the SIMD target the kernels dispatch to and the OpenBLAS kernels GEMM runs, e.g. "g++ 12.2.0;
// x86-64; -O3 -DNDEBUG -ffp-contract=off; simd AVX3; OpenBLAS 0.3.21 SkylakeX (...)". Two runs
// with the same description round every kernel the same way.
std::string build_description();

}  // namespace fca
