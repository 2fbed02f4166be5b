// The audit's conditions on routing records (docs/routed.md, "Routing records and
// the audit"), written over the record kinds, not over model families: expert_routing (experts I and
// weights w per token) and token_selection (a 0/1 selection and weights sigmoid(s) per token).
// Every condition yields an executable routing (k distinct experts per token; exactly K selected
// tokens per window and layer) and is applied only in replay.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "audit/conditions.h"

namespace fca {

struct RoutingProfiles {
  CoefficientTensor layer_position_mean;  // one window: per (layer, position)
  CoefficientTensor static_profile;       // one window: the same record for every window
  // token_selection: per layer, the mean over the calibration windows of the selected tokens'
  // weights (the weight a token that becomes selected takes).
  std::vector<float> mean_selected_weight;
};

// The routing conditions in report order (correct first).
const std::vector<std::string>& routing_condition_names();

// The calibration profiles of docs/routed.md's table. expert_routing: layer_position_mean takes per
// (layer, position) the k experts with the largest mean weight over C (unselected = 0),
// static_profile per layer over C and tokens; their weights are those means, renormalised over the
// k slots when k > 1 (as the model's own routing is; for k = 1 the mean weight itself).
// token_selection: layer_position_mean selects per layer the K positions selected most often over
// C (ties to the lower position) with weight = mean over C of sigmoid(s) at the position;
// static_profile selects the evenly spaced positions floor(j T / K) with mean_selected_weight.
RoutingProfiles routing_profiles(const CoefficientView& calibration);

// Builds a routing condition; throws Error for a name that is not a routing condition.
std::unique_ptr<Condition> make_routing_condition(const std::string& name, const CoefficientView& evaluation,
                                                  const RoutingProfiles& profiles, const AuditRandomness& randomness);

}  // namespace fca
