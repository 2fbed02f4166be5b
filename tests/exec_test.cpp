// Execution measurement: the counters agree with the structure that ran, for every gate kind and
// for skipped configurations; removing a block whose gate is exactly 0 changes nothing; the FLOP
// count matches an independent count; bad input is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/exec_counters.h"
#include "core/threads.h"
#include "exec/exec.h"
#include "exec/gated_flops.h"
#include "models/gated/forward.h"
#include "test_util.h"

namespace fca {
namespace {

TEST(ExecCounters, CountersAgreeWithTheStructure) {
  set_threads(2);
  for (GateKind kind : {GateKind::dense, GateKind::fixed, GateKind::uniform, GateKind::layerstatic, GateKind::featuregate}) {
    GatedConfig c = testing::tiny_config(kind);
    c.n_layer = 3;
    const GatedModel<float> model = GatedModel<float>::initialized(c, 1);
    const int B = 2, T = c.seq_len;
    std::vector<int32_t> tokens(size_t(B) * T, 7);
    GatedRunState<float> rs(c, B, T, false);
    ExecCounters counters;
    LiveCoefficients<float> live(model);
    {
      CountingScope scope(counters);
      gated_forward(model, rs, tokens.data(), B, T, live);
    }
    EXPECT_EQ(counters.blocks_executed, 3) << gate_kind_name(kind);
    // One per layer; featuregate's features are controller code too (features, then the gate).
    EXPECT_EQ(counters.controller_evaluations, kind == GateKind::featuregate ? 6 : 3) << gate_kind_name(kind);
    EXPECT_EQ(double(counters.gemm_flops), gated_forward_flops(c, B, T, 3)) << gate_kind_name(kind);
    // Per block: qkv, proj, fc, mlp proj + 2 attention GEMMs per (batch, head) and row block (T <= 64: one).
    EXPECT_EQ(counters.gemm_calls, 3 * (4 + 2 * B * c.n_head) + 1) << gate_kind_name(kind);

    // Replayed coefficients with block 1 removed: 2 blocks, no controller, fewer FLOPs.
    CoefficientTensor g(B, gated_coefficient_shape(c, T));
    std::fill(g.values().begin(), g.values().end(), 0.5f);
    ReplayedCoefficients<float> replayed(g);
    const std::vector<uint8_t> executed{1, 0, 1};
    counters.reset();
    {
      CountingScope scope(counters);
      gated_forward(model, rs, tokens.data(), B, T, replayed, 0, &executed);
    }
    EXPECT_EQ(counters.blocks_executed, 2);
    EXPECT_EQ(counters.controller_evaluations, 0);
    EXPECT_EQ(double(counters.gemm_flops), gated_forward_flops(c, B, T, 2));
  }
  // Off by default: nothing counts without a scope.
  EXPECT_EQ(exec_counters(), nullptr);
}

TEST(ExecCounters, FlopFormulaMatchesAnIndependentCount) {
  // L 2, D 16, H 2, T 16, B 2: N = 32 rows.
  //   Linear per block: qkv 2*32*48*16 + proj 2*32*16*16 + fc 2*32*64*16 + mlp 2*32*16*64 = 196,608
  //   Attention per block: per (batch, head) 2 GEMMs of 16x16x8 = 2 * 2*16*16*8 = 8,192, x 4 = 32,768
  //   Head: 2*32*16*256 = 262,144
  // Total: 2 * (196,608 + 32,768) + 262,144 = 720,896.
  EXPECT_EQ(gated_forward_flops(testing::tiny_config(GateKind::dense), 2, 16, 2), 720896.0);
}

TEST(ExecSkip, RemovingABlockWithGateZeroChangesNothing) {
  set_threads(2);
  GatedConfig c = testing::tiny_config(GateKind::layerstatic);
  c.n_layer = 3;
  const GatedModel<float> model = GatedModel<float>::initialized(c, 4);
  const int B = 2, T = c.seq_len;
  std::vector<int32_t> tokens(size_t(B) * T);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 37) % 256);
  CoefficientTensor g(B, gated_coefficient_shape(c, T));
  for (int w = 0; w < B; ++w)
    for (int l = 0; l < 3; ++l)
      for (int t = 0; t < T; ++t) g.at(w, l, t) = l == 1 ? 0.0f : 0.7f;
  ReplayedCoefficients<float> source(g);
  GatedRunState<float> run_all(c, B, T, false), run_skip(c, B, T, false);
  gated_forward(model, run_all, tokens.data(), B, T, source);
  const std::vector<uint8_t> executed{1, 0, 1};
  gated_forward(model, run_skip, tokens.data(), B, T, source, 0, &executed);
  EXPECT_EQ(0, std::memcmp(run_all.logits, run_skip.logits, sizeof(float) * size_t(B) * T * kByteVocab));
}

TEST(ExecSkip, LiveFeatureGateCannotSkip) {
  GatedConfig c = testing::tiny_config(GateKind::featuregate);
  const GatedModel<float> model = GatedModel<float>::initialized(c, 4);
  std::vector<int32_t> tokens(size_t(c.seq_len), 1);
  GatedRunState<float> rs(c, 1, c.seq_len, false);
  LiveCoefficients<float> live(model);
  const std::vector<uint8_t> executed{1, 0};
  EXPECT_THROW(gated_forward(model, rs, tokens.data(), 1, c.seq_len, live, 0, &executed), Error);
}

class ExecCli : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_corpus(dir.path(), 20000, 4000, 4000);
    GatedModel<float>::initialized(testing::tiny_config(GateKind::layerstatic), 1).save(dir.file("ls.safetensors"));
    GatedModel<float>::initialized(testing::tiny_config(GateKind::dense), 1).save(dir.file("dense.safetensors"));
  }
  testing::TempDir dir;
};

TEST_F(ExecCli, SweepWritesTheTable) {
  const auto r = testing::run_fca({"exec", "--model", dir.file("dense.safetensors"), "--model", dir.file("ls.safetensors"),
                                   "--data", dir.path(), "--runs", "3", "--warmup", "1", "--skip-threshold", "0.4,0.6",
                                   "--eval-windows", "4", "--calib-windows", "4", "--out", dir.file("exec"), "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Initial gates are sigmoid(0) = 0.5: tau 0.4 removes nothing, tau 0.6 removes both blocks.
  EXPECT_NE(r.output.find("| layerstatic L2 D16 | skip tau=0.6 | 0 / 2 |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| layerstatic L2 D16 | skip tau=0.4 | 2 / 2 |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| dense L2 D16 | live | 2 / 2 |"), std::string::npos) << r.output;
}

TEST_F(ExecCli, BadInput) {
  auto r = testing::run_fca({"exec", "--model", dir.file("ls.safetensors"), "--data", dir.path(), "--skip-threshold", "1.5",
                             "--out", dir.file("x")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--skip-threshold: an entry is \"1.5\", expected a number in [0, 1]"), std::string::npos) << r.output;
  r = testing::run_fca({"exec", "--model", dir.file("ls.safetensors"), "--data", dir.path(), "--skip-threshold", "0.5x",
                        "--out", dir.file("x")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--skip-threshold: an entry is \"0.5x\", expected a number"), std::string::npos) << r.output;
  r = testing::run_fca({"exec", "--model", dir.file("dense.safetensors"), "--data", dir.path(), "--skip-threshold", "0.5",
                        "--out", dir.file("x")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("calibratable gates"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x/exec.json")));
}

}  // namespace
}  // namespace fca
