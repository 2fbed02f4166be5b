// Shared by the libFuzzer targets (make fuzz, docs/building.md): every input either works or gets
// an fca::Error; any other exception, crash, leak, sanitizer report or time-out is a finding.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"

namespace fca::fuzz {

// A folder of this process's own under /tmp (the file-based parsers take paths).
inline const std::string& work_dir() {
  static const std::string dir = [] {
    const std::string d = "/tmp/fca-fuzz-" + std::to_string(::getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
}

// Runs f; an fca::Error is the expected answer to bad input, anything else propagates.
template <typename F>
void expect_ok_or_error(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}

}  // namespace fca::fuzz
