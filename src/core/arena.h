// A bump allocator over one aligned allocation, sized once for its lifetime (a run state, a gradient
// set). Kernels never allocate; they receive pointers carved from an arena.
//
// Sizing without duplication: a layout function is written once as a template over an allocator and
// run first with ArenaMeasure to learn the byte count, then with the real Arena.
//
// Sizing for a batch: a run state's layout takes the number of windows, and Arena::for_windows
// checks the bytes that batch needs against the memory available (core/memory.h) before the layout
// runs at it, so that a batch too large for the machine (or for size_t) throws OutOfMemory rather
// than std::bad_alloc, an OOM kill or a wrapped size.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/memory.h"

namespace fca {

inline constexpr size_t kArenaAlignment = 64;  // one cache line; also AVX-512 alignment

inline size_t arena_round_up(size_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

// Counts the bytes a layout would take; hands out null pointers. Every sum and product saturates at
// kUncountableBytes, so that a layout too large for size_t measures as uncountable, never as small.
class ArenaMeasure {
 public:
  template <typename T>
  T* take(size_t count) {
    const size_t bytes = saturating_mul(count, sizeof(T));
    bytes_ = saturating_add(bytes_, bytes > kUncountableBytes - kArenaAlignment ? kUncountableBytes : arena_round_up(bytes));
    unpadded_ = saturating_add(unpadded_, bytes);
    ++takes_;
    return nullptr;
  }
  size_t bytes() const { return bytes_; }  // what the arena allocates: each take rounded up
  size_t unpadded() const { return unpadded_; }
  size_t takes() const { return takes_; }

 private:
  size_t bytes_ = 0, unpadded_ = 0, takes_ = 0;
};

class Arena {
 public:
  Arena() = default;
  // Throws OutOfMemory (carrying `sizing`) when `bytes` exceed the memory available or cannot be
  // allocated.
  explicit Arena(size_t bytes, const WindowBytes& sizing = {}) : capacity_(bytes) {
    if (bytes == 0) return;
    check_memory_for(bytes, sizing);
    void* p = std::aligned_alloc(kArenaAlignment, arena_round_up(bytes));
    if (p == nullptr) throw OutOfMemory(bytes, available_memory_bytes(), sizing);
    base_.reset(static_cast<std::byte*>(p));
  }

  // The arena of a layout for `windows` windows, carved: layout(a, w) takes the buffers of w windows
  // from `a` (an ArenaMeasure or this Arena). The unpadded bytes are affine in the windows (every
  // buffer is a constant plus a multiple of them), so layouts at 1 and 2 windows give the bound
  // fixed + windows * per_window (with each take's padding, < kArenaAlignment, in fixed), computed
  // with saturating arithmetic: a batch over the memory available throws OutOfMemory before the
  // layout's own products (int64 element counts) run at it, where they could overflow. A layout
  // must therefore compute no product larger than a buffer it takes.
  template <typename Layout>
  static Arena for_windows(int windows, const Layout& layout) {
    // 0 windows: an empty run state (a model opened before its batch is chosen, e.g. by the probe).
    if (windows < 0) throw Error("arena: a run state needs 0 or more windows, found " + std::to_string(windows));
    ArenaMeasure one, two;
    layout(one, 1);
    layout(two, 2);
    WindowBytes sizing{windows, 0, 0};
    sizing.per_window = two.unpadded() == kUncountableBytes ? kUncountableBytes : two.unpadded() - one.unpadded();
    sizing.fixed = saturating_add(one.unpadded() - std::min(one.unpadded(), sizing.per_window),
                                  saturating_mul(one.takes(), kArenaAlignment - 1));
    check_memory_for(saturating_add(sizing.fixed, saturating_mul(size_t(windows), sizing.per_window)), sizing);
    ArenaMeasure exact;
    layout(exact, windows);
    if (exact.takes() != one.takes() ||
        exact.unpadded() + sizing.per_window != one.unpadded() + size_t(windows) * sizing.per_window)
      throw Error("arena: a layout's bytes are not affine in its windows (Arena::for_windows cannot bound them)");
    Arena arena(exact.bytes(), sizing);
    layout(arena, windows);
    return arena;
  }

  // Zero-initialised storage for `count` elements of T.
  template <typename T>
  T* take(size_t count) {
    const size_t bytes = arena_round_up(count * sizeof(T));
    if (used_ + bytes > capacity_)
      throw Error("arena: layout needs more than the " + std::to_string(capacity_) + " bytes measured");
    std::byte* p = base_.get() + used_;
    used_ += bytes;
    std::fill(p, p + bytes, std::byte{0});
    return reinterpret_cast<T*>(p);
  }
  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }

 private:
  struct FreeDeleter {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, FreeDeleter> base_;
  size_t capacity_ = 0;
  size_t used_ = 0;
};

}  // namespace fca
