#include "core/phase_timer.h"

#include <omp.h>

namespace fca {
namespace {
thread_local PhaseScope* innermost = nullptr;
}

PhaseScope::PhaseScope(Phase phase) : phase_(phase) {
  PhaseTimes* times = detail::installed_phase_times.load(std::memory_order_relaxed);
  if (times == nullptr || omp_in_parallel()) return;
  times_ = times;
  start_ = std::chrono::steady_clock::now();
  parent_ = innermost;
  if (parent_ != nullptr) {  // the parent's time stops while this scope runs
    parent_->times_->seconds[size_t(parent_->phase_)] += std::chrono::duration<double>(start_ - parent_->start_).count();
  }
  innermost = this;
}

PhaseScope::~PhaseScope() {
  if (times_ == nullptr) return;
  const auto now = std::chrono::steady_clock::now();
  times_->seconds[size_t(phase_)] += std::chrono::duration<double>(now - start_).count();
  if (parent_ != nullptr) parent_->start_ = now;
  innermost = parent_;
}

}  // namespace fca
