// The audit on hyper-connection models (spec section 3): SHC is the audit's negative control (its
// coefficients are one constant, so every reassignment condition must give DeltaNLL exactly 0 and the
// variance decomposition exactly no input or token share); DHC's coefficients vary, so the same
// conditions move the NLL; exact replay passes with no controller evaluation; the grouped
// structure_removed keeps the writes and averages reads and mixing within their groups.
#include <gtest/gtest.h>

#include "audit/audit.h"
#include "core/rng.h"
#include "core/threads.h"
#include "data/corpus.h"
#include "models/hyper/auditable.h"
#include "test_util.h"

namespace fca {
namespace {

class HyperAudit : public ::testing::Test {
 protected:
  void SetUp() override {
    set_threads(2);
    testing::write_corpus(dir.path(), 30000, 6000, 6000);
  }
  // A small model away from its initialisation (static squares and dynamic weights perturbed), so
  // that DHC's coefficients depend on the token and SHC's constant is not the identity.
  std::string model_of(HyperVariant v) {
    HyperConfig c;
    c.n_layer = 2, c.d_model = 32, c.n_head = 2, c.seq_len = 32, c.variant = v, c.streams = 3;
    HyperModel<float> m = HyperModel<float>::initialized(c, 7);
    Rng rng(11);
    for (const auto& s : m.layout())
      if (s.name.starts_with("hc.")) {
        float* p = m.tensor(s.name);
        for (size_t i = 0; i < s.numel; ++i) p[i] += float(0.3 * rng.normal());
        if (s.name.ends_with(".static")) p[0] = 0;
      }
    const std::string path = dir.file(std::string(hyper_variant_name(v)) + ".safetensors");
    m.save(path);
    return path;
  }
  nlohmann::ordered_json audit(const std::string& path, const std::string& out) {
    AuditOptions o;
    o.model_path = path;
    o.eval_windows = 24;
    o.calib_windows = 16;
    o.reps = 3;
    o.batch = 8;
    o.bootstrap_resamples = 500;
    o.seed = 3;
    o.out_dir = dir.file(out);
    o.progress = false;
    HyperAuditable model(path, o.batch, 1 << 20);
    return run_audit(model, Corpus(dir.path()), o);
  }
  static const nlohmann::ordered_json& condition(const nlohmann::ordered_json& j, const std::string& name) {
    for (const auto& c : j["conditions"])
      if (c["name"] == name) return c;
    throw Error("no condition " + name);
  }
  testing::TempDir dir;
};

TEST_F(HyperAudit, ShcIsTheNegativeControlWithExactZeros) {
  const auto j = audit(model_of(HyperVariant::shc), "shc");
  EXPECT_TRUE(j["exact_replay"]["passed"].get<bool>());
  for (const char* name : {"correct", "cross_input", "token_shuffle", "cross_shuffle", "layer_position_mean", "static_profile"}) {
    const auto& c = condition(j, name);
    EXPECT_EQ(c["delta_nll"].get<double>(), 0.0) << name;  // exactly: means in double, rounded once
    EXPECT_EQ(c["ci95"][0].get<double>(), 0.0) << name;
    EXPECT_EQ(c["ci95"][1].get<double>(), 0.0) << name;
    EXPECT_EQ(c["controller_evaluations"].get<int64_t>(), 0) << name;
  }
  // The learned static structure is tested by identity and structure_removed: not zero.
  EXPECT_NE(condition(j, "structure_removed")["delta_nll"].get<double>(), 0.0);
  EXPECT_NE(condition(j, "identity")["delta_nll"].get<double>(), 0.0);
  const auto& shares = j["variance"]["shares"];
  for (const char* share : {"input", "token", "coordinate_x_input", "coordinate_x_token", "input_x_token", "residual"})
    EXPECT_EQ(shares[share].get<double>(), 0.0) << share;
}

TEST_F(HyperAudit, DhcCoefficientsVaryAndTheirReassignmentMovesTheNll) {
  const auto j = audit(model_of(HyperVariant::dhc), "dhc");
  EXPECT_TRUE(j["exact_replay"]["passed"].get<bool>());
  EXPECT_EQ(condition(j, "correct")["delta_nll"].get<double>(), 0.0);
  for (const char* name : {"cross_input", "token_shuffle", "static_profile"})
    EXPECT_NE(condition(j, name)["delta_nll"].get<double>(), 0.0) << name;
  EXPECT_GT(j["variance"]["shares"]["token"].get<double>(), 0.0);
}

TEST(HyperStructureRemoved, ReadsAndMixingAveragedWithinTheirGroupsWritesKept) {
  HyperConfig c;
  c.n_layer = 1, c.streams = 2;  // squares 3 x 3, two sites
  CoefficientTensor profile = hyper_coefficient_tensor(c, 1, 1), out = hyper_coefficient_tensor(c, 1, 1);
  // Site 0: read (0.8, 0.2); writes (1.5, 0.5); mixing rows (0.9, 0.1) and (0.3, 0.7).
  const float square[9] = {0, 0.8f, 0.2f, 1.5f, 0.9f, 0.1f, 0.5f, 0.3f, 0.7f};
  for (int p = 0; p < 2; ++p)
    for (int e = 0; e < 9; ++e) profile.at(0, p, 0, e / 3, e % 3) = square[e];
  const std::string dir = ::testing::TempDir();
  HyperModel<float>::initialized(c, 1).save(dir + "/hyper_groups.safetensors");
  HyperAuditable model(dir + "/hyper_groups.safetensors", 1, 1);
  model.structure_removed_profile(profile, out);
  EXPECT_FLOAT_EQ(out.at(0, 0, 0, 0, 1), 0.5f);  // (0.8 + 0.2) / 2
  EXPECT_FLOAT_EQ(out.at(0, 0, 0, 0, 2), 0.5f);
  EXPECT_FLOAT_EQ(out.at(0, 0, 0, 1, 0), 1.5f);  // writes kept
  EXPECT_FLOAT_EQ(out.at(0, 0, 0, 2, 0), 0.5f);
  EXPECT_FLOAT_EQ(out.at(0, 0, 0, 1, 1), 0.5f);  // (0.9 + 0.1) / 2
  EXPECT_FLOAT_EQ(out.at(0, 0, 0, 2, 2), 0.5f);  // (0.3 + 0.7) / 2
  EXPECT_EQ(out.at(0, 0, 0, 0, 0), 0.0f);        // masked
  // The identity profile is the initialisation's square: plain Pre-Norm.
  model.identity_profile(out);
  EXPECT_EQ(out.at(0, 1, 0, 0, 1 + c.read_stream(1)), 1.0f);
  EXPECT_EQ(out.at(0, 1, 0, 0, 1), 0.0f);
  EXPECT_EQ(out.at(0, 1, 0, 2, 0), 1.0f);
  EXPECT_EQ(out.at(0, 1, 0, 2, 2), 1.0f);
  EXPECT_EQ(out.at(0, 1, 0, 2, 1), 0.0f);
}

}  // namespace
}  // namespace fca
