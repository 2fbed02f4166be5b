// The Dense baseline of the shared block (models/base/dense.h): it reproduces the gated family's
// Dense variant (g = 1) bit for bit from the same seed, since h + 1 F is h + F exactly and the two
// lay out and initialise the same tensors; it counts its GEMMs by dense_forward_flops (checked by
// hand) and no controller; a bad shape is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/exec_counters.h"
#include "core/rng.h"
#include "core/threads.h"
#include "models/base/dense.h"
#include "ops/attention.h"
#include "models/gated/forward.h"

namespace fca {
namespace {

TEST(DenseBaseline, ReproducesTheGatedDenseVariantBitForBit) {
  set_threads(2);
  const int L = 3, D = 16, H = 2, T = 16, B = 3;
  GatedConfig c;
  c.n_layer = L;
  c.d_model = D;
  c.n_head = H;
  c.seq_len = T;
  c.gate = GateKind::dense;
  const GatedModel<float> gated = GatedModel<float>::initialized(c, 5);
  GatedRunState<float> gated_rs(c, B, T, false);
  LiveCoefficients<float> live(gated);
  const DenseModel dense(DenseShape{L, D, H, T}, 5);
  DenseRunState rs(dense, B);
  Rng rng(3);
  std::vector<int32_t> tokens(size_t(B) * T);
  for (auto& t : tokens) t = int32_t(rng.below(256));
  gated_forward(gated, gated_rs, tokens.data(), B, T, live);
  dense_forward(dense, rs, tokens.data(), B, T);
  const size_t n = size_t(B) * T * kByteVocab;
  EXPECT_EQ(std::memcmp(rs.logits, gated_rs.logits, n * sizeof(float)), 0);
  // The check can fail: another seed's weights give other logits.
  const DenseModel other(DenseShape{L, D, H, T}, 6);
  dense_forward(other, rs, tokens.data(), B, T);
  EXPECT_NE(std::memcmp(rs.logits, gated_rs.logits, n * sizeof(float)), 0);
}

TEST(DenseBaseline, CountsItsGemmsAndNoController) {
  const int L = 2, D = 16, H = 2, T = 16, B = 2;
  const DenseModel dense(DenseShape{L, D, H, T}, 1);
  DenseRunState rs(dense, B);
  std::vector<int32_t> tokens(size_t(B) * T, 7);
  ExecCounters counters;
  {
    const CountingScope scope(counters);
    dense_forward(dense, rs, tokens.data(), B, T);
  }
  EXPECT_EQ(counters.blocks_executed, L);
  EXPECT_EQ(double(counters.gemm_flops), dense_forward_flops(D, B, T, L));
  EXPECT_EQ(counters.controller_flops, 0);
  EXPECT_EQ(counters.mixing_flops, 0);
  EXPECT_EQ(counters.controller_evaluations, 0);
  // The formula by hand: per block 2 N 12 D^2 (four linear maps) + 4 B P D, P = 256 (query, key)
  // pairs the causal kernel runs for T 16 (one tile, computed whole), and the head 2 N D 256.
  const double N = B * T;
  EXPECT_EQ(attention_executed_pairs(T), 256);
  EXPECT_EQ(dense_forward_flops(D, B, T, L), L * (2 * N * 12 * D * D + 4.0 * B * 256 * D) + 2 * N * D * 256);
}

TEST(DenseBaseline, ABadShapeIsRefused) {
  EXPECT_THROW(DenseModel(DenseShape{2, 16, 3, 16}, 1), Error);
  EXPECT_THROW(DenseModel(DenseShape{0, 16, 2, 16}, 1), Error);
  const DenseModel dense(DenseShape{1, 16, 2, 8}, 1);
  DenseRunState rs(dense, 1);
  std::vector<int32_t> tokens(16, 1);
  EXPECT_THROW(dense_forward(dense, rs, tokens.data(), 2, 8), Error);   // more windows than the run state holds
  EXPECT_THROW(dense_forward(dense, rs, tokens.data(), 1, 16), Error);  // more tokens than positions
}

}  // namespace
}  // namespace fca
