// The audit's statistics (docs/audit.md, "Statistics"): paired-window bootstrap
// percentile intervals, Monte-Carlo standard errors, ratio (retention) intervals, exact sign-flip
// p-values, Holm's step-down adjustment, and the balanced three-factor functional ANOVA.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/bootstrap.h"  // quantile
#include "models/coefficient_tensor.h"

namespace fca {

struct Interval {
  double low = 0, high = 0;
};

// Percentile interval (level, e.g. 0.95) of the mean of `values` under `resamples` resamplings of
// the entries with replacement. Resamples 256 k .. 256 k + 255 draw their indices in order from
// Rng(derive_seed(seed, k)), so blocks run in parallel and the interval does not depend on the
// thread count. Percentiles interpolate linearly between order statistics (numpy's default).
Interval bootstrap_mean_ci(const std::vector<double>& values, int resamples, uint64_t seed, double level = 0.95);

// Percentile interval of 1 - mean(numerator) / mean(denominator) with the same resampled indices
// for both (paired): the retention interval.
Interval bootstrap_retention_ci(const std::vector<double>& numerator, const std::vector<double>& denominator,
                                int resamples, uint64_t seed, double level = 0.95);

// Standard deviation (n - 1) of the per-randomisation means, divided by sqrt(R).
double monte_carlo_se(const std::vector<double>& per_randomisation_means);

double mean(const std::vector<double>& values);
double sample_sd(const std::vector<double>& values);

// Exact two-sided sign-flip test of mean 0: over all 2^n sign assignments, the share whose
// |mean| >= the observed |mean| (n <= 30). Ties count (a 1e-12 relative slack absorbs rounding).
double sign_flip_p_value(const std::vector<double>& values);

// Holm's step-down adjusted p-values, in the input order.
std::vector<double> holm_adjust(const std::vector<double>& p_values);

// Balanced functional ANOVA of coefficients: factors coordinate (every valid (layer, stream,
// source)), input (window) and token; one observation per cell, so the three-way interaction is
// the residual. Shares are of the total sum of squares about the grand mean.
struct VarianceDecomposition {
  double total_variance = 0;  // total SS / number of cells
  double coordinate = 0, input = 0, token = 0;
  double coordinate_input = 0, coordinate_token = 0, input_token = 0, residual = 0;
  int64_t coordinates = 0, inputs = 0, tokens = 0;
};
VarianceDecomposition functional_anova(const CoefficientView& coefficients);

}  // namespace fca
