// The coefficient tensor A(x) that every controller-bearing model exposes (audit-protocol spec):
// named axes [layer, token, stream, source] per window, plus a validity mask over
// [layer, stream, source]. Gated family: [L, T, 1, 1]; MUDD: [L, T, 4, L+1].
// Storage is window-major, [window][layer][token][stream][source], so that one window's block is
// contiguous (caches are written window by window).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fca {

struct CoefficientShape {
  int layers = 0, tokens = 0, streams = 1, sources = 1;
  int64_t per_window() const { return int64_t(layers) * tokens * streams * sources; }
  bool operator==(const CoefficientShape&) const = default;
  std::string to_string() const;  // "[layer 6, token 256, stream 1, source 1]"
};

// A read-only view of coefficients for `windows` windows, laid out as CoefficientTensor stores them,
// over memory owned elsewhere (a CoefficientTensor or a memory-mapped cache).
struct CoefficientView {
  const float* data = nullptr;
  int windows = 0;
  CoefficientShape shape;
  const uint8_t* mask = nullptr;  // [layer][stream][source], nonzero = valid
  const float* window_data(int window) const { return data + int64_t(window) * shape.per_window(); }
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
  CoefficientView view() const { return {values_.data(), windows_, shape_, mask_.data()}; }
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
};

// SourceUniformMean (MUDD's structure_removed): U[l,s,k] = sum_k' S[l,s,k'] / (valid sources of
// (l, s)) on valid coordinates, 0 elsewhere; keeps every signed sum over sources. Window 0 of both.
void source_uniform_mean(const CoefficientTensor& static_profile, CoefficientTensor& out);

}  // namespace fca
