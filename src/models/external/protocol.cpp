#include "core/parse.h"
#include "models/external/protocol.h"

#include <algorithm>

#include "core/error.h"

namespace fca {

AdapterConnection::AdapterConnection(const std::string& command, double timeout_s)
    : process_(command), timeout_s_(timeout_s) {}

SafetensorsReader AdapterConnection::request(const std::string& type, const std::vector<TensorToWrite>& tensors,
                                             const std::map<std::string, std::string>& metadata) {
  std::map<std::string, std::string> meta = metadata;
  meta["protocol"] = kExternalProtocol;
  meta["type"] = type;
  const std::string body = encode_safetensors(tensors, meta);
  const uint64_t length = body.size();
  process_.write_all(&length, 8, timeout_s_, "the " + type + " request");
  process_.write_all(body.data(), body.size(), timeout_s_, "the " + type + " request");

  uint64_t answer_length = 0;
  process_.read_exact(&answer_length, 8, timeout_s_, "an answer to " + type);
  check_answer_length(answer_length, type, label());
  std::string answer(size_t(answer_length), '\0');
  process_.read_exact(answer.data(), answer.size(), timeout_s_, "the answer to " + type);
  SafetensorsReader reader = parse_answer(std::move(answer), type, label());
  ++requests_;
  return reader;
}

void check_answer_length(uint64_t length, const std::string& type, const std::string& who) {
  if (length < 8 || length > kMaxExternalMessageBytes)
    throw Error(who + " answered " + type + " with a message of " + std::to_string(length) +
                " bytes (expected 8 .. " + std::to_string(kMaxExternalMessageBytes) +
                "): not the protocol framing; does the adapter print to stdout?");
}

SafetensorsReader parse_answer(std::string bytes, const std::string& type, const std::string& who) {
  SafetensorsReader reader(std::move(bytes), who + " answer to " + type);
  const auto& m = reader.metadata();
  const auto protocol = m.find("protocol");
  if (protocol == m.end() || protocol->second != kExternalProtocol)
    throw Error(reader.path() + ": protocol \"" + (protocol == m.end() ? std::string() : protocol->second) +
                "\", expected \"" + kExternalProtocol + "\"");
  const auto answer_type = m.find("type");
  if (answer_type != m.end() && answer_type->second == "error") {
    const auto message = m.find("message");
    throw Error(who + " failed on " + type + ": " + (message == m.end() ? "(no message)" : message->second));
  }
  if (answer_type == m.end() || answer_type->second != type)
    throw Error(reader.path() + ": type \"" + (answer_type == m.end() ? std::string() : answer_type->second) +
                "\", expected \"" + type + "\"");
  return reader;
}

std::string answer_text(const SafetensorsReader& answer, const std::string& field) {
  const auto it = answer.metadata().find(field);
  if (it == answer.metadata().end()) throw Error(answer.path() + ": metadata field \"" + field + "\" is missing");
  return it->second;
}

std::string answer_sha256(const SafetensorsReader& answer, const std::string& field) {
  const std::string value = answer_text(answer, field);
  const bool hex = value.size() == 64 && std::all_of(value.begin(), value.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
  if (!hex) throw Error(answer.path() + ": " + field + " \"" + value + "\" is not 64 lowercase hex digits (a SHA-256)");
  return value;
}

int64_t answer_integer(const SafetensorsReader& answer, const std::string& field, int64_t low, int64_t high) {
  return parse_integer(answer_text(answer, field), answer.path() + ": field \"" + field + "\"", low, high);
}

const TensorInfo& answer_tensor(const SafetensorsReader& answer, const std::string& name, DType dtype,
                                const std::vector<int64_t>& shape) {
  const TensorInfo& t = answer.get(name);
  if (t.dtype != dtype || t.shape != shape)
    throw Error(answer.path() + ": tensor '" + name + "' is " + dtype_name(t.dtype) + " " + shape_string(t.shape) +
                ", expected " + dtype_name(dtype) + " " + shape_string(shape));
  return t;
}

}  // namespace fca
