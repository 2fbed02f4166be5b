// Threading: OpenMP for our kernels and the OpenMP build of OpenBLAS for GEMM, one thread count for
// both. Kernels split work into fixed units by index, each unit computed start to end by one
// thread, so that results depend only on the units, never on which thread computes which.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>

namespace fca {

// Sets the thread count for OpenMP regions and OpenBLAS. n <= 0 means "all cores".
void set_threads(int n);
int thread_count();

// Units 0 .. units - 1 of one parallel loop, each thread starting with an equal run of consecutive
// units (the static split: a thread's units are the rows it wrote in the previous loop, in its
// cache) and, once its run is done, taking the units other threads have not started from the end
// of their runs. On two cores of a shared machine one core is often slower for a while; with a
// static split the other then waits at the join (up to 17% of its time in an audit). Use it only
// where a unit's results do not depend on the thread that computes it. A run is one atomic word
// (front << 32 | back): the owner takes from the front, others from the back, each by a
// compare-and-swap, so every unit is taken exactly once, also by a team smaller than `threads`
// (a call inside a parallel region runs in a team of one where nested parallelism is off, OpenMP's
// default, and that thread then takes every run; per-thread scratch indexed by the thread number
// is then shared by the outer threads, so such callers need their own scratch).
class UnitRuns {
 public:
  explicit UnitRuns(int threads) : threads_(threads), runs_(new Run[size_t(threads)]) {}
  int threads() const { return threads_; }
  // Splits units 0 .. units - 1 (units >= 0, else an Error) into the threads' runs; call outside
  // the parallel region.
  void reset(int units);
  // The next unit for thread `me`: its own first, then those left in the other runs.
  bool next(int me, int& unit);

 private:
  bool take(int run, bool from_front, int& unit);
  // One cache line per run: the owner's compare-and-swaps stay in its own core's cache until
  // another thread comes to take units.
  struct alignas(64) Run {
    std::atomic<uint64_t> bounds;
  };
  int threads_;
  std::unique_ptr<Run[]> runs_;
};

// Inside a parallel region of at most runs.threads() threads: fn(unit) for every unit the calling
// thread takes.
template <typename Fn>
void run_units(UnitRuns& runs, int me, Fn&& fn) {
  for (int unit = 0; runs.next(me, unit);) fn(unit);
}

}  // namespace fca
