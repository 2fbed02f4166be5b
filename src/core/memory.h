// How much memory the process may still take, and the error for a run state that would take more.
// Arenas check their bytes here before allocating (core/arena.h), so that a batch too large for the
// machine fails with an Error that the command can turn into one naming its batch flag, instead of
// std::bad_alloc or the kernel's OOM killer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "core/error.h"

namespace fca {

// A byte count that size_t cannot hold: size computations saturate here instead of wrapping.
inline constexpr size_t kUncountableBytes = SIZE_MAX;

inline size_t saturating_add(size_t a, size_t b) {
  size_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? kUncountableBytes : r;
}
inline size_t saturating_mul(size_t a, size_t b) {
  size_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? kUncountableBytes : r;
}

// How an arena's bytes grow with the batch it is sized for: bytes(windows) <= fixed + windows *
// per_window (Arena::for_windows). windows 0: an arena not sized per window.
struct WindowBytes {
  int windows = 0;
  size_t fixed = 0;
  size_t per_window = 0;
  // The largest batch whose bound fits `available` bytes; 0 where not even one window fits or the
  // arena is not sized per window.
  int windows_that_fit(size_t available) const;
};

// An arena that needs more bytes than are available (needed kUncountableBytes: more than size_t
// counts). Commands catch it where a batch flag or setting sized the run state and rethrow an
// Error naming that setting (advice()).
class OutOfMemory : public Error {
 public:
  OutOfMemory(size_t needed, size_t available, const WindowBytes& sizing);
  size_t needed() const { return needed_; }
  size_t available() const { return available_; }
  const WindowBytes& sizing() const { return sizing_; }
  // For "<setting> <value>: " + advice(setting): "the run state of 1000000 windows needs 30.5 GiB,
  // 12.0 GiB available; try <setting> 393216".
  std::string advice(const std::string& setting) const;

 private:
  size_t needed_, available_;
  WindowBytes sizing_;
};

// The bytes this process can still allocate and touch without swapping or being killed: the
// MemAvailable of /proc/meminfo, lowered to the room under each cgroup v2 memory.max from this
// process's cgroup up to the root (containers, Slurm jobs). Without MemAvailable (not Linux, or a
// kernel before 3.14), the physical memory (sysconf): no allocation beyond it can succeed.
size_t available_memory_bytes();
// Throws OutOfMemory unless `bytes` fit available_memory_bytes(); kUncountableBytes never fits.
void check_memory_for(size_t bytes, const WindowBytes& sizing);

// The parts of available_memory_bytes() that read text, for tests. MemAvailable of /proc/meminfo
// in bytes; nullopt without one.
std::optional<size_t> meminfo_available_bytes(const std::string& meminfo);
// The room under one cgroup v2 limit: memory.max - (memory.current - inactive_file of memory.stat),
// page cache the kernel can drop counting as free; 0 where the usage is at the limit. nullopt for
// "max" (no limit) or text that is not a byte count.
std::optional<size_t> cgroup_room_bytes(const std::string& memory_max, const std::string& memory_current,
                                        const std::string& memory_stat);

// Tests: while it lives, available_memory_bytes() returns `bytes` (no file is read). One at a time.
class AvailableMemoryOverride {
 public:
  explicit AvailableMemoryOverride(size_t bytes);
  ~AvailableMemoryOverride();
  AvailableMemoryOverride(const AvailableMemoryOverride&) = delete;
  AvailableMemoryOverride& operator=(const AvailableMemoryOverride&) = delete;
};

}  // namespace fca
