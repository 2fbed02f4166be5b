// Files: read-only memory maps, and writes that never leave a half-written file behind (write to a
// temporary name in the same folder, then rename over the target).
#pragma once
#include <cstddef>
#include <functional>
#include <ostream>
#include <string>

namespace fca {

class MappedFile {
 public:
  // Maps `path` read-only; throws Error naming the file when it is missing or unreadable.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

// Calls write(stream) on "<path>.tmp.<pid>", flushes, and renames it to `path`. On any failure the
// temporary file is removed and Error is thrown; `path` is either the old file or the complete new one.
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write);

// fsync of a file or folder (a folder: its entries, e.g. after a rename); throws Error on failure.
void sync_to_disk(const std::string& path);
// The folder part of a path ("." when it has none).
std::string parent_folder(const std::string& path);

// Makes sure `path` is a folder that exists, creating it and its parents where missing. `what`
// names it in errors (a flag, "--out"): "--out notadir: exists and is not a folder". Never
// throws anything but Error.
void ensure_folder(const std::string& path, const std::string& what);
// Makes sure a file can be written at `path`: it is not a folder, and its parent folder exists
// (created where missing). `what` names it in errors.
void ensure_file_destination(const std::string& path, const std::string& what);

bool file_exists(const std::string& path);
bool is_directory(const std::string& path);

}  // namespace fca
