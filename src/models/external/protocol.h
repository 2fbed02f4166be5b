// The external-model protocol, fca-external-v1 (docs/external-protocol.md): fca runs an adapter as a
// child process and exchanges messages over its stdin and stdout. A message is an 8-byte
// little-endian length n, then n bytes of one safetensors document whose __metadata__ holds
// "protocol" (kExternalProtocol) and "type". Each request gets exactly one answer of the same type,
// or an "error" answer whose "message" fca reports.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/child_process.h"
#include "core/safetensors.h"

namespace fca {

inline constexpr const char* kExternalProtocol = "fca-external-v1";
// The largest answer fca accepts; the length prefix is checked before anything is allocated.
inline constexpr uint64_t kMaxExternalMessageBytes = uint64_t(1) << 32;

// The checks of a received answer, apart from the pipe (fuzz/fuzz_adapter_protocol.cpp feeds them
// arbitrary bytes). `who` names the adapter in errors ("`<command>`", or "adapter '<name>'" once it
// has described itself), `type` is the request's type.
// The length prefix: 8 .. kMaxExternalMessageBytes, else Error (an adapter that prints to stdout).
void check_answer_length(uint64_t length, const std::string& type, const std::string& who);
// The message's bytes as a safetensors document of the protocol and the request's type; an error
// answer throws Error with the adapter's message.
SafetensorsReader parse_answer(std::string bytes, const std::string& type, const std::string& who);

class AdapterConnection {
 public:
  // Starts the adapter; `timeout_s` bounds the wait for every answer.
  AdapterConnection(const std::string& command, double timeout_s);
  // Sends a request of `type` and returns its answer, checked for the protocol and the type. An
  // error answer, a malformed one, an exit or a time-out throws Error naming the adapter.
  SafetensorsReader request(const std::string& type, const std::vector<TensorToWrite>& tensors,
                            const std::map<std::string, std::string>& metadata = {});
  const std::string& command() const { return process_.command(); }
  // How errors name the adapter: "`<command>`", then "adapter '<name>'" after name_adapter (the
  // command of fca_adapter.audit/exec is a relay, `cat <&5 & exec cat >&4`, which names nothing).
  const std::string& label() const { return process_.label(); }
  void name_adapter(const std::string& name) { process_.set_label("adapter '" + name + "'"); }
  // The requests the adapter has answered.
  int64_t requests() const { return requests_; }

 private:
  ChildProcess process_;
  double timeout_s_;
  int64_t requests_ = 0;
};

// A metadata field of an answer, as text, or as a number range-checked against [low, high];
// errors name the adapter, the message type and the field, expected vs found.
std::string answer_text(const SafetensorsReader& answer, const std::string& field);
int64_t answer_integer(const SafetensorsReader& answer, const std::string& field, int64_t low, int64_t high);
// A SHA-256 field (64 lowercase hex digits): a model hash, a logits digest.
std::string answer_sha256(const SafetensorsReader& answer, const std::string& field);
// A tensor of an answer, checked for its dtype and shape.
const TensorInfo& answer_tensor(const SafetensorsReader& answer, const std::string& name, DType dtype,
                                const std::vector<int64_t>& shape);

}  // namespace fca
