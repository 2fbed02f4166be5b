// The Dense reference of exec (dense_same_shape): the shared block's FLOP formula checked by hand,
// and the reference pass, which is the gated family's Dense variant (g = 1) reached through the exec
// table: its counters are checked against the gated formulas, so it counts its GEMMs, one unit-gate
// evaluation per block and the h + 1 F products as mixing (the figures exec.json has always held).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "exec/exec_family.h"
#include "models/base/dense.h"
#include "ops/attention.h"

namespace fca {
namespace {

TEST(DenseBaseline, TheFormulaCountsTheGemmsByHand) {
  const int L = 3, D = 16, T = 16, B = 3;
  // Per block 2 N 12 D^2 (four linear maps) + 4 B P D, P = 256 (query, key) pairs the causal
  // kernel runs for T 16 (one tile, computed whole), and the head 2 N D 256.
  const double N = B * T;
  EXPECT_EQ(attention_executed_pairs(T), 256);
  EXPECT_EQ(dense_forward_flops(D, B, T, L), L * (2 * N * 12 * D * D + 4.0 * B * 256 * D) + 2 * N * D * 256);
}

TEST(DenseBaseline, TheReferenceIsTheGatedDenseVariantCountedAsItRuns) {
  const int L = 2, D = 16, H = 2, T = 16, B = 2;
  auto timing = std::make_shared<TokenWindows>();
  timing->count = B;
  timing->inputs.assign(size_t(B) * T, 7);
  timing->targets.assign(size_t(B) * T, 7);
  nlohmann::ordered_json modes = nlohmann::ordered_json::array();
  TimedModes timed;
  dense_same_shape(modes, timed, L, D, H, T, timing, B);
  ASSERT_EQ(modes.size(), 1u);
  const auto& m = modes[0];
  EXPECT_EQ(m["mode"], "dense_same_shape");
  EXPECT_EQ(m["executed_blocks"], L);
  EXPECT_TRUE(m["counters_match_graph"].get<bool>());
  // By hand: GEMMs 720896 (2 blocks of 229376 and the head 262144), the unit gate once per block,
  // h + 1 F at 2 FLOPs per element per block: 2 L N D = 2048; no controller arithmetic.
  const double N = B * T;
  EXPECT_EQ(m["controller_evaluations_per_pass"], L);
  EXPECT_EQ(m["gflop_per_pass_by_kind"]["gemm"].get<double>(), 720896 / 1e9);
  EXPECT_EQ(m["gflop_per_pass_by_kind"]["controller"].get<double>(), 0.0);
  EXPECT_EQ(m["gflop_per_pass_by_kind"]["mixing"].get<double>(), 2 * L * N * D / 1e9);
  EXPECT_EQ(m["gflop_per_pass"].get<double>(), (720896 + 2 * L * N * D) / 1e9);
  // The pass handed to the timer runs again without the counters.
  ASSERT_EQ(timed.modes().size(), 1u);
  EXPECT_NO_THROW(timed.modes()[0].pass());
}

// The reference is whichever one entry provides it: a table without one, or with two, is refused
// with the names, so a second provider cannot silently change every family's baseline.
TEST(DenseBaseline, ExactlyOneFamilyProvidesTheReference) {
  const auto provides = [](const std::string& name) {
    ExecFamily f;
    f.name = name;
    f.same_shape_dense = [](nlohmann::ordered_json&, TimedModes&, int, int, int, int, std::shared_ptr<const TokenWindows>, int) {};
    return f;
  };
  ExecFamily without;
  without.name = "plain";
  EXPECT_EQ(dense_reference_family({without, provides("first")}).name, "first");
  const auto error_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(error_of([&] { dense_reference_family({without}); }).find("no installed family provides the Dense reference"),
            std::string::npos);
  EXPECT_NE(error_of([&] { dense_reference_family({provides("first"), without, provides("second")}); })
                .find("the first and second families both provide"),
            std::string::npos);
}

}  // namespace
}  // namespace fca
