// The gated byte-level transformer family (docs/model.md, format
// fca-gated-v1): configuration and the layout of its named parameter tensors.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/base/stream.h"       // kByteVocab
#include "models/base/tensor_slot.h"

namespace fca {

inline constexpr const char* kGatedFormat = "fca-gated-v1";

enum class GateKind { dense, fixed, uniform, layerstatic, featuregate };
const char* gate_kind_name(GateKind kind);
// Throws Error listing the valid kinds when `name` is none of them.
GateKind parse_gate_kind(const std::string& name);

struct GatedConfig {
  int n_layer = 6;    // L
  int d_model = 256;  // D
  int n_head = 4;     // H, D % H == 0
  int seq_len = 256;  // T, maximum positions (rows of wpe)
  GateKind gate = GateKind::featuregate;
  double gate_value = 0.6;  // used by `fixed` only

  int head_dim() const { return d_model / n_head; }
  // Throws Error naming the offending field; `where` prefixes the message (a file or "flags").
  void validate(const std::string& where) const;
  std::string to_json() const;
  static GatedConfig from_json(const std::string& text, const std::string& where);
  bool operator==(const GatedConfig&) const = default;
};

// Every parameter of a config, in a fixed order: the one visitor behind loading, saving, the
// optimizer and the gradient checks, so that no tensor can be forgotten in one of them.
std::vector<TensorSlot> gated_tensor_layout(const GatedConfig& config);
size_t gated_parameter_count(const GatedConfig& config);

}  // namespace fca
