// fca's float GEMM (ops/gemm.cpp on simd::tile_matmul) against a double-precision product, over
// every layout and beta at sizes that cross its column, inner and row blocks with partial ones; and
// the property the audit relies on: a row of C is bitwise the same whatever M, the other rows and
// the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/half.h"
#include "core/threads.h"
#include "models/family_auditable.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/norms.h"
#include "ops/onednn_matmul.h"
#include "ops/simd.h"
#include "test_util.h"

namespace fca {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed) { return testing::uniform_values(n, seed); }

// op(X)(i, p) of a row-major buffer with leading dimension ld.
float at(const std::vector<float>& x, bool trans, int ld, int i, int p) {
  return trans ? x[size_t(p) * ld + i] : x[size_t(i) * ld + p];
}

TEST(Gemm, FloatMatchesADoubleProductInEveryLayout) {
  set_threads(2);
  // M crosses row chunks of 32 with a partial one, N the 256-column block (and, in the second
  // shape, the 2048 columns packed at a time), K the 256 inner block.
  // The third: more rows than columns (rows split over threads), a transposed A of 35 chunks with a
  // partial last one. The fourth: rows split over threads, across two column blocks and three inner
  // blocks.
  for (const auto [M, N, K] : {std::array<int, 3>{45, 300, 520}, std::array<int, 3>{9, 2100, 37},
                               std::array<int, 3>{1100, 40, 300}, std::array<int, 3>{700, 300, 520}})
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f, 0.5f}) {
        SCOPED_TRACE(std::string("trans_a ") + (ta ? "1" : "0") + " trans_b " + (tb ? "1" : "0") + " beta " +
                     std::to_string(beta));
        const int lda = ta ? M + 3 : K + 5, ldb = tb ? K + 2 : N + 7, ldc = N + 1;  // padded rows
        const auto a = random_values(size_t(ta ? K : M) * lda, 1), b = random_values(size_t(tb ? N : K) * ldb, 2);
        auto c = random_values(size_t(M) * ldc, 3);
        const auto c0 = c;
        gemm<float>(ta, tb, M, N, K, 0.75f, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
        double worst = 0;
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) {
            double want = 0;
            for (int p = 0; p < K; ++p) want += double(at(a, ta, lda, i, p)) * double(at(b, tb, ldb, p, j));
            want = 0.75 * want + double(beta) * double(c0[size_t(i) * ldc + j]);
            worst = std::max(worst, std::abs(double(c[size_t(i) * ldc + j]) - want));
          }
        // Sums of up to 520 products of values in [-1, 1]: size ~sqrt(520) / 3 ~ 8, float rounding
        // of the running sum ~ 520 * 2^-24 * 8 = 2.5e-4 at worst, typically 100x less.
        EXPECT_LT(worst, 1e-4) << M << " x " << N << " x " << K;
        // The padding between rows is untouched.
        for (int i = 0; i < M; ++i) ASSERT_EQ(c[size_t(i) * ldc + N], c0[size_t(i) * ldc + N]);
      }
}

TEST(Gemm, ARowDoesNotDependOnMOrTheThreadCount) {
  // Every class of shape the path rule (ops/onednn_matmul.h) sends to each kernel: oneDNN's fp32
  // brgemm (N, K >= 64; K 2100 crosses its inner blocking) and fca's own (N 40).
  const int M = 77;
  for (const auto [N, K] : {std::array<int, 2>{300, 520}, std::array<int, 2>{256, 2100}, std::array<int, 2>{40, 300}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE(std::to_string(N) + " x " + std::to_string(K) + " trans_a " + (ta ? "1" : "0") + " trans_b " + (tb ? "1" : "0"));
        const int lda = ta ? M : K, ldb = tb ? K : N;
        const auto a = random_values(size_t(ta ? K : M) * lda, 4), b = random_values(size_t(tb ? N : K) * ldb, 5);
        set_threads(2);
        std::vector<float> all(size_t(M) * N);
        gemm<float>(ta, tb, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, all.data(), N);
        // Rows 40 .. 44 and row 40 alone (a different M, chunk position and thread split), on 1 and 2
        // threads. A transposed A (only weight gradients, dW = dy^T x, whose M is a weight's
        // dimension) is held to the thread count alone: oneDNN blocks a transposed A by M.
        for (int rows : ta ? std::vector<int>{M} : std::vector<int>{5, 1})
          for (int threads : {1, 2}) {
            set_threads(threads);
            std::vector<float> some(size_t(rows) * N);
            const int first = rows == M ? 0 : 40;
            const float* a_first = ta ? a.data() + first : a.data() + size_t(first) * lda;
            gemm<float>(ta, tb, rows, N, K, 1.0f, a_first, lda, b.data(), ldb, 0.0f, some.data(), N);
            EXPECT_EQ(0, std::memcmp(some.data(), all.data() + size_t(first) * N, sizeof(float) * some.size()))
                << rows << " rows, " << threads << " threads";
          }
        set_threads(2);
      }
}

TEST(Gemm, LinearEpiloguesAreBitwiseTheUnfusedLayers) {
  // The bias as the first inner block's addend and the GELU applied per finished tile give the
  // values of the unfused layer (fill with the bias, GEMM with beta 1; then GELU over the rows),
  // with one inner block (K 200), several (K 520, the GELU after the last), and an empty product.
  set_threads(2);
  for (const auto [N, in, out] : {std::array<int, 3>{45, 200, 300}, std::array<int, 3>{70, 520, 97},
                                  std::array<int, 3>{5, 0, 33}}) {
    SCOPED_TRACE(std::to_string(N) + " x " + std::to_string(out) + " x " + std::to_string(in));
    const auto x = random_values(size_t(N) * in, 6), w = random_values(size_t(out) * in, 7);
    const auto bias = random_values(size_t(out), 8);
    std::vector<float> want(size_t(N) * out), want_act(size_t(N) * out);
    for (int n = 0; n < N; ++n) std::copy(bias.begin(), bias.end(), want.begin() + int64_t(n) * out);
    gemm<float>(false, true, N, out, in, 1.0f, x.data(), in, w.data(), in, 1.0f, want.data(), out);
    gelu_tanh_forward<float>(want_act.data(), want.data(), int64_t(N) * out);
    std::vector<float> got(size_t(N) * out, 7.0f), pre(size_t(N) * out, 7.0f), act(size_t(N) * out, 7.0f);
    linear_forward<float>(got.data(), x.data(), w.data(), bias.data(), N, in, out);
    linear_gelu_forward<float>(pre.data(), act.data(), x.data(), w.data(), bias.data(), N, in, out);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * got.size()));
    EXPECT_EQ(0, std::memcmp(pre.data(), want.data(), sizeof(float) * pre.size()));
    EXPECT_EQ(0, std::memcmp(act.data(), want_act.data(), sizeof(float) * act.size()));
    // The erf GELU (MUDD) as the epilogue, and a Linear writing a column block of a wider buffer.
    std::vector<float> want_erf(size_t(N) * out), act_erf(size_t(N) * out, 7.0f), pre_erf(size_t(N) * out, 7.0f);
    gelu_erf_forward<float>(want_erf.data(), want.data(), int64_t(N) * out);
    linear_gelu_forward<float>(pre_erf.data(), act_erf.data(), x.data(), w.data(), bias.data(), N, in, out, GeluForm::erf);
    EXPECT_EQ(0, std::memcmp(pre_erf.data(), want.data(), sizeof(float) * pre_erf.size()));
    EXPECT_EQ(0, std::memcmp(act_erf.data(), want_erf.data(), sizeof(float) * act_erf.size()));
    const int ld = out + 5;
    std::vector<float> wide(size_t(N) * ld, 7.0f);
    linear_forward<float>(wide.data() + 3, x.data(), w.data(), bias.data(), N, in, out, ld);
    for (int n = 0; n < N; ++n) {
      EXPECT_EQ(0, std::memcmp(wide.data() + int64_t(n) * ld + 3, want.data() + int64_t(n) * out, sizeof(float) * out)) << n;
      for (int j : {0, 1, 2, out + 3, out + 4}) ASSERT_EQ(wide[size_t(n) * ld + size_t(j)], 7.0f) << "written outside the block";
    }
  }
}

TEST(Gemm, LinearGroupIsBitwiseTheSeparateLayers) {
  // Layers of different widths, one writing a column block of a wider buffer, one with the erf
  // GELU as its epilogue, one without a bias, over rows split over threads (N 200) and columns
  // split (N 20); in float (one parallel region) and in double (the layers one after the other).
  set_threads(2);
  for (const int N : {200, 20}) {
    SCOPED_TRACE("N " + std::to_string(N));
    const int in = 96, wide = 3 * 64, F = 300;
    const auto x = random_values(size_t(N) * in, 11), x2 = random_values(size_t(N) * in, 12);
    const auto wa = random_values(size_t(64) * in, 13), wb = random_values(size_t(F) * in, 14);
    const auto wc = random_values(size_t(40) * in, 15), ba = random_values(64, 16), bb = random_values(size_t(F), 17);
    std::vector<float> want_a(size_t(N) * wide, 7.0f), want_pre(size_t(N) * F), want_act(size_t(N) * F),
        want_c(size_t(N) * 40);
    linear_forward<float>(want_a.data() + 64, x.data(), wa.data(), ba.data(), N, in, 64, wide);
    linear_gelu_forward<float>(want_pre.data(), want_act.data(), x2.data(), wb.data(), bb.data(), N, in, F, GeluForm::erf);
    linear_forward<float>(want_c.data(), x.data(), wc.data(), nullptr, N, in, 40);
    std::vector<float> a(size_t(N) * wide, 7.0f), pre(size_t(N) * F, 7.0f), act(size_t(N) * F, 7.0f),
        c(size_t(N) * 40, 7.0f);
    linear_forward_group<float>({{a.data() + 64, x.data(), wa.data(), ba.data(), in, 64, wide},
                                 {pre.data(), x2.data(), wb.data(), bb.data(), in, F, F, act.data(), GeluForm::erf},
                                 {c.data(), x.data(), wc.data(), nullptr, in, 40, 40}},
                                N);
    EXPECT_EQ(0, std::memcmp(a.data(), want_a.data(), sizeof(float) * a.size()));  // the other columns untouched
    EXPECT_EQ(0, std::memcmp(pre.data(), want_pre.data(), sizeof(float) * pre.size()));
    EXPECT_EQ(0, std::memcmp(act.data(), want_act.data(), sizeof(float) * act.size()));
    EXPECT_EQ(0, std::memcmp(c.data(), want_c.data(), sizeof(float) * c.size()));

    const std::vector<double> xd(x2.begin(), x2.end()), wd(wb.begin(), wb.end()), bd(bb.begin(), bb.end());
    std::vector<double> want_d(size_t(N) * F), want_act_d(size_t(N) * F), pre_d(size_t(N) * F), act_d(size_t(N) * F);
    linear_forward<double>(want_d.data(), xd.data(), wd.data(), bd.data(), N, in, F);
    gelu_erf_forward<double>(want_act_d.data(), want_d.data(), int64_t(N) * F);
    linear_forward_group<double>({{pre_d.data(), xd.data(), wd.data(), bd.data(), in, F, F, act_d.data(), GeluForm::erf}}, N);
    EXPECT_EQ(0, std::memcmp(pre_d.data(), want_d.data(), sizeof(double) * pre_d.size()));
    EXPECT_EQ(0, std::memcmp(act_d.data(), want_act_d.data(), sizeof(double) * act_d.size()));
  }
}

TEST(Gemm, PackedWeightsAreBitwisePackingPerCall) {
  // Weights packed once (PackedWeights, read under a PackedWeightsScope) give the bits of packing
  // per call: rows split over threads (N 700) and columns split (N 20), one inner block and several
  // with a partial last one (in 520), a partial last panel (out 50, 40), the fused epilogues and a
  // group. The weights are then overwritten inside the scope: a second pass that still gives the
  // old results read the packed copy (the check can fail: without the scope the results change).
  // The shapes are fca's kernel's (out or in below 64, ops/onednn_matmul.h): oneDNN reads fp32
  // weights in place, and its bf16 copy is tested in precision_test.cpp.
  set_threads(2);
  for (const auto [N, in, out] : {std::array<int, 3>{700, 200, 40}, std::array<int, 3>{20, 520, 50},
                                  std::array<int, 3>{64, 48, 768}}) {
    SCOPED_TRACE(std::to_string(N) + " x " + std::to_string(out) + " x " + std::to_string(in));
    const auto x = random_values(size_t(N) * in, 21), bias = random_values(size_t(out), 22);
    auto w = random_values(size_t(out) * in, 23), w2 = random_values(size_t(out) * in, 24);
    std::vector<float> want(size_t(N) * out), want_pre(size_t(N) * out), want_act(size_t(N) * out),
        want_2(size_t(N) * out);
    linear_forward<float>(want.data(), x.data(), w.data(), bias.data(), N, in, out);
    linear_gelu_forward<float>(want_pre.data(), want_act.data(), x.data(), w.data(), bias.data(), N, in, out, GeluForm::erf);
    linear_forward<float>(want_2.data(), x.data(), w2.data(), nullptr, N, in, out);

    PackedWeights packed;
    const auto unused = random_values(size_t(out) * in, 25);
    packed.add(w.data(), out, in);
    packed.add(w2.data(), out, in);
    packed.add(w.data(), out, in);  // added again: one entry
    packed.add(unused.data(), out, in);
    EXPECT_EQ(packed.count(), 0u);  // nothing packed before a GEMM reads it
    EXPECT_EQ(packed.bytes(), 0u);
    std::vector<float> got(size_t(N) * out, 7.0f), pre(size_t(N) * out, 7.0f), act(size_t(N) * out, 7.0f),
        got_2(size_t(N) * out, 7.0f);
    {
      const PackedWeightsScope scope(&packed);
      for (int pass = 0; pass < 2; ++pass) {  // the first packs what it reads, the second reuses it
        if (pass == 1) {
          std::fill(w.begin(), w.end(), 0.0f);  // only the packed copy holds the weights now
          std::fill(w2.begin(), w2.end(), 0.0f);
        }
        linear_forward<float>(got.data(), x.data(), w.data(), bias.data(), N, in, out);
        linear_forward_group<float>({{pre.data(), x.data(), w.data(), bias.data(), in, out, out, act.data(), GeluForm::erf},
                                     {got_2.data(), x.data(), w2.data(), nullptr, in, out, out}},
                                    N);
      }
    }
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * got.size()));
    EXPECT_EQ(0, std::memcmp(pre.data(), want_pre.data(), sizeof(float) * pre.size()));
    EXPECT_EQ(0, std::memcmp(act.data(), want_act.data(), sizeof(float) * act.size()));
    EXPECT_EQ(0, std::memcmp(got_2.data(), want_2.data(), sizeof(float) * got_2.size()));
    EXPECT_EQ(packed.count(), 2u);  // the two weights read, not the unused one
    EXPECT_EQ(packed.bytes(), 2 * size_t(out) * in * sizeof(float));
    EXPECT_EQ(packed.packed(w.data(), out, in + 1), nullptr);  // another shape is not this weight
    // Outside the scope the zeroed weights are read: the bias alone.
    linear_forward<float>(got.data(), x.data(), w.data(), bias.data(), N, in, out);
    EXPECT_EQ(got[0], bias[0]);
    EXPECT_NE(0, std::memcmp(got.data(), want.data(), sizeof(float) * got.size()));
  }
}

TEST(Gemm, OnednnReadsKeptWeightsBlockedWithThePlainLayoutsBits) {
  // The products oneDNN runs (out and in >= 64, ops/onednn_matmul.h) read a kept weight from its
  // copy in oneDNN's blocked layout (OnednnBlockedWeights), made once: bitwise the results of the
  // plain layout, in fp32 and in bf16, with and without the fused GELU, for M of 1, 17 and 300.
  // The weights are then zeroed inside the scope: a second pass that still gives the old results
  // read the blocked copy (oneDNN read fp32 weights in place before; that pass then failed).
  set_threads(2);
  for (const MatmulPrecision precision : {MatmulPrecision::fp32, MatmulPrecision::bf16}) {
    const MatmulPrecisionScope in_precision(precision);
    for (const auto [N, in, out] : {std::array<int, 3>{300, 256, 384}, std::array<int, 3>{17, 1024, 256},
                                    std::array<int, 3>{1, 256, 1024}}) {
      SCOPED_TRACE(std::string(matmul_precision_name(precision)) + " " + std::to_string(N) + " x " +
                   std::to_string(out) + " x " + std::to_string(in));
      const auto x = random_values(size_t(N) * in, 51), bias = random_values(size_t(out), 52);
      auto w = random_values(size_t(out) * in, 53);
      std::vector<float> want(size_t(N) * out), want_pre(want.size()), want_act(want.size());
      linear_forward<float>(want.data(), x.data(), w.data(), bias.data(), N, in, out);
      linear_gelu_forward<float>(want_pre.data(), want_act.data(), x.data(), w.data(), bias.data(), N, in, out);
      PackedWeights packed;
      packed.add(w.data(), out, in);
      std::vector<float> got(want.size(), 7.0f), pre(want.size(), 7.0f), act(want.size(), 7.0f);
      {
        const PackedWeightsScope scope(&packed);
        for (int pass = 0; pass < 2; ++pass) {
          if (pass == 1) std::fill(w.begin(), w.end(), 0.0f);  // only the copies hold the weights now
          linear_forward<float>(got.data(), x.data(), w.data(), bias.data(), N, in, out);
          linear_gelu_forward<float>(pre.data(), act.data(), x.data(), w.data(), bias.data(), N, in, out);
          EXPECT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * got.size())) << "pass " << pass;
          EXPECT_EQ(0, std::memcmp(pre.data(), want_pre.data(), sizeof(float) * pre.size())) << "pass " << pass;
          EXPECT_EQ(0, std::memcmp(act.data(), want_act.data(), sizeof(float) * act.size())) << "pass " << pass;
        }
      }
      EXPECT_GE(packed.onednn_blocked(w.data(), out, in)->bytes(), size_t(out) * in * (precision == MatmulPrecision::bf16 ? 2 : 4));
      EXPECT_EQ(packed.count(), 1u);
    }
  }
}

TEST(Gemm, MlpForwardIsItsTwoLayersAndKeepsItsHiddenActivationInBf16) {
  // Both GELU forms. fp32 and double: bitwise linear_gelu_forward then linear_forward (or the GEMM
  // onto y). bf16: against a double reference of what the mode computes, hidden = bf16(GELU(bf16(x)
  // bf16(Wfc)^T + bfc)), y = hidden bf16(Wproj)^T + bproj (+ y). The tolerance, 1e-3 on outputs of
  // size ~0.5: fp32 accumulation and oneDNN's tanh differ from the double reference by ~1e-6
  // relative, which can move a hidden value across a bf16 rounding boundary (one step, 2^-8
  // relative: ~4e-3 x a weight of ~0.06 = 2.5e-4 per moved value, a few per row at most). A GELU,
  // a bias or a rounding left out moves y by 1e-2 or more. pre and act stay unwritten in bf16.
  set_threads(2);
  for (const auto [N, D, F] : {std::array<int, 3>{37, 64, 256}, std::array<int, 3>{300, 48, 192}}) {
    SCOPED_TRACE(std::to_string(N) + " x " + std::to_string(D) + " x " + std::to_string(F));
    const auto x = random_values(size_t(N) * D, 61), fc_b = random_values(size_t(F), 62), proj_b = random_values(size_t(D), 63);
    auto fc_w = random_values(size_t(F) * D, 64), proj_w = random_values(size_t(D) * F, 65);
    for (auto& w : fc_w) w *= 0.2f;
    for (auto& w : proj_w) w *= 0.12f;
    const auto y0 = random_values(size_t(N) * D, 66);
    for (const auto& [accumulate, form] : {std::pair{false, GeluForm::tanh}, std::pair{true, GeluForm::tanh},
                                          std::pair{false, GeluForm::erf}}) {
      SCOPED_TRACE(std::string(accumulate ? "accumulate" : "with bias") + (form == GeluForm::erf ? ", erf" : ", tanh"));
      const float* bias = accumulate ? nullptr : proj_b.data();
      std::vector<float> want_pre(size_t(N) * F), want_act(want_pre.size()), want = y0;
      linear_gelu_forward<float>(want_pre.data(), want_act.data(), x.data(), fc_w.data(), fc_b.data(), N, D, F, form);
      if (accumulate) gemm<float>(false, true, N, D, F, 1.0f, want_act.data(), F, proj_w.data(), F, 1.0f, want.data(), D);
      else linear_forward<float>(want.data(), want_act.data(), proj_w.data(), bias, N, F, D);
      std::vector<float> pre(want_pre.size(), 7.0f), act(want_pre.size(), 7.0f), got = y0;
      mlp_forward<float>(got.data(), pre.data(), act.data(), x.data(), fc_w.data(), fc_b.data(), proj_w.data(), bias, N, D, F,
                         accumulate, form);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * got.size()));
      EXPECT_EQ(0, std::memcmp(act.data(), want_act.data(), sizeof(float) * act.size()));
      // double: the same composition
      const auto to_d = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
      const auto xd = to_d(x), fwd = to_d(fc_w), fbd = to_d(fc_b), pwd = to_d(proj_w), pbd = to_d(proj_b);
      std::vector<double> dpre(pre.size()), dact(pre.size()), dwant = to_d(y0), dgot = to_d(y0);
      linear_gelu_forward<double>(dpre.data(), dact.data(), xd.data(), fwd.data(), fbd.data(), N, D, F, form);
      if (accumulate) gemm<double>(false, true, N, D, F, 1.0, dact.data(), F, pwd.data(), F, 1.0, dwant.data(), D);
      else linear_forward<double>(dwant.data(), dact.data(), pwd.data(), pbd.data(), N, F, D);
      mlp_forward<double>(dgot.data(), dpre.data(), dact.data(), xd.data(), fwd.data(), fbd.data(), pwd.data(),
                          accumulate ? nullptr : pbd.data(), N, D, F, accumulate, form);
      EXPECT_EQ(0, std::memcmp(dgot.data(), dwant.data(), sizeof(double) * dgot.size()));
      // bf16
      const MatmulPrecisionScope in_bf16(MatmulPrecision::bf16);
      std::vector<float> bpre(pre.size(), 7.0f), bact(pre.size(), 7.0f), bgot = y0;
      mlp_forward<float>(bgot.data(), bpre.data(), bact.data(), x.data(), fc_w.data(), fc_b.data(), proj_w.data(), bias, N, D, F,
                         accumulate, form);
      double worst = 0;
      for (int n = 0; n < N; ++n) {
        std::vector<double> hidden(static_cast<size_t>(F));
        for (int f = 0; f < F; ++f) {
          double s = fc_b[size_t(f)];
          for (int k = 0; k < D; ++k)
            s += double(round_through_bf16(x[size_t(n) * D + k])) * double(round_through_bf16(fc_w[size_t(f) * D + k]));
          const double g = form == GeluForm::tanh ? 0.5 * s * (1.0 + std::tanh(0.7978845608028654 * (s + 0.044715 * s * s * s)))
                                                  : 0.5 * s * (1.0 + std::erf(s / std::sqrt(2.0)));
          hidden[size_t(f)] = double(round_through_bf16(float(g)));
        }
        for (int d = 0; d < D; ++d) {
          double s = accumulate ? double(y0[size_t(n) * D + d]) : double(proj_b[size_t(d)]);
          for (int f = 0; f < F; ++f) s += hidden[size_t(f)] * double(round_through_bf16(proj_w[size_t(d) * F + f]));
          worst = std::max(worst, std::abs(s - double(bgot[size_t(n) * D + d])));
        }
      }
      EXPECT_LT(worst, 1e-3);
      EXPECT_TRUE(std::all_of(bpre.begin(), bpre.end(), [](float v) { return v == 7.0f; }));
      EXPECT_TRUE(std::all_of(bact.begin(), bact.end(), [](float v) { return v == 7.0f; }));
    }
  }
}

TEST(Gemm, KeptWeightsAreEveryMatrixAndEachExpertSlice) {
  // declare_packable_weights (models/family_auditable.h) keeps the rank-2 tensors and each [out, in]
  // slice of a rank-3 one (the MoE's experts: their Linear weights are those slices), not vectors.
  struct Model {
    std::vector<TensorSlot> slots{{"w", {8, 4}, 0, 32, true}, {"experts", {3, 8, 4}, 32, 96, true}, {"b", {8}, 128, 8, false}};
    std::vector<float> values = random_values(136, 71);
    const std::vector<TensorSlot>& layout() const { return slots; }
    const float* slot(size_t i) const { return values.data() + slots[i].offset; }
  } model;
  PackedWeights packed;
  declare_packable_weights(packed, model);
  EXPECT_NE(packed.bf16(model.slot(0), 8, 4), nullptr);
  for (int g = 0; g < 3; ++g) EXPECT_NE(packed.bf16(model.slot(1) + g * 32, 8, 4), nullptr) << "expert " << g;
  EXPECT_EQ(packed.bf16(model.slot(1) + 1, 8, 4), nullptr);  // not a slice's start
  EXPECT_EQ(packed.bf16(model.slot(2), 8, 1), nullptr);      // a bias is no Linear weight
}

TEST(Gemm, UnitsAThreadLeavesAreComputedByAnother) {
  // Units of work move between threads (UnitRuns, core/threads.h): a thread that runs out of its
  // own takes the rest of another's run from its end. Two ways to make that happen, each checked
  // bitwise against one thread: (1) a GEMM called inside a parallel region runs in a team of one
  // that still cuts C for omp_get_max_threads() threads, so the one thread must take every other
  // thread's run (a unit never taken stays at the fill value 7); (2) more threads than cores, where
  // which thread computes which unit varies from run to run. Rows split (N 700) and columns split
  // (N 20, out 768), with weights packed once (many units per thread) and packed per call.
  const std::array<std::array<int, 3>, 3> shapes{{{700, 200, 300}, {20, 520, 97}, {20, 256, 768}}};
  for (const auto [N, in, out] : shapes)
    for (const bool prepacked : {false, true}) {
      SCOPED_TRACE(std::to_string(N) + " x " + std::to_string(out) + " x " + std::to_string(in) +
                   (prepacked ? " packed once" : " packed per call"));
      const auto x = random_values(size_t(N) * in, 41), w = random_values(size_t(out) * in, 42),
                 bias = random_values(size_t(out), 43);
      PackedWeights packed;
      packed.add(w.data(), out, in);
      const auto forward = [&](float* pre, float* act) {
        const PackedWeightsScope scope(prepacked ? &packed : nullptr);
        linear_gelu_forward<float>(pre, act, x.data(), w.data(), bias.data(), N, in, out, GeluForm::erf);
      };
      set_threads(1);
      std::vector<float> want_pre(size_t(N) * out), want_act(size_t(N) * out);
      forward(want_pre.data(), want_act.data());

      set_threads(2);
      std::vector<std::vector<float>> pre(2, std::vector<float>(size_t(N) * out, 7.0f)), act = pre;
      int max_threads_inside = 0;
      // Nested parallelism off (OpenMP's default, made explicit): the inner regions are teams of
      // one. Both threads read `packed`, which the reference call above has already packed (a first
      // use writes to it).
      const int levels = omp_get_max_active_levels();
      omp_set_max_active_levels(1);
#pragma omp parallel num_threads(2)
      {
        const int me = omp_get_thread_num();
#pragma omp critical
        max_threads_inside = std::max(max_threads_inside, omp_get_max_threads());
        forward(pre[me].data(), act[me].data());
      }
      omp_set_max_active_levels(levels);
      ASSERT_GE(max_threads_inside, 2);  // else the nested call had no other thread's run to take
      for (int t = 0; t < 2; ++t) {
        EXPECT_EQ(0, std::memcmp(pre[t].data(), want_pre.data(), sizeof(float) * want_pre.size())) << t;
        EXPECT_EQ(0, std::memcmp(act[t].data(), want_act.data(), sizeof(float) * want_act.size())) << t;
      }

      set_threads(7);
      for (int run = 0; run < 5; ++run) {
        std::vector<float> got_pre(size_t(N) * out, 7.0f), got_act(size_t(N) * out, 7.0f);
        forward(got_pre.data(), got_act.data());
        EXPECT_EQ(0, std::memcmp(got_pre.data(), want_pre.data(), sizeof(float) * want_pre.size())) << run;
        EXPECT_EQ(0, std::memcmp(got_act.data(), want_act.data(), sizeof(float) * want_act.size())) << run;
      }
      set_threads(2);
    }
}

TEST(Gemm, AGroupCalledInATeamOfOneComputesEveryUnit) {
  // A group of Linear layers (one with an empty inner dimension, which the group skips before its
  // parallel region, so the others' units are indexed after it) called by one thread of a parallel
  // region: the team of one takes every thread's runs of every layer; bitwise the layers alone.
  set_threads(2);
  const int N = 300, in = 130, out = 70;
  const auto x = random_values(size_t(N) * in, 51), w1 = random_values(size_t(out) * in, 52),
             w2 = random_values(size_t(out) * in, 53), bias = random_values(size_t(out), 54);
  std::vector<float> want1(size_t(N) * out), want2(size_t(N) * out), want_empty(size_t(N) * out);
  linear_forward<float>(want1.data(), x.data(), w1.data(), bias.data(), N, in, out);
  linear_forward<float>(want_empty.data(), x.data(), w1.data(), bias.data(), N, 0, out);
  linear_forward<float>(want2.data(), x.data(), w2.data(), nullptr, N, in, out);
  std::vector<float> got1(want1.size(), 7.0f), got2(want2.size(), 7.0f), got_empty(want_empty.size(), 7.0f);
  const int levels = omp_get_max_active_levels();
  omp_set_max_active_levels(1);
#pragma omp parallel num_threads(2)
  if (omp_get_thread_num() == 0)
    linear_forward_group<float>({{got1.data(), x.data(), w1.data(), bias.data(), in, out, out},
                                 {got_empty.data(), x.data(), w1.data(), bias.data(), 0, out, out},
                                 {got2.data(), x.data(), w2.data(), nullptr, in, out, out}},
                                N);
  omp_set_max_active_levels(levels);
  EXPECT_EQ(0, std::memcmp(got1.data(), want1.data(), sizeof(float) * want1.size()));
  EXPECT_EQ(0, std::memcmp(got_empty.data(), want_empty.data(), sizeof(float) * want_empty.size()));
  EXPECT_EQ(0, std::memcmp(got2.data(), want2.data(), sizeof(float) * want2.size()));
}

TEST(Gemm, PackedWeightsFollowThePanelWidthOfTheTarget) {
  // Packed under one target, read under every other this CPU has (the panel width follows the
  // register tile: 2 .. 32): repacked where the width changed, so each target gives its own
  // per-call result bitwise.
  set_threads(2);
  const int N = 40, in = 300, out = 70;
  const auto x = random_values(size_t(N) * in, 31), w = random_values(size_t(out) * in, 32);
  PackedWeights packed;
  packed.add(w.data(), out, in);
  std::vector<float> want(size_t(N) * out), got(size_t(N) * out);
  {
    const PackedWeightsScope scope(&packed);
    linear_forward<float>(got.data(), x.data(), w.data(), nullptr, N, in, out);
  }
  for (const simd::Target& target : simd::available_targets()) {
    SCOPED_TRACE(target.name);
    simd::force_target(target.bit);
    linear_forward<float>(want.data(), x.data(), w.data(), nullptr, N, in, out);
    {
      const PackedWeightsScope scope(&packed);
      linear_forward<float>(got.data(), x.data(), w.data(), nullptr, N, in, out);
    }
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * got.size()));
  }
  simd::force_target(0);
}

}  // namespace
}  // namespace fca
