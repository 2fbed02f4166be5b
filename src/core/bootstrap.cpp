#include "core/bootstrap.h"

#include <algorithm>
#include <cmath>

namespace fca {

double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double pos = q * double(values.size() - 1);
  const size_t lo = size_t(std::floor(pos)), hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (pos - double(lo)) * (values[hi] - values[lo]);
}

double median_in_place(std::vector<double>& values) {
  if (values.empty()) return 0;
  const size_t n = values.size(), lo = (n - 1) / 2;
  std::nth_element(values.begin(), values.begin() + std::ptrdiff_t(lo), values.end());
  const double a = values[lo];
  if (n % 2 == 1) return a;
  const double b = *std::min_element(values.begin() + std::ptrdiff_t(lo) + 1, values.end());
  return a + 0.5 * (b - a);  // quantile's interpolation at pos = lo + 0.5
}

}  // namespace fca
