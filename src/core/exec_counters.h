// Execution counters, incremented where the work happens (GEMM calls, executed blocks, controller
// evaluations), so that "what ran" is measured rather than derived from a config. Off by default:
// with no counters installed, instrumented code pays one pointer test per GEMM call or block.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

namespace fca {

// FLOP convention (docs/exec.md, "FLOPs"): a GEMM is 2 M N K. Beyond GEMMs, the arithmetic of
// controllers (everything computed only to produce coefficients or routes: attention statistics,
// features, gates, router softmax and scores, MUDD's coefficient generator) and of mixing (applying
// them: gate products, MUDD's source mixing, expert combination, MoD's weighted scatter) is counted,
// each add, subtract, multiply, divide and elementary function (exp, log, sqrt, erf, tanh) as 1;
// comparisons, selection, sorting and copies as 0. The trunk's own element-wise work (LayerNorm,
// softmax, GELU, residual adds, RoPE, loss) is not counted: it is the same in every mode.
struct ExecCounters {
  std::atomic<int64_t> gemm_flops{0};              // 2 * M * N * K per matrix product issued
  std::atomic<int64_t> controller_flops{0};        // controller arithmetic by the convention above, and the
                                                   // GEMMs issued under a ControllerGemms guard
  std::atomic<int64_t> mixing_flops{0};            // non-GEMM arithmetic applying coefficients
  std::atomic<int64_t> gemm_calls{0};
  std::atomic<int64_t> blocks_executed{0};         // transformer blocks run
  std::atomic<int64_t> controller_evaluations{0};  // controller calls (one per layer per pass)
  std::atomic<int64_t> routed_rows{0};  // rows a routed computation ran: expert rows (MoE), selected tokens (MoD)
  // The counters families declare for work only they do (exit's propagated_rows), by the index
  // family_counter_index gives their names.
  std::array<std::atomic<int64_t>, 8> family{};
  void reset() {
    routed_rows = 0;
    for (auto& c : family) c = 0;
    gemm_flops = 0;
    controller_flops = 0;
    mixing_flops = 0;
    gemm_calls = 0;
    blocks_executed = 0;
    controller_evaluations = 0;
  }
};

namespace detail {
inline std::atomic<ExecCounters*> installed_counters{nullptr};
}

// A counter a family declares (exec/exec_family.h's ExecFamily::counters): its name, the key
// "<name>_per_pass" of exec.json's modes, and what it counts, the line exec.md prints beside it.
struct FamilyCounter {
  std::string name;         // "propagated_rows"
  std::string description;  // "K/V rows projected for exited tokens (docs/exit.md)"
};
// Registers a family's counter once at start-up (add_exec_family does); refuses a name taken by
// another description, and more counters than ExecCounters::family holds. Not thread-safe.
void add_family_counter(const FamilyCounter& counter);
// The registered counters in registration order, and one's index into ExecCounters::family (Error
// naming the registered ones when `name` is not among them).
const std::vector<FamilyCounter>& family_counters();
int family_counter_index(const std::string& name);

// The installed counters, or null when counting is off.
inline ExecCounters* exec_counters() { return detail::installed_counters.load(std::memory_order_relaxed); }

// Called once per kernel call by the code doing the work, with that call's count in closed form.
// Matrix products: the BLAS calls of ops/gemm.cpp (one product each) and attention's tiled
// products (ops/attention.cpp: two per window and head, whatever the tiling).
namespace detail {
inline thread_local bool controller_gemms = false;
}
// Matrix products issued on this thread while a ControllerGemms guard lives are the controller's:
// their FLOPs go to controller_flops (still one GEMM call each), so that a controller built on GEMMs
// (the hyper family's DHC and mHC projections) is its own row, as docs/hyper.md's FLOP formulas have it.
class ControllerGemms {
 public:
  ControllerGemms() : previous_(detail::controller_gemms) { detail::controller_gemms = true; }
  ~ControllerGemms() { detail::controller_gemms = previous_; }
  ControllerGemms(const ControllerGemms&) = delete;
  ControllerGemms& operator=(const ControllerGemms&) = delete;

 private:
  bool previous_;
};
inline void count_gemm_flops(int64_t flops, int64_t products) {
  if (ExecCounters* c = exec_counters()) {
    (detail::controller_gemms ? c->controller_flops : c->gemm_flops).fetch_add(flops, std::memory_order_relaxed);
    c->gemm_calls.fetch_add(products, std::memory_order_relaxed);
  }
}
inline void count_controller_flops(int64_t flops) {
  if (ExecCounters* c = exec_counters()) c->controller_flops.fetch_add(flops, std::memory_order_relaxed);
}
inline void count_mixing_flops(int64_t flops) {
  if (ExecCounters* c = exec_counters()) c->mixing_flops.fetch_add(flops, std::memory_order_relaxed);
}
// Adds `n` to the family counter `name` (looked up only while counting is on).
inline void count_family(const char* name, int64_t n) {
  if (ExecCounters* c = exec_counters()) c->family[size_t(family_counter_index(name))].fetch_add(n, std::memory_order_relaxed);
}

// Installs counters for the lifetime of the guard. Scopes do not nest: a second scope while one is
// installed throws (it would take the counts from the first and end its counting when it closes).
class CountingScope {
 public:
  explicit CountingScope(ExecCounters& c) {
    ExecCounters* none = nullptr;
    if (!detail::installed_counters.compare_exchange_strong(none, &c))
      throw Error("execution counters are already installed: counting scopes do not nest");
  }
  ~CountingScope() { detail::installed_counters.store(nullptr); }
  CountingScope(const CountingScope&) = delete;
  CountingScope& operator=(const CountingScope&) = delete;
};

}  // namespace fca
