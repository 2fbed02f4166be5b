// The audit on hyper-connection models (docs/hyper.md): SHC is the audit's negative control (its
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
#include "models/hyper/diagnostics.h"
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
  // dyn_noise: the perturbation of the dynamic projections (the larger, the more the coefficients
  // depend on the token).
  std::string model_of(HyperVariant v, double dyn_noise = 0.3) {
    HyperConfig c;
    c.n_layer = 2, c.d_model = 32, c.n_head = 2, c.seq_len = 32, c.variant = v, c.streams = 3;
    HyperModel<float> m = HyperModel<float>::initialized(c, 7);
    Rng rng(11);
    for (const auto& s : m.layout())
      if (s.name.starts_with("hc.")) {
        float* p = m.tensor(s.name);
        const double scale = s.name.ends_with(".dyn.weight") ? dyn_noise : 0.3;
        for (size_t i = 0; i < s.numel; ++i) p[i] += float(scale * rng.normal());
        if (s.name.ends_with(".static")) p[0] = 0;
      }
    const std::string path = dir.file(std::string(hyper_variant_name(v)) + ".safetensors");
    m.save(path);
    return path;
  }
  nlohmann::ordered_json audit(const std::string& path, const std::string& out, bool joint_token_shuffle = false) {
    AuditOptions o;
    o.joint_token_shuffle = joint_token_shuffle;
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

// [mHC]'s ablation as replays, one group at a time at its disabled value (read 1/n, writes 1,
// mixing I), the others cached, after the table's conditions. At initialisation SHC's writes are 1
// and its mixing I already, so switching those off replays the cached coefficients exactly (DeltaNLL
// exactly 0); its read is one-hot, so the mean read moves the NLL. Away from the initialisation
// every group matters.
TEST_F(HyperAudit, DisabledGroupsReplayOneGroupAtItsDisabledValue) {
  HyperConfig c;
  c.n_layer = 2, c.d_model = 32, c.n_head = 2, c.seq_len = 32, c.variant = HyperVariant::shc, c.streams = 3;
  const std::string fresh = dir.file("shc-init.safetensors");
  HyperModel<float>::initialized(c, 7).save(fresh);
  const auto init = audit(fresh, "shc-init");
  std::vector<std::string> names;
  for (const auto& cond : init["conditions"]) names.push_back(cond["name"]);
  ASSERT_GE(names.size(), 3u);
  EXPECT_EQ(std::vector<std::string>(names.end() - 3, names.end()),
            (std::vector<std::string>{"disabled_read", "disabled_write", "disabled_mixing"}));
  for (const char* name : {"disabled_write", "disabled_mixing"}) {
    EXPECT_EQ(condition(init, name)["delta_nll"].get<double>(), 0.0) << name;
    EXPECT_EQ(condition(init, name)["ci95"][1].get<double>(), 0.0) << name;
  }
  EXPECT_NE(condition(init, "disabled_read")["delta_nll"].get<double>(), 0.0);
  const auto trained = audit(model_of(HyperVariant::dhc), "dhc-disabled");
  for (const char* name : {"disabled_read", "disabled_write", "disabled_mixing"}) {
    EXPECT_NE(condition(trained, name)["delta_nll"].get<double>(), 0.0) << name;
    EXPECT_EQ(condition(trained, name)["controller_evaluations"].get<int64_t>(), 0) << name;
  }
}

// mHC's live mixing is doubly stochastic; a per-stream token shuffle moves rows between tokens and
// breaks the column sums, and the audit says by how much; the site-joint shuffle moves whole squares
// and keeps every window's largest deviation exactly that of the live coefficients.
TEST_F(HyperAudit, MhcColumnSumsOfWhatWasReplayed) {
  const std::string path = model_of(HyperVariant::mhc, 1.0);
  const auto per_stream = audit(path, "mhc");
  EXPECT_NE(per_stream["model"]["coefficient_constraint"].get<std::string>().find("column sum"), std::string::npos);
  const double live = condition(per_stream, "correct")["constraint_violation"];
  // Large dynamic weights give sharp, token-dependent mixing. Sinkhorn converges slowly on sharp
  // matrices (its contraction ratio tends to 1), so 20 iterations leave column errors of a few
  // percent live (0.04 here); rows moved between tokens leave them off by far more (0.64 here).
  EXPECT_LT(live, 0.1);
  EXPECT_GT(condition(per_stream, "token_shuffle")["constraint_violation"].get<double>(), 5 * live);
  EXPECT_GT(condition(per_stream, "cross_shuffle")["constraint_violation"].get<double>(), 5 * live);
  EXPECT_LT(condition(per_stream, "identity")["constraint_violation"].get<double>(), 1e-6);
  EXPECT_NE(per_stream["settings"]["token_shuffle"].get<std::string>().find("per stream"), std::string::npos);
  const auto joint = audit(path, "mhc-joint", true);
  EXPECT_NE(joint["settings"]["token_shuffle"].get<std::string>().find("site-joint"), std::string::npos);
  for (const char* name : {"token_shuffle", "cross_shuffle", "cross_input"})
    EXPECT_EQ(condition(joint, name)["constraint_violation"].get<double>(), live) << name;
  // Replay and the unshuffled conditions do not depend on the option.
  EXPECT_EQ(condition(joint, "cross_input")["delta_nll"], condition(per_stream, "cross_input")["delta_nll"]);
  EXPECT_NE(condition(joint, "token_shuffle")["delta_nll"], condition(per_stream, "token_shuffle")["delta_nll"]);
  // Diagnostics from the cache: present, and the live composite's forward gain is 1 up to Sinkhorn's
  // row normalisation (rows of doubly stochastic matrices sum to 1, and so do their products').
  const auto& gain = joint["diagnostics"]["composite_gain"];
  EXPECT_NEAR(gain["forward_max_abs_row_sum"].get<double>(), 1.0, 1e-4);
  // SHC and DHC have no constraint to report.
  const auto shc = audit(model_of(HyperVariant::shc), "shc-c");
  EXPECT_FALSE(shc["model"].contains("coefficient_constraint"));
  EXPECT_FALSE(condition(shc, "token_shuffle").contains("constraint_violation"));
}

// Section 3.5 by hand: n 2, one block (two sites), one token.
// Site 0: read (0.8, 0.2), writes (1.5, 0.5), mixing M0 = [[0.9, 0.1], [0.3, 0.7]];
// site 1: read (0.4, 0.6), writes (1, 2), mixing M1 = [[1, 0], [0.5, 0.5]].
TEST(HyperDiagnostics, ByHand) {
  HyperConfig c;
  c.n_layer = 1, c.streams = 2;
  CoefficientTensor A = hyper_coefficient_tensor(c, 1, 1);
  const float squares[2][9] = {{0, 0.8f, 0.2f, 1.5f, 0.9f, 0.1f, 0.5f, 0.3f, 0.7f}, {0, 0.4f, 0.6f, 1, 1, 0, 2, 0.5f, 0.5f}};
  for (int p = 0; p < 2; ++p)
    for (int e = 0; e < 9; ++e) A.at(0, p, 0, e / 3, e % 3) = squares[p][e];
  const auto j = hyper_cache_diagnostics(c, A.view());
  // Float inputs (0.9f, ...): 1e-6 covers their rounding.
  const auto& m = j["connection_matrix"]["mean"];
  EXPECT_NEAR(m[0][0].get<double>(), 1.0, 1e-6);  // read0 . 1
  EXPECT_TRUE(m[0][1].is_null());                 // site 0 does not read its own output
  EXPECT_NEAR(m[1][0].get<double>(), 1.0, 1e-6);  // read1 . M0 1
  EXPECT_NEAR(m[1][1].get<double>(), 0.9, 1e-6);  // read1 . write0
  EXPECT_NEAR(m[2][0].get<double>(), 2.0, 1e-6);  // 1 . M1 M0 1
  EXPECT_NEAR(m[2][1].get<double>(), 2.5, 1e-6);  // 1 . M1 write0
  EXPECT_NEAR(m[2][2].get<double>(), 3.0, 1e-6);  // 1 . write1
  // P = M1 M0 = [[0.9, 0.1], [0.6, 0.4]]: rows sum to 1, columns to 1.5 and 0.5.
  const auto& g = j["composite_gain"];
  EXPECT_NEAR(g["forward_max_abs_row_sum"].get<double>(), 1.0, 1e-6);
  EXPECT_NEAR(g["backward_max_abs_column_sum"].get<double>(), 1.5, 1e-6);
  EXPECT_NEAR(g["min_column_sum"].get<double>(), 0.5, 1e-6);
  EXPECT_NEAR(g["max_abs_log_column_sum"].get<double>(), std::log(2.0), 1e-6);
  const auto& d = j["distance_from_identity"];
  EXPECT_NEAR(d["mean"][0].get<double>(), std::sqrt(0.2), 1e-6);
  EXPECT_NEAR(d["mean"][1].get<double>(), std::sqrt(0.5), 1e-6);
  EXPECT_NEAR(hyper_column_sum_deviation(c, A.view(), 0), 0.5, 1e-6);
  // The identity squares: composite I, every connection 1 (reads one-hot, writes 1), the head n.
  fill_hyper_identity(c, A, 0);
  const auto id = hyper_cache_diagnostics(c, A.view());
  EXPECT_EQ(id["composite_gain"]["forward_max_abs_row_sum"].get<double>(), 1.0);
  EXPECT_EQ(id["composite_gain"]["max_abs_log_column_sum"].get<double>(), 0.0);
  EXPECT_EQ(id["distance_from_identity"]["max"][1].get<double>(), 0.0);
  EXPECT_EQ(id["connection_matrix"]["mean"][1][1].get<double>(), 1.0);
  EXPECT_EQ(id["connection_matrix"]["mean"][2][0].get<double>(), 2.0);
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
