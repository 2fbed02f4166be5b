// safetensors files: an 8-byte little-endian header length N, N bytes of JSON header
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}), then the data.
// Reading memory-maps the file and checks the header against the file length, every tensor's
// offsets, dtype and byte count before any tensor is used. Writing emits F32 and renames into place.
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/file_io.h"

namespace fca {

enum class DType { F32, F16, BF16, F64, I64, I32, U8 };
const char* dtype_name(DType d);
size_t dtype_size(DType d);

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const unsigned char* data;  // inside the mapped file
  size_t nbytes;
  int64_t numel() const;
};

std::string shape_string(const std::vector<int64_t>& shape);

class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  // A document held in memory (a protocol message); `name` stands for the path in errors.
  SafetensorsReader(std::string bytes, const std::string& name);

  const std::string& path() const { return name_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws Error("<file>: tensor '<name>' is missing") when absent.
  const TensorInfo& get(const std::string& name) const;
  // Copies a floating-point tensor (F32, F16, BF16 or F64) into `out` as T, after checking that its
  // shape is `expected_shape`; the error names the file, tensor, expected and found shape.
  template <typename T>
  void read_into(const std::string& name, const std::vector<int64_t>& expected_shape, T* out) const;
  // Reads a floating-point or integer tensor of any shape as doubles (tests, small tensors).
  std::vector<double> read_as_double(const std::string& name) const;

 private:
  std::unique_ptr<MappedFile> file_;  // null for a document in memory
  std::string buffer_;                 // the document in memory
  std::string name_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, TensorInfo> tensors_;
};

// One tensor to write: F32 (or F64, I32, U8) data of the given shape; the pointer must stay valid during the
// write (it may be null for SafetensorsStreamWriter, which takes the data later).
struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const void* data;
  DType dtype = DType::F32;
};

// One safetensors document in memory (F32, F64, I32 or U8 tensors, in the order given).
std::string encode_safetensors(const std::vector<TensorToWrite>& tensors, const std::map<std::string, std::string>& metadata);

// Writes a safetensors file atomically; tensors are laid out in the order given.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata);

// Writes a safetensors file whose tensors arrive piece by piece (data larger than memory): the
// header is written first from the declared shapes, then append() must deliver every tensor's bytes
// in declaration order, then commit() renames the temporary file into place. Destroyed without
// commit(), it removes the temporary file: a path never holds a partial file.
class SafetensorsStreamWriter {
 public:
  SafetensorsStreamWriter(const std::string& path, const std::vector<TensorToWrite>& tensors,
                          const std::map<std::string, std::string>& metadata);
  ~SafetensorsStreamWriter();
  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  SafetensorsStreamWriter& operator=(const SafetensorsStreamWriter&) = delete;
  void append(const void* data, size_t bytes);
  void commit();

 private:
  std::string path_, tmp_;
  std::FILE* file_ = nullptr;
  uint64_t expected_bytes_ = 0, written_bytes_ = 0;
};

}  // namespace fca
