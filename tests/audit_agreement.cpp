#include "audit_agreement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace fca::testing {

// Every number of the native audit.json against the external one. Paths that name the run, not the
// model's figures, are left out (provenance, the model's path, family and description, the cache
// path, the index labels, how the logits were compared, and how the windows were grouped into batches: the native
// model's batch is chosen by a probe, since its results do not depend on it). Tolerance: 1e-5 absolute, or relative for figures above 1
// (byte perplexity ~ 10^2..10^3). The two engines round float32 differently (GEMM blocking,
// summation order): per-window NLLs differ by ~1e-7, and the figures inherit that.
void expect_same_figures(const nlohmann::json& native, const nlohmann::json& external, const std::string& path,
                         double& worst, std::string& worst_path) {
  static const std::vector<std::string> skipped{"/provenance", "/model/path", "/model/family", "/model/description",
                                                "/settings/cache", "/exact_replay/logits_compared", "/settings/batch",
                                                "/exact_replay/batches", "/model/controller_evaluations_counted_by", "/model/stream_labels", "/model/source_labels",
                                                // the probe's logits: compared by value natively, by digest here
                                                "/replay_sensitivity/logits_compared", "/replay_sensitivity/differing_logits",
                                                "/replay_sensitivity/max_abs_delta_logit", "/replay_sensitivity/calibration_windows",
                                                "/replay_sensitivity/groups"};
  for (const auto& s : skipped)
    if (path == s) return;
  ASSERT_EQ(native.type(), external.type()) << path;
  if (native.is_object()) {
    for (auto it = native.begin(); it != native.end(); ++it) {
      ASSERT_TRUE(external.contains(it.key())) << path + "/" + it.key() << " missing from the external audit";
      expect_same_figures(it.value(), external[it.key()], path + "/" + it.key(), worst, worst_path);
    }
  } else if (native.is_array()) {
    ASSERT_EQ(native.size(), external.size()) << path;
    for (size_t i = 0; i < native.size(); ++i)
      expect_same_figures(native[i], external[i], path + "/" + std::to_string(i), worst, worst_path);
  } else if (native.is_number()) {
    const double a = native.get<double>(), b = external.get<double>();
    const double err = std::abs(a - b) / std::max(1.0, std::abs(a));
    if (err > worst) {
      worst = err;
      worst_path = path;
    }
    EXPECT_LE(err, 1e-5) << path << ": native " << a << ", external " << b;
  } else {
    EXPECT_EQ(native, external) << path;
  }
}

}  // namespace fca::testing
