// Operations on controller records that do not depend on the model family: validation, the dense
// view the variance decomposition runs on, expert load / selection frequency, and exit depths. Each
// is its kind's row of the record-kind table (models/record_kind.h).
#pragma once
#include <string>
#include <vector>

#include "models/coefficient_tensor.h"

namespace fca {

// Throws Error naming `where`, the window, layer and token when a record cannot be executed:
// expert_routing: an index outside [0, E) or repeated within a token; token_selection: a flag other
// than 0/1, or a (window, layer) whose selected count is not K; exit_depth: check_exit_record. Continuous tensors pass.
void check_routing_records(const CoefficientView& records, const std::string& where);

// exit_depth, one window's continued flags [L-1][T]: each 0 or 1, 1 below s.min_exit, non-increasing
// in the exit point; throws Error naming `where`, the exit point and the token.
void check_exit_record(const int32_t* continued, const CoefficientShape& s, const std::string& where);

// exit_depth: d_t of window w of a record, [T]; and depths [T] written as window `slot` of `out`:
// c and the absorbing fill.
std::vector<int> exit_depths(const CoefficientView& records, int window);
void write_exit_depths(CoefficientTensor& out, int slot, const std::vector<int>& depths);

// expert_routing: the dense E-vector of weights per token, zeros where unselected, as a
// continuous tensor [L, T, 1, E] per window. token_selection: the weights sigmoid(s) unchanged.
// exit_depth: the continued flags c as 0/1 floats [L-1, T, 1, 1].
CoefficientTensor routing_weights_dense(const CoefficientView& records);

// expert_routing: [layer][expert] share of the (token, slot) assignments; token_selection:
// [layer][position] share of the windows that select the position.
std::vector<std::vector<double>> routing_load(const CoefficientView& records);

}  // namespace fca
