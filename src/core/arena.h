// A bump allocator over one aligned allocation, sized once for its lifetime (a run state, a gradient
// set). Kernels never allocate; they receive pointers carved from an arena.
//
// Sizing without duplication: a layout function is written once as a template over an allocator and
// run twice, first with ArenaMeasure to learn the byte count, then with the real Arena.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/error.h"

namespace fca {

inline constexpr size_t kArenaAlignment = 64;  // one cache line; also AVX-512 alignment

inline size_t arena_round_up(size_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

// Counts the bytes a layout would take; hands out null pointers.
class ArenaMeasure {
 public:
  template <typename T>
  T* take(size_t count) {
    bytes_ += arena_round_up(count * sizeof(T));
    return nullptr;
  }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_ = 0;
};

class Arena {
 public:
  Arena() = default;
  explicit Arena(size_t bytes) : capacity_(bytes) {
    if (bytes == 0) return;
    void* p = std::aligned_alloc(kArenaAlignment, arena_round_up(bytes));
    if (p == nullptr) throw Error("arena: cannot allocate " + std::to_string(bytes) + " bytes");
    base_.reset(static_cast<std::byte*>(p));
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
