#include "core/safetensors.h"

#include <unistd.h>

#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "core/json.h"

namespace fca {
namespace {

DType parse_dtype(const std::string& file, const std::string& tensor, const std::string& s) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  if (s == "F64") return DType::F64;
  if (s == "I64") return DType::I64;
  if (s == "I32") return DType::I32;
  if (s == "U8") return DType::U8;
  throw Error(file + ": tensor '" + tensor + "' has unsupported dtype " + s +
              " (expected F32, F16, BF16, F64, I64, I32 or U8)");
}

// Element i of a tensor as double (little-endian host assumed, checked at build by x86-64/arm64).
double element(const TensorInfo& t, int64_t i) {
  const unsigned char* p = t.data + i * dtype_size(t.dtype);
  switch (t.dtype) {
    case DType::F32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::F64: { double v; std::memcpy(&v, p, 8); return v; }
    case DType::BF16: { uint16_t v; std::memcpy(&v, p, 2); return bf16_to_f32(v); }
    case DType::F16: { uint16_t v; std::memcpy(&v, p, 2); return f16_to_f32(v); }
    case DType::I64: { int64_t v; std::memcpy(&v, p, 8); return double(v); }
    case DType::I32: { int32_t v; std::memcpy(&v, p, 4); return double(v); }
    case DType::U8: return double(*p);
  }
  return 0;
}

}  // namespace

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::U8: return "U8";
  }
  return "?";
}

size_t dtype_size(DType d) {
  switch (d) {
    case DType::U8: return 1;
    case DType::F16:
    case DType::BF16: return 2;
    case DType::F32:
    case DType::I32: return 4;
    case DType::F64:
    case DType::I64: return 8;
  }
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {
// Parses a safetensors document of `size` bytes at `bytes` (which must outlive the tensors);
// `where` names it in errors.
void parse_document(const unsigned char* bytes, size_t size, const std::string& where,
                    std::map<std::string, std::string>& metadata, std::map<std::string, TensorInfo>& tensors) {
  const std::string& path = where;
  if (size < 8) throw Error(path + ": truncated safetensors file (" + std::to_string(size) + " bytes, no header)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes, 8);
  if (header_len > size - 8)
    throw Error(path + ": header length " + std::to_string(header_len) + " exceeds the file (" +
                std::to_string(size) + " bytes): truncated or not a safetensors file");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + header_len);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": header is not valid JSON (" + e.what() + ")");
  }
  if (!header.is_object()) throw Error(path + ": header is not a JSON object");
  const unsigned char* data_start = bytes + 8 + header_len;
  const size_t data_size = size - 8 - header_len;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw Error(path + ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) throw Error(path + ": __metadata__." + m.key() + " is not a string");
        metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = path + ": tensor '" + name + "'";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      throw Error(where + ": header entry lacks dtype, shape or data_offsets");
    TensorInfo t;
    t.name = name;
    if (!v["dtype"].is_string()) throw Error(where + ": dtype is not a string");
    t.dtype = parse_dtype(path, name, v["dtype"].get<std::string>());
    if (!v["shape"].is_array()) throw Error(where + ": shape is not an array");
    uint64_t elements = 1;  // checked against the data section as it grows, so it cannot overflow
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) throw Error(where + ": shape has a non-integer or negative entry");
      t.shape.push_back(d.get<int64_t>());
      if (d.get<uint64_t>() != 0 && elements > data_size / d.get<uint64_t>())
        throw Error(where + ": shape " + v["shape"].dump() + " holds more elements than the " + std::to_string(data_size) +
                    "-byte data section");
      elements *= d.get<uint64_t>();
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw Error(where + ": data_offsets is not a pair of non-negative integers");
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_size)
      throw Error(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                  ") outside the data section of " + std::to_string(data_size) + " bytes (truncated file?)");
    t.nbytes = end - begin;
    const uint64_t expected = uint64_t(t.numel()) * dtype_size(t.dtype);
    if (t.nbytes != expected)
      throw Error(where + ": " + std::to_string(t.nbytes) + " data bytes, but shape " + shape_string(t.shape) +
                  " of " + dtype_name(t.dtype) + " needs " + std::to_string(expected));
    t.data = data_start + begin;
    tensors.emplace(name, std::move(t));
  }
}

}  // namespace

SafetensorsReader::SafetensorsReader(const std::string& path)
    : file_(std::make_unique<MappedFile>(path)), name_(path) {
  parse_document(file_->data(), file_->size(), name_, metadata_, tensors_);
}

SafetensorsReader::SafetensorsReader(std::string bytes, const std::string& name)
    : buffer_(std::move(bytes)), name_(name) {
  parse_document(reinterpret_cast<const unsigned char*>(buffer_.data()), buffer_.size(), name_, metadata_, tensors_);
}

const TensorInfo& SafetensorsReader::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(path() + ": tensor '" + name + "' is missing");
  return it->second;
}

template <typename T>
void SafetensorsReader::read_into(const std::string& name, const std::vector<int64_t>& expected_shape,
                                  T* out) const {
  const TensorInfo& t = get(name);
  if (t.shape != expected_shape)
    throw Error(path() + ": tensor '" + name + "' has shape " + shape_string(t.shape) + ", expected " +
                shape_string(expected_shape));
  if (t.dtype == DType::I64 || t.dtype == DType::I32)
    throw Error(path() + ": tensor '" + name + "' has dtype " + dtype_name(t.dtype) +
                ", expected a floating-point dtype (F32, BF16, F16)");
  const int64_t n = t.numel();
  if (t.dtype == DType::F32 && sizeof(T) == 4) {
    std::memcpy(out, t.data, t.nbytes);
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(element(t, i));
}

template void SafetensorsReader::read_into<float>(const std::string&, const std::vector<int64_t>&, float*) const;
template void SafetensorsReader::read_into<double>(const std::string&, const std::vector<int64_t>&, double*) const;

std::vector<double> SafetensorsReader::read_as_double(const std::string& name) const {
  const TensorInfo& t = get(name);
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[size_t(i)] = element(t, i);
  return out;
}

namespace {
// The JSON header for tensors laid out in order, padded so the data section is 8-byte aligned.
std::string header_text(const std::vector<TensorToWrite>& tensors, const std::map<std::string, std::string>& metadata,
                        uint64_t* data_bytes) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.dtype != DType::F32 && t.dtype != DType::F64 && t.dtype != DType::I32 && t.dtype != DType::U8)
      throw Error("safetensors writer: tensor '" + t.name + "' has dtype " + dtype_name(t.dtype) +
                  "; only F32, F64, I32 and U8 are written");
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const uint64_t bytes = uint64_t(n) * dtype_size(t.dtype);
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text += ' ';
  *data_bytes = offset;
  return text;
}

uint64_t tensor_bytes(const TensorToWrite& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return uint64_t(n) * dtype_size(t.dtype);
}
}  // namespace

std::string encode_safetensors(const std::vector<TensorToWrite>& tensors, const std::map<std::string, std::string>& metadata) {
  uint64_t data_bytes = 0;
  const std::string text = header_text(tensors, metadata, &data_bytes);
  std::string out(8, '\0');
  const uint64_t len = text.size();
  std::memcpy(out.data(), &len, 8);
  out.reserve(8 + text.size() + data_bytes);
  out += text;
  for (const auto& t : tensors) out.append(static_cast<const char*>(t.data), tensor_bytes(t));
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  uint64_t data_bytes = 0;
  const std::string text = header_text(tensors, metadata, &data_bytes);
  write_file_atomically(path, [&](std::ostream& out) {
    const uint64_t len = text.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& t : tensors)
      out.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(tensor_bytes(t)));
  });
}

SafetensorsStreamWriter::SafetensorsStreamWriter(const std::string& path, const std::vector<TensorToWrite>& tensors,
                                                 const std::map<std::string, std::string>& metadata)
    : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())) {
  const std::string text = header_text(tensors, metadata, &expected_bytes_);
  file_ = std::fopen(tmp_.c_str(), "wb");
  if (file_ == nullptr) throw Error(path + ": cannot create " + tmp_);
  const uint64_t len = text.size();
  if (std::fwrite(&len, 8, 1, file_) != 1 || std::fwrite(text.data(), 1, text.size(), file_) != text.size()) {
    std::fclose(file_);
    std::remove(tmp_.c_str());
    file_ = nullptr;
    throw Error(path + ": write failed");
  }
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(tmp_.c_str());
  }
}

void SafetensorsStreamWriter::append(const void* data, size_t bytes) {
  if (file_ == nullptr) throw Error(path_ + ": append after commit");
  if (written_bytes_ + bytes > expected_bytes_)
    throw Error(path_ + ": more data appended than the header declares");
  if (std::fwrite(data, 1, bytes, file_) != bytes) throw Error(path_ + ": write failed (disk full?)");
  written_bytes_ += bytes;
}

void SafetensorsStreamWriter::commit() {
  if (written_bytes_ != expected_bytes_)
    throw Error(path_ + ": " + std::to_string(written_bytes_) + " data bytes written, the header declares " +
                std::to_string(expected_bytes_));
  const bool ok = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;  // data on disk before the name
  std::fclose(file_);
  file_ = nullptr;
  if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    std::remove(tmp_.c_str());
    throw Error(path_ + ": cannot write or rename " + tmp_ + " into place");
  }
  sync_to_disk(parent_folder(path_));
}

}  // namespace fca
