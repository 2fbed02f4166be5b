// The coefficient tensor A(x) that every controller-bearing model exposes (docs/audit.md):
// named axes [layer, token, stream, source] per window, plus a validity mask over
// [layer, stream, source]. Gated family: [L, T, 1, 1]; MUDD: [L, T, 4, L+1].
// Routing records (docs/routed.md) add a discrete field beside the float values:
// MoE (expert_routing): values = weights [L, T, 1, k], discrete = expert indices [L, T, k];
// MoD (token_selection): values = sigmoid(s) [R, T, 1, 1], discrete = selected 0/1 [R, T, 1].
// Early exit (exit_depth): values = the classifier's q = sigmoid(s) [L-1, T, 1, 1] (absorbing fill
// 0 below min_exit, 1 after the token's exit), discrete = continued c [L-1, T, 1] (c_{k,t} = 1 iff
// the token runs beyond exit point k: non-increasing in k, 1 below min_exit).
// Storage is window-major, [window][layer][token][stream][source] (discrete: [window][layer][token]
// [slot]), so that one window's block is contiguous (caches are written window by window).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fca {

// What a (layer, token) record is: continuous coefficients (gates, mixing weights), or a routing
// decision with a discrete field.
// Everything fca does differently per kind is its row in models/record_kind.h.
enum class RecordKind { continuous, expert_routing, token_selection, exit_depth };
const char* record_kind_name(RecordKind kind);  // the row's name

struct CoefficientShape {
  int layers = 0, tokens = 0, streams = 1, sources = 1;
  RecordKind kind = RecordKind::continuous;
  int slots = 0;       // discrete entries per (layer, token): k (expert_routing), 1 (token_selection), 0
  int categories = 0;  // expert_routing: E, the range of an expert index; 0 otherwise
  int selected = 0;    // token_selection: K, the selected tokens per (window, layer); 0 otherwise
  int min_exit = 0;    // exit_depth: m, the first exit point (layer m-1 of the record); 0 otherwise
  int64_t per_window() const { return int64_t(layers) * tokens * streams * sources; }
  int64_t discrete_per_window() const { return int64_t(layers) * tokens * slots; }
  bool operator==(const CoefficientShape&) const = default;
  // "[layer 6, token 256, stream 1, source 1]" and the kind's words (defined beside the kinds' table,
  // record_kind.cpp).
  std::string to_string() const;
};

// A read-only view of coefficients for `windows` windows, laid out as CoefficientTensor stores them,
// over memory owned elsewhere (a CoefficientTensor or a memory-mapped cache).
struct CoefficientView {
  const float* data = nullptr;
  int windows = 0;
  CoefficientShape shape;
  const uint8_t* mask = nullptr;  // [layer][stream][source], nonzero = valid
  const int32_t* discrete = nullptr;  // [window][layer][token][slot], null when shape.slots == 0
  const float* window_data(int window) const { return data + int64_t(window) * shape.per_window(); }
  const int32_t* window_discrete(int window) const { return discrete + int64_t(window) * shape.discrete_per_window(); }
  bool valid(int layer, int stream, int source) const {
    return mask[(size_t(layer) * shape.streams + stream) * shape.sources + source] != 0;
  }
};

class CoefficientTensor {
 public:
  CoefficientTensor() = default;
  // All entries 0 and all coordinates valid.
  CoefficientTensor(int windows, const CoefficientShape& shape);

  int windows() const { return windows_; }
  const CoefficientShape& shape() const { return shape_; }
  float& at(int window, int layer, int token, int stream = 0, int source = 0) {
    return values_[index(window, layer, token, stream, source)];
  }
  float at(int window, int layer, int token, int stream = 0, int source = 0) const {
    return values_[index(window, layer, token, stream, source)];
  }
  float* window_data(int window) { return values_.data() + window * shape_.per_window(); }
  const float* window_data(int window) const { return values_.data() + window * shape_.per_window(); }
  // The discrete field (routing records): [layer][token][slot] per window.
  int32_t& discrete_at(int window, int layer, int token, int slot) {
    return discrete_[((size_t(window) * shape_.layers + layer) * shape_.tokens + token) * shape_.slots + slot];
  }
  int32_t discrete_at(int window, int layer, int token, int slot) const {
    return discrete_[((size_t(window) * shape_.layers + layer) * shape_.tokens + token) * shape_.slots + slot];
  }
  int32_t* window_discrete(int window) { return discrete_.data() + window * shape_.discrete_per_window(); }
  const int32_t* window_discrete(int window) const { return discrete_.data() + window * shape_.discrete_per_window(); }
  std::vector<int32_t>& discrete() { return discrete_; }
  const std::vector<int32_t>& discrete() const { return discrete_; }
  // Copies window `from` of `source` (same shape) into window `to` of this tensor, both fields.
  void copy_window(int to, const CoefficientView& source, int from);
  CoefficientView view() const {
    return {values_.data(), windows_, shape_, mask_.data(), shape_.slots > 0 ? discrete_.data() : nullptr};
  }
  const std::vector<uint8_t>& mask() const { return mask_; }
  std::vector<float>& values() { return values_; }
  const std::vector<float>& values() const { return values_; }
  // valid(layer, stream, source): whether the coordinate exists (MUDD layers have fewer sources).
  bool valid(int layer, int stream, int source) const {
    return mask_[(size_t(layer) * shape_.streams + stream) * shape_.sources + source] != 0;
  }
  void set_valid(int layer, int stream, int source, bool v) {
    mask_[(size_t(layer) * shape_.streams + stream) * shape_.sources + source] = v ? 1 : 0;
  }

 private:
  size_t index(int window, int layer, int token, int stream, int source) const {
    return (((size_t(window) * shape_.layers + layer) * shape_.tokens + token) * shape_.streams + stream) *
               shape_.sources + source;
  }
  int windows_ = 0;
  CoefficientShape shape_;
  std::vector<float> values_;
  std::vector<uint8_t> mask_;
  std::vector<int32_t> discrete_;
};

// SourceUniformMean (MUDD's structure_removed): U[l,s,k] = sum_k' S[l,s,k'] / (valid sources of
// (l, s)) on valid coordinates, 0 elsewhere; keeps every signed sum over sources. Window 0 of both.
void source_uniform_mean(const CoefficientTensor& static_profile, CoefficientTensor& out);

// The grouped form of it (audit-protocol generalisation for families whose rows mix kinds of
// source, hyper-connections' read, write and mix): group_of(layer, stream, source) gives each valid
// entry a group (-1, or 0 .. sources - 1); within each row (layer, stream) every valid entry of a group g >= 0 becomes the
// mean of the row's entries of g (the double sum over the valid ones, rounded once), and entries of
// group -1 keep their value. Window 0 of both.
void source_group_uniform_mean(const CoefficientTensor& static_profile, const std::function<int(int, int, int)>& group_of,
                               CoefficientTensor& out);

}  // namespace fca
