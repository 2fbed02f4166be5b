// Where the time of a pass goes, without a profiler: kernels open a PhaseScope naming their kind
// (GEMM, attention, element-wise, controller, optimizer), and while a PhaseTiming is installed each
// scope adds its exclusive wall time (time in a nested scope counts for the nested one) to its
// phase. Scopes opened inside an OpenMP parallel region do nothing (the GEMMs inside attention count
// as attention); with no PhaseTiming installed, a scope costs one pointer test. `fca bench` reports
// the result; nothing else reads it.
#pragma once
#include <array>
#include <atomic>
#include <chrono>

namespace fca {

enum class Phase : int { gemm, attention, elementwise, controller, optimizer };
inline constexpr int kPhaseCount = 5;
inline constexpr const char* kPhaseNames[kPhaseCount] = {"gemm", "attention", "elementwise", "controller", "optimizer"};

struct PhaseTimes {
  std::array<double, kPhaseCount> seconds{};
};

namespace detail {
inline std::atomic<PhaseTimes*> installed_phase_times{nullptr};
}

class PhaseScope {
 public:
  explicit PhaseScope(Phase phase);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  PhaseTimes* times_ = nullptr;  // null: not timing
  Phase phase_;
  PhaseScope* parent_ = nullptr;
  std::chrono::steady_clock::time_point start_;
};

// Installs `times` for its lifetime (not nested; one thread opens the timed scopes).
class PhaseTiming {
 public:
  explicit PhaseTiming(PhaseTimes& times) { detail::installed_phase_times.store(&times); }
  ~PhaseTiming() { detail::installed_phase_times.store(nullptr); }
  PhaseTiming(const PhaseTiming&) = delete;
  PhaseTiming& operator=(const PhaseTiming&) = delete;
};

}  // namespace fca
