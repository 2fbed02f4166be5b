// SHA-256 (FIPS 180-4), for the content hashes recorded in provenance and cache manifests.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace fca {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  std::string hex_digest();  // finalises; lowercase hex, 64 characters

 private:
  void compress(const uint8_t* block);
  uint32_t h_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string sha256_hex(const void* data, size_t bytes);
// Hash of a whole file's bytes; throws Error naming the file when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace fca
