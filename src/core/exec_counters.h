// Execution counters, incremented where the work happens (GEMM calls, executed blocks, controller
// evaluations), so that "what ran" is measured rather than derived from a config. Off by default:
// with no counters installed, instrumented code pays one pointer test per GEMM call or block.
#pragma once
#include <atomic>
#include <cstdint>

namespace fca {

struct ExecCounters {
  std::atomic<int64_t> gemm_flops{0};              // 2 * M * N * K per GEMM issued
  std::atomic<int64_t> gemm_calls{0};
  std::atomic<int64_t> blocks_executed{0};         // transformer blocks run
  std::atomic<int64_t> controller_evaluations{0};  // controller calls (one per layer per pass)
  std::atomic<int64_t> routed_rows{0};  // rows a routed computation ran: expert rows (MoE), selected tokens (MoD)
  void reset() {
    routed_rows = 0;
    gemm_flops = 0;
    gemm_calls = 0;
    blocks_executed = 0;
    controller_evaluations = 0;
  }
};

namespace detail {
inline std::atomic<ExecCounters*> installed_counters{nullptr};
}

// The installed counters, or null when counting is off.
inline ExecCounters* exec_counters() { return detail::installed_counters.load(std::memory_order_relaxed); }

// Installs counters for the lifetime of the guard (not nested).
class CountingScope {
 public:
  explicit CountingScope(ExecCounters& c) { detail::installed_counters.store(&c); }
  ~CountingScope() { detail::installed_counters.store(nullptr); }
  CountingScope(const CountingScope&) = delete;
  CountingScope& operator=(const CountingScope&) = delete;
};

}  // namespace fca
