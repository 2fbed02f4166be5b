#include "core/threads.h"

#include <cblas.h>
#include <omp.h>

#include <string>

#include "core/error.h"

namespace fca {

void set_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int thread_count() { return omp_get_max_threads(); }

void UnitRuns::reset(int units) {
  if (units < 0) throw Error("UnitRuns: a negative unit count, " + std::to_string(units));
  for (int t = 0; t < threads_; ++t) {
    const uint64_t first = uint64_t(int64_t(units) * t / threads_), last = uint64_t(int64_t(units) * (t + 1) / threads_);
    runs_[t].bounds.store(first << 32 | last, std::memory_order_relaxed);
  }
}

bool UnitRuns::take(int run, bool from_front, int& unit) {
  uint64_t v = runs_[run].bounds.load(std::memory_order_relaxed);
  for (;;) {
    const uint32_t front = uint32_t(v >> 32), back = uint32_t(v);
    if (front >= back) return false;
    const uint64_t next = from_front ? (uint64_t(front + 1) << 32 | back) : (uint64_t(front) << 32 | (back - 1));
    // Relaxed: the word only hands out indices; what a unit writes is published by the region's
    // closing barrier.
    if (runs_[run].bounds.compare_exchange_weak(v, next, std::memory_order_relaxed)) {
      unit = int(from_front ? front : back - 1);
      return true;
    }
  }
}

bool UnitRuns::next(int me, int& unit) {
  for (int v = 0; v < threads_; ++v)
    if (take((me + v) % threads_, v == 0, unit)) return true;
  return false;
}

}  // namespace fca
