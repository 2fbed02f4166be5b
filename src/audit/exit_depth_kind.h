// The audit's conditions on exit-depth records (docs/exit.md, "Exact rules"), written over the record kind
// exit_depth (continued flags c_{k,t}, depth d_t = 1 + sum_k c_{k,t}), never over a model family.
// A token's whole depth moves as one unit; every condition writes an executable, monotone record
// (c_{k,t} = [d_t > k], score = the absorbing fill 1 - c) and is applied only in replay.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "audit/conditions.h"
#include "models/routing_record.h"

namespace fca {

struct ExitProfiles {
  CoefficientTensor position_depth;   // one window: PositionDepth (layer_position_mean)
  CoefficientTensor depth_histogram;  // one window: DepthHistogram (static_profile)
  double mean_depth = 0;              // MeanDepth's d-bar (structure_removed), over C and tokens
};

// The conditions in report order (correct first). Which are randomised, which are skipped and why,
// and the profiles' JSON: the kind's row (exit_depth_audit_kind, audit_kind.h).
const std::vector<std::string>& exit_condition_names();

// exit_depths and write_exit_depths: models/routing_record.h.

// PositionDepth and DepthHistogram by the exact integer rules of docs/exit.md, and MeanDepth's d-bar.
ExitProfiles exit_profiles(const CoefficientView& calibration);

// Builds an exit condition; throws Error for a name that is not one.
std::unique_ptr<Condition> make_exit_condition(const std::string& name, const CoefficientView& evaluation,
                                               const ExitProfiles& profiles, const AuditRandomness& randomness);

}  // namespace fca
