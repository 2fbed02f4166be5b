#include "core/memory.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fca {
namespace {

std::optional<size_t> override_bytes;  // AvailableMemoryOverride's figure

std::string memory_text(size_t bytes) {
  if (bytes == kUncountableBytes) return "2^64 bytes or more";
  constexpr double kMiB = 1024.0 * 1024.0, kGiB = 1024.0 * kMiB;
  char text[64];
  if (double(bytes) >= kGiB) std::snprintf(text, sizeof text, "%.1f GiB", double(bytes) / kGiB);
  else std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / kMiB);
  return text;
}

std::string describe(size_t needed, size_t available, const WindowBytes& sizing) {
  const std::string what = sizing.windows > 0 ? "the run state of " + std::to_string(sizing.windows) +
                                                    (sizing.windows == 1 ? " window" : " windows")
                                              : "an arena";
  return what + " needs " + memory_text(needed) + ", " + memory_text(available) + " available";
}

// The whole text of a file ("" where it cannot be read: /proc and /sys files report size 0, so
// they are read to the end rather than by their size).
std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  return text.str();
}

// A byte count: decimal digits with optional surrounding white space.
std::optional<size_t> parse_bytes(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\n");
  if (first == std::string::npos) return std::nullopt;
  const size_t last = text.find_last_not_of(" \t\n") + 1;
  size_t v = 0;
  const auto [p, ec] = std::from_chars(text.data() + first, text.data() + last, v);
  if (ec != std::errc() || p != text.data() + last) return std::nullopt;
  return v;
}

// The value of a "key value" line (memory.stat) or "Key:   value kB" line (/proc/meminfo).
std::optional<size_t> field(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.compare(0, key.size(), key) != 0) continue;
    std::istringstream rest(line.substr(key.size()));
    std::string number;
    rest >> number;
    return parse_bytes(number);
  }
  return std::nullopt;
}

}  // namespace

int WindowBytes::windows_that_fit(size_t available) const {
  if (windows == 0 || per_window == 0 || fixed >= available) return 0;
  return int(std::min<size_t>((available - fixed) / per_window, INT_MAX));
}

OutOfMemory::OutOfMemory(size_t needed, size_t available, const WindowBytes& sizing)
    : Error(describe(needed, available, sizing)), needed_(needed), available_(available), sizing_(sizing) {}

std::string OutOfMemory::advice(const std::string& setting) const {
  const std::string base = describe(needed_, available_, sizing_);
  if (sizing_.windows == 0) return base;
  const int fit = sizing_.windows_that_fit(available_);
  if (fit > 0) return base + "; try " + setting + " " + std::to_string(fit);
  return base + "; not even " + setting + " 1 fits (one window needs " +
         memory_text(saturating_add(sizing_.fixed, sizing_.per_window)) + ")";
}

std::optional<size_t> meminfo_available_bytes(const std::string& meminfo) {
  const std::optional<size_t> kib = field(meminfo, "MemAvailable:");
  if (!kib) return std::nullopt;
  return saturating_mul(*kib, 1024);  // /proc/meminfo counts in kB, meaning KiB
}

std::optional<size_t> cgroup_room_bytes(const std::string& memory_max, const std::string& memory_current,
                                        const std::string& memory_stat) {
  const std::optional<size_t> limit = parse_bytes(memory_max), current = parse_bytes(memory_current);
  if (!limit || !current) return std::nullopt;  // "max": no limit at this level
  const size_t used = *current - std::min(*current, field(memory_stat, "inactive_file").value_or(0));
  return *limit > used ? *limit - used : 0;
}

size_t available_memory_bytes() {
  if (override_bytes) return *override_bytes;
  size_t available = kUncountableBytes;
  if (const std::optional<size_t> meminfo = meminfo_available_bytes(read_text("/proc/meminfo"))) {
    available = *meminfo;
  } else {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) available = saturating_mul(size_t(pages), size_t(page));
  }
  // cgroup v2 names this process's group in the line "0::<path>"; a limit at any level above it
  // applies too.
  std::istringstream groups(read_text("/proc/self/cgroup"));
  for (std::string line; std::getline(groups, line);) {
    if (line.compare(0, 3, "0::") != 0) continue;
    std::filesystem::path dir = "/sys/fs/cgroup";
    auto lower_to_room = [&] {
      const std::optional<size_t> room = cgroup_room_bytes(read_text(dir / "memory.max"), read_text(dir / "memory.current"),
                                                           read_text(dir / "memory.stat"));
      if (room) available = std::min(available, *room);
    };
    lower_to_room();
    for (const auto& part : std::filesystem::path(line.substr(3)).relative_path()) {
      dir /= part;
      lower_to_room();
    }
  }
  return available;
}

void check_memory_for(size_t bytes, const WindowBytes& sizing) {
  const size_t available = available_memory_bytes();
  if (bytes == kUncountableBytes || bytes > available) throw OutOfMemory(bytes, available, sizing);
}

AvailableMemoryOverride::AvailableMemoryOverride(size_t bytes) {
  if (override_bytes) throw Error("AvailableMemoryOverride: one is already in place");
  override_bytes = bytes;
}

AvailableMemoryOverride::~AvailableMemoryOverride() { override_bytes.reset(); }

}  // namespace fca
