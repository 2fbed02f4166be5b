// Provenance recorded in every result file: fca version and git commit, machine, threads, time.
// Callers add model and data content hashes and seeds.
#pragma once
#include "core/json.h"
#include <string>

namespace fca {

nlohmann::ordered_json provenance_base();
std::string fca_version_string();  // "fca 0.1.0 (commit abc123...)"
// What the build's numerics depend on: compiler, the instruction sets it targeted and the flags,
// e.g. "g++ 12.2.0; x86-64 sse4.2 avx avx2 fma; -O3 -DNDEBUG -march=native -ffp-contract=off".
// Two builds with the same description round every fca kernel the same way (OpenBLAS picks its
// kernels at run time from the CPU, which provenance records separately).
std::string build_description();

}  // namespace fca
