#include "models/coefficient_tensor.h"

#include <cstring>
#include <vector>

namespace fca {

// CoefficientShape::to_string is record_kind.cpp's: the words after the axes are the kind's row's.

void CoefficientTensor::copy_window(int to, const CoefficientView& source, int from) {
  std::memcpy(window_data(to), source.window_data(from), sizeof(float) * size_t(shape_.per_window()));
  if (shape_.slots > 0)
    std::memcpy(window_discrete(to), source.window_discrete(from), sizeof(int32_t) * size_t(shape_.discrete_per_window()));
}

CoefficientTensor::CoefficientTensor(int windows, const CoefficientShape& shape)
    : windows_(windows),
      shape_(shape),
      values_(size_t(windows) * size_t(shape.per_window()), 0.0f),
      mask_(size_t(shape.layers) * shape.streams * shape.sources, 1),
      discrete_(size_t(windows) * size_t(shape.discrete_per_window()), 0) {}

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

void source_group_uniform_mean(const CoefficientTensor& S, const std::function<int(int, int, int)>& group_of,
                               CoefficientTensor& out) {
  const CoefficientShape& s = S.shape();
  std::vector<double> sum;
  std::vector<int> count;
  for (int l = 0; l < s.layers; ++l)
    for (int st = 0; st < s.streams; ++st) {
      sum.assign(size_t(s.sources), 0.0);
      count.assign(size_t(s.sources), 0);
      for (int k = 0; k < s.sources; ++k) {
        const int g = S.valid(l, st, k) ? group_of(l, st, k) : -1;
        if (g >= 0) sum[size_t(g)] += S.at(0, l, 0, st, k), ++count[size_t(g)];
      }
      for (int k = 0; k < s.sources; ++k) {
        float v = 0.0f;
        if (S.valid(l, st, k)) {
          const int g = group_of(l, st, k);
          v = g >= 0 ? float(sum[size_t(g)] / count[size_t(g)]) : S.at(0, l, 0, st, k);
        }
        for (int t = 0; t < s.tokens; ++t) out.at(0, l, t, st, k) = v;
      }
    }
}

}  // namespace fca
