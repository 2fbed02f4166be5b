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

}  // namespace fca
