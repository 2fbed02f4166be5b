#include "audit/statistics.h"

#include <algorithm>
#include <cmath>

#include "core/bootstrap.h"
#include "core/error.h"

namespace fca {

double mean(const std::vector<double>& values) {
  if (values.empty()) return 0;
  double s = 0;
  for (double v : values) s += v;
  return s / double(values.size());
}

double sample_sd(const std::vector<double>& values) {
  if (values.size() < 2) return 0;
  const double m = mean(values);
  double s = 0;
  for (double v : values) s += (v - m) * (v - m);
  return std::sqrt(s / double(values.size() - 1));
}

Interval bootstrap_mean_ci(const std::vector<double>& values, int resamples, uint64_t seed, double level) {
  const auto stats = bootstrap(values.size(), resamples, seed, [&](const std::vector<size_t>& idx) {
    double s = 0;
    for (size_t i : idx) s += values[i];
    return s / double(idx.size());
  });
  const double a = (1 - level) / 2;
  return {quantile(stats, a), quantile(stats, 1 - a)};
}

Interval bootstrap_retention_ci(const std::vector<double>& numerator, const std::vector<double>& denominator,
                                int resamples, uint64_t seed, double level) {
  if (numerator.size() != denominator.size()) throw Error("retention: numerator and denominator differ in length");
  const auto stats = bootstrap(numerator.size(), resamples, seed, [&](const std::vector<size_t>& idx) {
    double num = 0, den = 0;
    for (size_t i : idx) num += numerator[i], den += denominator[i];
    return 1.0 - num / den;
  });
  const double a = (1 - level) / 2;
  return {quantile(stats, a), quantile(stats, 1 - a)};
}

double monte_carlo_se(const std::vector<double>& per_randomisation_means) {
  if (per_randomisation_means.size() < 2) return 0;
  return sample_sd(per_randomisation_means) / std::sqrt(double(per_randomisation_means.size()));
}

double sign_flip_p_value(const std::vector<double>& values) {
  const size_t n = values.size();
  if (n == 0) throw Error("sign-flip test of an empty sample");
  if (n > 30) throw Error("exact sign-flip test enumerates 2^n assignments; n = " + std::to_string(n) + " > 30");
  const double observed = std::abs(mean(values));
  const double slack = 1e-12 * std::max(1.0, observed);
  uint64_t at_least = 0;
  const uint64_t total = uint64_t(1) << n;
  for (uint64_t signs = 0; signs < total; ++signs) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += (signs >> i & 1) ? -values[i] : values[i];
    if (std::abs(s / double(n)) >= observed - slack) ++at_least;
  }
  return double(at_least) / double(total);
}

std::vector<double> holm_adjust(const std::vector<double>& p) {
  const size_t m = p.size();
  std::vector<size_t> order(m);
  for (size_t i = 0; i < m; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  std::vector<double> adjusted(m);
  double running = 0;
  for (size_t k = 0; k < m; ++k) {
    running = std::max(running, std::min(1.0, double(m - k) * p[order[k]]));
    adjusted[order[k]] = running;
  }
  return adjusted;
}

VarianceDecomposition functional_anova(const CoefficientView& A) {
  const CoefficientShape& s = A.shape;
  // Valid coordinates (layer, stream, source), flattened.
  std::vector<int64_t> coord_offset;  // offset of (l, 0-token, s, k) inside a window's block
  for (int l = 0; l < s.layers; ++l)
    for (int st = 0; st < s.streams; ++st)
      for (int k = 0; k < s.sources; ++k)
        if (A.valid(l, st, k)) coord_offset.push_back((int64_t(l) * s.tokens * s.streams + st) * s.sources + k);
  const int64_t C = int64_t(coord_offset.size()), I = A.windows, T = s.tokens;
  if (C == 0 || I == 0 || T == 0) throw Error("variance decomposition of an empty coefficient tensor");
  const int64_t token_stride = int64_t(s.streams) * s.sources;
  auto value = [&](int64_t c, int64_t i, int64_t t) {
    return double(A.window_data(int(i))[coord_offset[size_t(c)] + t * token_stride]);
  };
  // Marginal means of one and two factors.
  std::vector<double> m_c(size_t(C), 0), m_i(size_t(I), 0), m_t(size_t(T), 0);
  std::vector<double> m_ci(size_t(C * I), 0), m_ct(size_t(C * T), 0), m_it(size_t(I * T), 0);
  double grand = 0;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < I; ++i)
      for (int64_t t = 0; t < T; ++t) {
        const double v = value(c, i, t);
        m_ci[size_t(c * I + i)] += v;
        m_ct[size_t(c * T + t)] += v;
        m_it[size_t(i * T + t)] += v;
      }
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < I; ++i) m_c[size_t(c)] += m_ci[size_t(c * I + i)], m_i[size_t(i)] += m_ci[size_t(c * I + i)];
  for (int64_t i = 0; i < I; ++i)
    for (int64_t t = 0; t < T; ++t) m_t[size_t(t)] += m_it[size_t(i * T + t)];
  for (double v : m_c) grand += v;
  grand /= double(C * I * T);
  for (auto& v : m_ci) v /= double(T);
  for (auto& v : m_ct) v /= double(I);
  for (auto& v : m_it) v /= double(C);
  for (auto& v : m_c) v /= double(I * T);
  for (auto& v : m_i) v /= double(C * T);
  for (auto& v : m_t) v /= double(C * I);

  VarianceDecomposition d;
  d.coordinates = C;
  d.inputs = I;
  d.tokens = T;
  double ss_total = 0, ss_c = 0, ss_i = 0, ss_t = 0, ss_ci = 0, ss_ct = 0, ss_it = 0;
  for (int64_t c = 0; c < C; ++c) ss_c += double(I * T) * (m_c[size_t(c)] - grand) * (m_c[size_t(c)] - grand);
  for (int64_t i = 0; i < I; ++i) ss_i += double(C * T) * (m_i[size_t(i)] - grand) * (m_i[size_t(i)] - grand);
  for (int64_t t = 0; t < T; ++t) ss_t += double(C * I) * (m_t[size_t(t)] - grand) * (m_t[size_t(t)] - grand);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < I; ++i) {
      const double e = m_ci[size_t(c * I + i)] - m_c[size_t(c)] - m_i[size_t(i)] + grand;
      ss_ci += double(T) * e * e;
    }
  for (int64_t c = 0; c < C; ++c)
    for (int64_t t = 0; t < T; ++t) {
      const double e = m_ct[size_t(c * T + t)] - m_c[size_t(c)] - m_t[size_t(t)] + grand;
      ss_ct += double(I) * e * e;
    }
  for (int64_t i = 0; i < I; ++i)
    for (int64_t t = 0; t < T; ++t) {
      const double e = m_it[size_t(i * T + t)] - m_i[size_t(i)] - m_t[size_t(t)] + grand;
      ss_it += double(C) * e * e;
    }
  // The three-way residual from its own terms, not as 1 minus the other shares: a coefficient that
  // is one constant per coordinate (SHC, the audit's negative control) then has a residual of exactly
  // 0 (v - m_ci - m_ct + m_c and the input x token interaction term are both exactly 0), where the
  // difference would leave rounding (5e-14 measured). The shares then sum to 1 up to rounding.
  double ss_res = 0;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < I; ++i)
      for (int64_t t = 0; t < T; ++t) {
        const double e = value(c, i, t) - grand;
        ss_total += e * e;
        const double within = value(c, i, t) - m_ci[size_t(c * I + i)] - m_ct[size_t(c * T + t)] + m_c[size_t(c)];
        const double r = within - (m_it[size_t(i * T + t)] - m_i[size_t(i)] - m_t[size_t(t)] + grand);
        ss_res += r * r;
      }
  d.total_variance = ss_total / double(C * I * T);
  if (ss_total > 0) {
    d.coordinate = ss_c / ss_total;
    d.input = ss_i / ss_total;
    d.token = ss_t / ss_total;
    d.coordinate_input = ss_ci / ss_total;
    d.coordinate_token = ss_ct / ss_total;
    d.input_token = ss_it / ss_total;
    d.residual = ss_res / ss_total;
  }
  return d;
}

}  // namespace fca
