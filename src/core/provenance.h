// Provenance recorded in every result file: fca version and git commit, machine, threads, time.
// Callers add model and data content hashes and seeds.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace fca {

nlohmann::ordered_json provenance_base();
std::string fca_version_string();  // "fca 0.1.0 (commit abc123...)"

}  // namespace fca
