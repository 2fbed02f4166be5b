// The exit family's execution accounting (docs/exit.md, "FLOPs"): the counters of a pass equal
// the formulas of its depth record for live, replay, full depth, every fixed depth, a random valid
// record, a record where every token stops at min_exit and T = 1; a block with no running row is
// neither run nor counted; full depth equals the gated Dense formula of the same shape; a record
// that is not the one replayed fails the check. And `fca exec` on a trained checkpoint.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/exec_counters.h"
#include "core/rng.h"
#include "core/threads.h"
#include "exec/counted_pass.h"
#include "models/exit/exec/flops.h"
#include "models/exit/forward.h"
#include "models/gated/exec/flops.h"
#include "test_util.h"

namespace fca {
namespace {

ExitModel<float> model_of(int L, int T, int m) {
  ExitConfig c;
  c.n_layer = L, c.d_model = 32, c.n_head = 4, c.seq_len = T, c.min_exit = m, c.exit_threshold = 0.5;
  ExitModel<float> model = ExitModel<float>::initialized(c, 3);
  Rng rng(8);
  for (int i = 0; i < c.exit_points() * c.d_model; ++i) model.weights().exit_weight[i] = float(rng.normal() * 0.5);
  return model;
}

std::vector<int32_t> tokens(int n) {
  Rng rng(9);
  std::vector<int32_t> x(static_cast<size_t>(n));
  for (auto& v : x) v = int32_t(rng.below(256));
  return x;
}

CoefficientTensor record_of(const ExitConfig& c, const std::vector<int32_t>& depth, int B, int T) {
  CoefficientTensor r(B, exit_record_shape(c, T));
  for (int b = 0; b < B; ++b)
    for (int k = 1; k <= c.exit_points(); ++k)
      for (int t = 0; t < T; ++t) r.discrete_at(b, k - 1, t, 0) = depth[size_t(b * T + t)] > k ? 1 : 0;
  return r;
}

// Counts one pass and checks it against the formulas of `depth`.
void expect_counts(const ExitModel<float>& model, ExitDepthSource<float>& source, const std::vector<int32_t>& depth, int B,
                   int T, bool live, const std::string& what) {
  ExitRunState<float> rs(model.config(), B, T);
  const auto x = tokens(B * T);
  ExecCounters counters;
  {
    CountingScope scope(counters);
    exit_forward(model, rs, x.data(), B, T, source);
  }
  for (int n = 0; n < B * T; ++n) ASSERT_EQ(rs.depth[n], depth[size_t(n)]) << what << " row " << n;
  const ExitPassFigures f = exit_pass_figures(model.config(), depth.data(), B, T, live);
  EXPECT_NO_THROW(check_counters(what, counters, exit_expected_counts(f))) << what;
  for (int k = 0; k < model.config().n_layer; ++k) {
    EXPECT_EQ(rs.active_rows[size_t(k)], f.active[size_t(k)]) << what << " block " << k + 1;
    EXPECT_EQ(rs.propagated_rows[size_t(k)], f.propagated[size_t(k)]) << what << " block " << k + 1;
  }
}

TEST(ExitExec, CountersEqualTheFormulasOfEveryKindOfRecord) {
  set_threads(2);
  for (int T : {40, 1}) {
    const ExitModel<float> model = model_of(5, T, 2);
    const ExitConfig& c = model.config();
    const int B = 3, N = B * T;
    // Live: the depths it chose (recorded in a first pass).
    ExitRunState<float> rs(c, B, T);
    CoefficientTensor recorded(B, exit_record_shape(c, T));
    ExitRecordingDepth<float> recording(model, recorded);
    const auto x = tokens(N);
    exit_forward(model, rs, x.data(), B, T, recording);
    const std::vector<int32_t> live_depth(rs.depth, rs.depth + N);
    ExitLiveDepth<float> live(model);
    expect_counts(model, live, live_depth, B, T, true, "live T " + std::to_string(T));
    ExitReplayedDepth<float> replay(c, recorded);
    expect_counts(model, replay, live_depth, B, T, false, "replay");
    for (int depth = c.min_exit; depth <= c.n_layer; ++depth) {
      const std::vector<int32_t> d(size_t(N), depth);
      const CoefficientTensor r = record_of(c, d, B, T);
      ExitReplayedDepth<float> fixed(c, r);
      expect_counts(model, fixed, d, B, T, false, "fixed depth " + std::to_string(depth));
      const ExitPassFigures f = exit_pass_figures(c, d.data(), B, T, false);
      EXPECT_EQ(f.blocks, depth) << "blocks above a constant depth do not run";
      EXPECT_EQ(f.propagation, 0.0) << "a constant depth propagates nothing";
    }
    Rng rng(4);
    std::vector<int32_t> random(static_cast<size_t>(N));
    for (auto& d : random) d = c.min_exit + int32_t(rng.below(uint64_t(c.n_layer - c.min_exit + 1)));
    const CoefficientTensor r = record_of(c, random, B, T);
    ExitReplayedDepth<float> replay_random(c, r);
    expect_counts(model, replay_random, random, B, T, false, "random record");
    // Every token stops at m under live threshold 0: the classifier runs once (at m) and no block above m runs.
    ExitLiveDepth<float> always(model, 0.0);
    const std::vector<int32_t> at_m(size_t(N), c.min_exit);
    expect_counts(model, always, at_m, B, T, true, "all exit at m");
    EXPECT_EQ(exit_pass_figures(c, at_m.data(), B, T, true).controller_evaluations, 1);
  }
}

TEST(ExitExec, FullDepthIsTheDenseFormulaAndAWrongRecordFailsTheCheck) {
  set_threads(2);
  const ExitModel<float> model = model_of(4, 24, 1);
  const ExitConfig& c = model.config();
  const int B = 2, T = 24, N = B * T;
  const std::vector<int32_t> full(size_t(N), c.n_layer);
  GatedConfig g;
  g.n_layer = c.n_layer, g.d_model = c.d_model, g.n_head = c.n_head, g.seq_len = T, g.gate = GateKind::dense;
  EXPECT_EQ(exit_pass_figures(c, full.data(), B, T, false).gemm(), gated_forward_flops(g, B, T, c.n_layer));
  // Counting a replay of one record against the formulas of another must fail.
  std::vector<int32_t> d(size_t(N), c.n_layer);
  d[5] = 1;
  const CoefficientTensor r = record_of(c, d, B, T);
  ExitReplayedDepth<float> replay(c, r);
  ExitRunState<float> rs(c, B, T);
  const auto x = tokens(N);
  ExecCounters counters;
  {
    CountingScope scope(counters);
    exit_forward(model, rs, x.data(), B, T, replay);
  }
  EXPECT_THROW(check_counters("wrong record", counters, exit_expected_counts(exit_pass_figures(c, full.data(), B, T, false))), Error);
  EXPECT_NO_THROW(check_counters("its record", counters, exit_expected_counts(exit_pass_figures(c, d.data(), B, T, false))));
  EXPECT_EQ(counters.family[size_t(family_counter_index(kPropagatedRows))].load(), c.n_layer - 1);  // token 5 of window 0, at blocks 2..L
}

}  // namespace
}  // namespace fca
