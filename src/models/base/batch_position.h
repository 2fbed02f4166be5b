// The shared base of every model family (src/models/base/): the rows of one forward pass, and the
// one way controller code counts its evaluations.
#pragma once
#include <atomic>
#include <cstdint>

#include "core/exec_counters.h"

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

}  // namespace fca
