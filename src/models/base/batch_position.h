// The shared base of every model family (src/models/base/): the rows of one forward pass, the
// preamble every family's forward pass starts with, and the one way controller code counts its
// evaluations.
#pragma once
#include <atomic>
#include <cstdint>

#include "core/exec_counters.h"
#include "ops/attention.h"

namespace fca {

// The rows of one forward pass: windows first_window .. first_window + batch - 1, tokens each,
// and the run's count of controller evaluations (owned by its run state).
struct BatchPosition {
  int first_window = 0;
  int batch = 1;
  int tokens = 0;
  int64_t* controller_evaluations = nullptr;
};

// Counts one evaluation of controller code: called from inside the controller functions
// themselves (featuregate's features and gate, MUDD's coefficient generator, the MoE and MoD
// routers), never by a coefficient source, so that a replay reaching the controller by any path
// shows up in the run's count (and in the execution counters, when installed).
inline void count_controller_evaluation(const BatchPosition& batch) {
  if (batch.controller_evaluations != nullptr) ++*batch.controller_evaluations;
  if (ExecCounters* c = exec_counters()) c->controller_evaluations.fetch_add(1, std::memory_order_relaxed);
}

// Throws Error unless a batch of B windows of Tn tokens fits the model (positions) and the run state.
void check_batch_fits(int B, int Tn, int model_positions, int max_batch, int max_tokens);

// The preamble of every family's forward pass over B windows of Tn tokens (windows first_window ..
// first_window + B - 1): the batch must fit the model and the run state, the attention scratch the
// thread count; the run state records the pass's shape. Returns the pass's BatchPosition, whose
// controller evaluations are counted in the run state.
template <typename RunState>
BatchPosition begin_pass(RunState& rs, int B, int Tn, int model_positions, int first_window) {
  check_batch_fits(B, Tn, model_positions, rs.max_batch, rs.max_tokens);
  check_attention_scratch_threads(rs.scratch_threads);
  rs.batch = B;
  rs.tokens = Tn;
  return BatchPosition{first_window, B, Tn, &rs.controller_evaluations};
}

}  // namespace fca
