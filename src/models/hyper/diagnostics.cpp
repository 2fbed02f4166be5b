#include "models/hyper/diagnostics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"

namespace fca {
namespace {

void check_shape(const HyperConfig& c, const CoefficientShape& s) {
  if (s.layers != c.sites() || s.streams != c.square() || s.sources != c.square())
    throw Error("hyper diagnostics: coefficients of shape " + s.to_string() + ", expected " + std::to_string(c.sites()) + " sites of " +
                std::to_string(c.square()) + " x " + std::to_string(c.square()) + " squares");
}

// A number, or null where it is not finite (a log of a non-positive column sum).
nlohmann::ordered_json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr); }

}  // namespace

double hyper_column_sum_deviation(const HyperConfig& c, const CoefficientView& A, int window) {
  check_shape(c, A.shape);
  const int n = c.streams, S = c.square();
  double worst = 0;
  const float* w = A.window_data(window);
  for (int p = 0; p < A.shape.layers; ++p)
    for (int t = 0; t < A.shape.tokens; ++t) {
      const float* C = w + (int64_t(p) * A.shape.tokens + t) * S * S;
      for (int i = 1; i <= n; ++i) {
        double sum = 0;
        for (int j = 1; j <= n; ++j) sum += C[j * S + i];
        worst = std::max(worst, std::abs(sum - 1.0));
      }
    }
  return worst;
}

namespace {

// The sums over every window and token that the diagnostics divide: the composite gain's extremes,
// the connection matrix (readers 0..P-1 the sites and P the head; writers 0 the embedding and 1 + j
// site j) and the mixing's distance from the identity.
struct DiagnosticSums {
  double forward_max = 0, backward_max = 0, min_colsum = std::numeric_limits<double>::infinity(), max_abs_log = 0;
  double forward_window_max = 0, backward_window_max = 0;
  std::vector<double> connection, dist_sum, dist_max, mean_mix;
};

DiagnosticSums diagnostic_sums(const HyperConfig& c, const CoefficientView& A) {
  const int n = c.streams, S = c.square(), P = c.sites(), Tn = A.shape.tokens, W = A.windows;
  DiagnosticSums d;
  d.connection.assign(size_t(P + 1) * (P + 1), 0.0);
  d.dist_sum.assign(size_t(P), 0.0);
  d.dist_max.assign(size_t(P), 0.0);
  d.mean_mix.assign(size_t(P) * n * n, 0.0);
  std::vector<double> composite(size_t(n) * n), next(size_t(n) * n);
  std::vector<double> carried(size_t(P + 1) * n), moved(static_cast<size_t>(n));  // per writer: M ... write_j
  for (int w = 0; w < W; ++w) {
    double forward_window = 0, backward_window = 0;
    const float* win = A.window_data(w);
    for (int t = 0; t < Tn; ++t) {
      auto square = [&](int p) { return win + (int64_t(p) * Tn + t) * S * S; };
      std::fill(composite.begin(), composite.end(), 0.0);
      for (int i = 0; i < n; ++i) composite[size_t(i) * n + i] = 1.0;
      std::fill(carried.begin(), carried.begin() + n, 1.0);  // the embedding: 1 on every stream
      for (int p = 0; p < P; ++p) {
        const float* C = square(p);
        // Reader p: its read row against every writer so far (the embedding and sites < p).
        for (int j = 0; j <= p; ++j) {
          double v = 0;
          for (int i = 0; i < n; ++i) v += double(C[1 + i]) * carried[size_t(j) * n + i];
          d.connection[size_t(p) * (P + 1) + j] += v;
        }
        // Every carried vector and the composite through M_p; then site p's write joins.
        for (int j = 0; j <= p; ++j) {
          for (int r = 0; r < n; ++r) {
            double v = 0;
            for (int i = 0; i < n; ++i) v += double(C[(1 + r) * S + 1 + i]) * carried[size_t(j) * n + i];
            moved[size_t(r)] = v;
          }
          std::copy(moved.begin(), moved.end(), carried.begin() + int64_t(j) * n);
        }
        for (int r = 0; r < n; ++r) carried[size_t(p + 1) * n + r] = C[(1 + r) * S];
        for (int r = 0; r < n; ++r)
          for (int q = 0; q < n; ++q) {
            double v = 0;
            for (int i = 0; i < n; ++i) v += double(C[(1 + r) * S + 1 + i]) * composite[size_t(i) * n + q];
            next[size_t(r) * n + q] = v;
          }
        std::swap(composite, next);
        double frob = 0;
        for (int r = 0; r < n; ++r)
          for (int i = 0; i < n; ++i) {
            const double m = C[(1 + r) * S + 1 + i];
            d.mean_mix[(size_t(p) * n + r) * n + i] += m;
            frob += (m - (r == i ? 1.0 : 0.0)) * (m - (r == i ? 1.0 : 0.0));
          }
        d.dist_sum[size_t(p)] += std::sqrt(frob);
        d.dist_max[size_t(p)] = std::max(d.dist_max[size_t(p)], std::sqrt(frob));
      }
      // The head: the sum over the final streams.
      for (int j = 0; j <= P; ++j) {
        double v = 0;
        for (int i = 0; i < n; ++i) v += carried[size_t(j) * n + i];
        d.connection[size_t(P) * (P + 1) + j] += v;
      }
      double row_max = 0, col_max = 0;
      for (int r = 0; r < n; ++r) {
        double row = 0, col = 0;
        for (int i = 0; i < n; ++i) row += composite[size_t(r) * n + i], col += composite[size_t(i) * n + r];
        row_max = std::max(row_max, std::abs(row));
        col_max = std::max(col_max, std::abs(col));
        d.min_colsum = std::min(d.min_colsum, col);
        d.max_abs_log = std::max(d.max_abs_log, col > 0 ? std::abs(std::log(col)) : std::numeric_limits<double>::infinity());
      }
      d.forward_max = std::max(d.forward_max, row_max);
      d.backward_max = std::max(d.backward_max, col_max);
      forward_window += row_max;
      backward_window += col_max;
    }
    d.forward_window_max = std::max(d.forward_window_max, forward_window / Tn);
    d.backward_window_max = std::max(d.backward_window_max, backward_window / Tn);
  }
  return d;
}

}  // namespace

nlohmann::ordered_json hyper_cache_diagnostics(const HyperConfig& c, const CoefficientView& A) {
  check_shape(c, A.shape);
  const int n = c.streams, P = c.sites();
  if (A.windows <= 0 || A.shape.tokens <= 0) throw Error("hyper diagnostics: the cache is empty");
  const double tokens_total = double(A.windows) * A.shape.tokens;
  const DiagnosticSums d = diagnostic_sums(c, A);
  nlohmann::ordered_json j;
  j["composite_gain"] = {{"forward_max_abs_row_sum", d.forward_max},
                         {"backward_max_abs_column_sum", d.backward_max},
                         {"min_column_sum", d.min_colsum},
                         {"max_abs_log_column_sum", finite_or_null(d.max_abs_log)},
                         {"forward_window_mean_max", d.forward_window_max},
                         {"backward_window_mean_max", d.backward_window_max}};
  nlohmann::ordered_json readers = nlohmann::ordered_json::array(), writers = nlohmann::ordered_json::array({"embedding"});
  for (int p = 0; p < P; ++p) {
    const std::string site = "site " + std::to_string(p) + (p % 2 == 0 ? " (attention)" : " (mlp)");
    readers.push_back(site);
    writers.push_back(site);
  }
  readers.push_back("head");
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (int k = 0; k <= P; ++k) {
    nlohmann::ordered_json row = nlohmann::ordered_json::array();
    for (int w = 0; w <= P; ++w) row.push_back(w <= k ? nlohmann::ordered_json(d.connection[size_t(k) * (P + 1) + w] / tokens_total) : nullptr);
    rows.push_back(row);
  }
  j["connection_matrix"] = {{"readers", readers}, {"writers", writers}, {"mean", rows}};
  nlohmann::ordered_json mean_dist = nlohmann::ordered_json::array(), max_dist = nlohmann::ordered_json::array(),
                         of_mean = nlohmann::ordered_json::array();
  for (int p = 0; p < P; ++p) {
    mean_dist.push_back(d.dist_sum[size_t(p)] / tokens_total);
    max_dist.push_back(d.dist_max[size_t(p)]);
    double frob = 0;
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < n; ++i) {
        const double e = d.mean_mix[(size_t(p) * n + r) * n + i] / tokens_total - (r == i ? 1.0 : 0.0);
        frob += e * e;
      }
    of_mean.push_back(std::sqrt(frob));
  }
  j["distance_from_identity"] = {{"norm", "Frobenius norm of M_p - I"}, {"mean", mean_dist}, {"max", max_dist}, {"of_the_mean", of_mean}};
  return j;
}

}  // namespace fca
