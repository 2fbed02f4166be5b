#include "models/coefficient_tensor.h"

namespace fca {

std::string CoefficientShape::to_string() const {
  return "[layer " + std::to_string(layers) + ", token " + std::to_string(tokens) + ", stream " +
         std::to_string(streams) + ", source " + std::to_string(sources) + "]";
}

CoefficientTensor::CoefficientTensor(int windows, const CoefficientShape& shape)
    : windows_(windows),
      shape_(shape),
      values_(size_t(windows) * size_t(shape.per_window()), 0.0f),
      mask_(size_t(shape.layers) * shape.streams * shape.sources, 1) {}

void source_uniform_mean(const CoefficientTensor& S, CoefficientTensor& out) {
  const CoefficientShape& s = S.shape();
  for (int l = 0; l < s.layers; ++l)
    for (int st = 0; st < s.streams; ++st) {
      double sum = 0;
      int valid = 0;
      for (int k = 0; k < s.sources; ++k)
        if (S.valid(l, st, k)) sum += S.at(0, l, 0, st, k), ++valid;
      const float u = valid > 0 ? float(sum / valid) : 0.0f;
      for (int t = 0; t < s.tokens; ++t)
        for (int k = 0; k < s.sources; ++k) out.at(0, l, t, st, k) = S.valid(l, st, k) ? u : 0.0f;
    }
}

}  // namespace fca
