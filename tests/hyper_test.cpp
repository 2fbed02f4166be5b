// The hyper-connection family (docs/hyper.md): the forward pass of SHC, DHC and
// mHC against the golden fixture of an independent PyTorch implementation
// (tests/fixtures/make_hyper_fixture.py); recording and exact replay (bitwise, no controller
// evaluation, SHC included); the Pre-Norm equivalence of the initialisation; Sinkhorn; checkpoints.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "core/threads.h"
#include "models/gated/model.h"
#include "models/hyper/forward.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "test_util.h"

namespace fca {
namespace {

using testing::expect_close;

const std::string kFixture = std::string(FCA_SOURCE_DIR) + "/tests/fixtures/hyper_tiny.safetensors";

struct Fixture {
  explicit Fixture(const std::string& V) : reader(kFixture) {
    config = HyperConfig::from_json(reader.metadata().at(V + ".config"), kFixture);
    model = HyperModel<float>(config);
    for (const auto& s : model.layout()) reader.read_into<float>(V + ".param." + s.name, s.shape, model.tensor(s.name));
    const auto tokens = reader.read_as_double(V + ".tokens");
    B = int(reader.get(V + ".tokens").shape[0]);
    T = config.seq_len;
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        inputs.push_back(int32_t(tokens[size_t(b * (T + 1) + t)]));
        targets.push_back(int32_t(tokens[size_t(b * (T + 1) + t + 1)]));
      }
  }
  SafetensorsReader reader;
  HyperConfig config;
  HyperModel<float> model;
  int B = 0, T = 0;
  std::vector<int32_t> inputs, targets;
};

// Tolerances: the float32 rerun of the reference differs from its float64 values by at most 6.2e-7
// (logits, |values| up to 1.5) and 3.1e-7 (coefficients, up to 2): the rounding level of float32.
// fca's float pass adds its approximate exp and tanh (2-3 ulp, ops/fast_math.h) and its own
// summation orders; 2e-5 relative plus 2e-6 absolute is ten times that level, far below any
// wrong index or missing term (those move values by O(0.1)).
void check_variant(const std::string& V) {
  set_threads(2);
  Fixture f(V);
  HyperRunState<float> rs(f.config, f.B, f.T, true);
  HyperLiveCoefficients<float> live(f.model);
  hyper_forward(f.model, rs, f.inputs.data(), f.B, f.T, live);
  std::vector<double> window_nll(size_t(f.B));
  const double loss = hyper_loss(rs, f.targets.data(), window_nll.data());
  expect_close(V + ".coefficients", rs.coefficients, f.reader.read_as_double(V + ".coefficients"), 2e-5, 2e-6);
  expect_close(V + ".logits", rs.logits, f.reader.read_as_double(V + ".logits"), 2e-5, 2e-6);
  const std::vector<float> ours_loss{float(loss)}, ours_nll{float(window_nll[0]), float(window_nll[1])};
  expect_close(V + ".loss", ours_loss.data(), f.reader.read_as_double(V + ".loss"), 2e-5, 2e-6);
  expect_close(V + ".window_nll", ours_nll.data(), f.reader.read_as_double(V + ".window_nll"), 2e-5, 2e-6);
  EXPECT_EQ(rs.controller_evaluations, f.config.sites());
}

TEST(HyperFixture, Shc) { check_variant("shc"); }
TEST(HyperFixture, Dhc) { check_variant("dhc"); }
TEST(HyperFixture, Mhc) { check_variant("mhc"); }

// Recording then replaying gives the live logits bit for bit, and the replay evaluates no
// controller: SHC's constant copy counts as an evaluation, so the check can fail for SHC too.
TEST(HyperReplay, ExactReplayIsBitwiseWithNoControllerEvaluation) {
  set_threads(2);
  for (const char* V : {"shc", "dhc", "mhc"}) {
    SCOPED_TRACE(V);
    Fixture f(V);
    CoefficientTensor cache = hyper_coefficient_tensor(f.config, f.B, f.T);
    EXPECT_FALSE(cache.valid(0, 0, 0));
    EXPECT_TRUE(cache.valid(0, 0, 1));
    HyperRunState<float> live_rs(f.config, f.B, f.T, false), replay_rs(f.config, f.B, f.T, false);
    HyperRecordingCoefficients<float> recording(f.model, cache);
    hyper_forward(f.model, live_rs, f.inputs.data(), f.B, f.T, recording);
    HyperReplayedCoefficients<float> replayed(cache);
    EXPECT_FALSE(replayed.evaluates_controller());
    std::fill(replay_rs.logits, replay_rs.logits + size_t(f.B) * f.T * kByteVocab, std::nanf(""));
    hyper_forward(f.model, replay_rs, f.inputs.data(), f.B, f.T, replayed);
    EXPECT_EQ(0, std::memcmp(live_rs.logits, replay_rs.logits, sizeof(float) * size_t(f.B) * f.T * kByteVocab));
    EXPECT_EQ(live_rs.controller_evaluations, f.config.sites());
    EXPECT_EQ(replay_rs.controller_evaluations, 0);
    // A changed coefficient changes the replay: the check can fail.
    cache.at(1, 2, 3, 1, 2) += 0.25f;
    hyper_forward(f.model, replay_rs, f.inputs.data(), f.B, f.T, replayed);
    EXPECT_NE(0, std::memcmp(live_rs.logits, replay_rs.logits, sizeof(float) * size_t(f.B) * f.T * kByteVocab));
  }
}

// docs/hyper.md, "Parameters and initialisation": it is Pre-Norm. SHC and DHC (dynamic weights 0) start
// with the read one-hot, writes 1 and mixing I, so every stream is the dense residual stream with
// the two updates added at two sites, (h + u) + w, and the collapse is n h: bitwise the dense
// blocks of the same weights run that way. mHC reads 1.54 x and mixes by a doubly stochastic matrix
// within 1e-6 of its rows: the block LayerNorms see a scaled input, about 1e-3 relative.
TEST(HyperInit, StepZeroIsThePreNormDenseModel) {
  set_threads(2);
  const int B = 2, T = 16, D = 32;
  std::vector<int32_t> tokens(size_t(B) * T);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 37 + 11) % 256);
  for (HyperVariant v : {HyperVariant::shc, HyperVariant::dhc, HyperVariant::mhc}) {
    SCOPED_TRACE(hyper_variant_name(v));
    HyperConfig c;
    c.n_layer = 3, c.d_model = D, c.n_head = 2, c.seq_len = T, c.variant = v, c.streams = 4;
    const HyperModel<float> model = HyperModel<float>::initialized(c, 5);
    // The block weights are the dense gated model's of the same seed (the hc tensors draw nothing).
    GatedConfig g;
    g.n_layer = c.n_layer, g.d_model = D, g.n_head = c.n_head, g.seq_len = T, g.gate = GateKind::dense;
    const GatedModel<float> dense = GatedModel<float>::initialized(g, 5);
    for (const auto& s : dense.layout())
      ASSERT_EQ(0, std::memcmp(dense.tensor(s.name), model.tensor(s.name), sizeof(float) * s.numel)) << s.name;

    HyperRunState<float> rs(c, B, T, false);
    HyperLiveCoefficients<float> live(model);
    hyper_forward(model, rs, tokens.data(), B, T, live);

    // The dense two-site pass by hand, on another run state's buffers.
    HyperRunState<float> by_hand(c, B, T, false);
    const int64_t N = int64_t(B) * T;
    stream_embed(by_hand, tokens.data(), model.weights().wte, model.weights().wpe, B, T, D);
    std::vector<float> h(by_hand.hidden[0], by_hand.hidden[0] + N * D);
    for (int l = 0; l < c.n_layer; ++l) {
      BlockActivations<float>& a = by_hand.blocks[0];
      attention_branch_forward(a, by_hand.attn_scratch, model.weights().blocks[size_t(l)], h.data(), B, T, D, c.n_head,
                               static_cast<const AttentionStats<float>*>(nullptr));
      for (int64_t i = 0; i < N * D; ++i) h[size_t(i)] = a.u[i] + h[size_t(i)];
      std::copy(h.begin(), h.end(), a.ln2_in);
      mlp_branch_forward(a, model.weights().blocks[size_t(l)], int(N), D);
      for (int64_t i = 0; i < N * D; ++i) h[size_t(i)] = a.update[i] + h[size_t(i)];
    }
    for (float& x : h) x = (x + x) + (x + x);
    std::vector<float> normed(size_t(N) * D), logits(size_t(N) * kByteVocab);
    std::vector<float> mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
    layernorm_forward(normed.data(), mean.data(), rstd.data(), h.data(), model.weights().ln_f_weight,
                      model.weights().ln_f_bias, N, D);
    gemm<float>(false, true, int(N), kByteVocab, D, 1.0f, normed.data(), D, model.weights().wte, D, 0.0f, logits.data(),
                kByteVocab);
    if (v != HyperVariant::mhc) {
      EXPECT_EQ(0, std::memcmp(logits.data(), rs.logits, sizeof(float) * logits.size()));
    } else {
      double worst = 0, scale = 0;
      for (size_t i = 0; i < logits.size(); ++i) {
        worst = std::max(worst, double(std::abs(logits[i] - rs.logits[i])));
        scale = std::max(scale, double(std::abs(logits[i])));
      }
      EXPECT_LT(worst / scale, 5e-3);
      EXPECT_GT(worst, 0.0);  // not Pre-Norm to the bit: the reads are 1.54 x, not x
    }
  }
}

// One n x n matrix projected in lane 0 of a block whose other lanes are 0.
void hyper_sinkhorn(float* Z, int n, int iters, float eps) {
  std::vector<float> lanes(size_t(n) * n * kSinkhornLanes, 0.0f);
  for (int e = 0; e < n * n; ++e) lanes[size_t(e) * kSinkhornLanes] = Z[e];
  hyper_sinkhorn_lanes(lanes.data(), n, iters, eps);
  for (int e = 0; e < n * n; ++e) Z[e] = lanes[size_t(e) * kSinkhornLanes];
}

TEST(HyperSinkhorn, RowsSumToOneAndTheProjectionIsDoublyStochasticNearTheIdentity) {
  // A non-symmetric matrix of logits (the square's orientation is only tested by one).
  const int n = 4;
  float Z[n * n];
  for (int i = 0; i < n * n; ++i) Z[i] = float(std::sin(1.7 * i) * 3.0);
  hyper_sinkhorn(Z, n, 20, 1e-6f);
  for (int s = 0; s < n; ++s) {
    float row = 0;
    for (int k = 0; k < n; ++k) row += Z[s * n + k];
    EXPECT_NEAR(row, 1.0f, 1e-5f) << "row " << s;
  }
  // mHC's initial mixing logits (diagonal 0, off-diagonal -8): diagonal 0.9989907 and
  // off-diagonal 3.3612e-4, doubly stochastic already.
  float I[n * n];
  for (int s = 0; s < n; ++s)
    for (int k = 0; k < n; ++k) I[s * n + k] = s == k ? 0.0f : -8.0f;
  hyper_sinkhorn(I, n, 20, 1e-6f);
  EXPECT_NEAR(I[0], 0.9989907f, 2e-6f);
  EXPECT_NEAR(I[1], 3.3612e-4f, 2e-8f);
}

// Lanes never mix: every lane of a block of different matrices is bitwise the same matrix
// projected alone (in lane 0, the other lanes 0), forward and backward, for sharp and flat logits
// and odd n. That is what makes a token's coefficients and gradients independent of its batch.
TEST(HyperSinkhorn, LanesAreIndependent) {
  const int W = kSinkhornLanes, iters = 20;
  for (int n : {1, 3, 4}) {
    const size_t nn = size_t(n) * n;
    std::vector<float> Z(nn * W), dM(nn * W), M, dZ(nn * W), work(size_t(2 * iters + 3) * nn * W);
    for (int q = 0; q < W; ++q)
      for (size_t e = 0; e < nn; ++e) {
        Z[e * W + q] = float(std::sin(1.3 * double(e) + 0.7 * q) * (1 + q));
        dM[e * W + q] = float(std::cos(0.9 * double(e) - 0.4 * q));
      }
    M = Z;
    hyper_sinkhorn_lanes(M.data(), n, iters, 1e-6f);
    hyper_sinkhorn_backward_lanes(Z.data(), n, iters, 1e-6f, dM.data(), dZ.data(), work.data());
    for (int q = 0; q < W; ++q) {
      std::vector<float> z1(nn * W, 0.0f), d1(nn * W, 0.0f), dz1(nn * W), m1;
      for (size_t e = 0; e < nn; ++e) z1[e * W] = Z[e * W + q], d1[e * W] = dM[e * W + q];
      m1 = z1;
      hyper_sinkhorn_lanes(m1.data(), n, iters, 1e-6f);
      hyper_sinkhorn_backward_lanes(z1.data(), n, iters, 1e-6f, d1.data(), dz1.data(), work.data());
      for (size_t e = 0; e < nn; ++e) {
        ASSERT_EQ(std::memcmp(&m1[e * W], &M[e * W + q], sizeof(float)), 0) << "n " << n << " lane " << q << " entry " << e;
        ASSERT_EQ(std::memcmp(&dz1[e * W], &dZ[e * W + q], sizeof(float)), 0) << "n " << n << " lane " << q << " entry " << e;
      }
    }
  }
}

TEST(HyperCheckpoint, SavedAndLoadedWithEveryCheck) {
  Fixture f("mhc");
  testing::TempDir dir;
  const std::string path = dir.file("mhc.safetensors");
  f.model.save(path);
  const HyperModel<float> loaded = load_hyper_model(path);
  EXPECT_TRUE(loaded.config() == f.config);
  EXPECT_EQ(0, std::memcmp(loaded.data(), f.model.data(), sizeof(float) * f.model.buffer_size()));
  // The masked entry [0, 0] must be 0.
  HyperModel<float> bad = f.model;
  bad.tensor("hc.3.static")[0] = 0.5f;
  bad.save(dir.file("bad.safetensors"));
  try {
    load_hyper_model(dir.file("bad.safetensors"));
    ADD_FAILURE() << "loaded a static square with [0, 0] != 0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hc.3.static"), std::string::npos) << e.what();
  }
  // Unknown variants and out-of-range settings are refused, naming the field.
  std::string config = f.config.to_json();
  config.replace(config.find("\"mhc\""), 5, "\"xhc\"");
  EXPECT_THROW(HyperConfig::from_json(config, "x"), Error);
  HyperConfig c = f.config;
  c.streams = 0;
  EXPECT_THROW(c.validate("flags"), Error);
  c = f.config;
  c.eps = 0;
  EXPECT_THROW(c.validate("flags"), Error);
}

TEST(HyperLayout, StaticAndScaleTensorsAreNotDecayed) {
  for (HyperVariant v : {HyperVariant::shc, HyperVariant::dhc, HyperVariant::mhc}) {
    HyperConfig c;
    c.variant = v;
    for (const TensorSlot& s : hyper_tensor_layout(c)) {
      if (s.name.starts_with("hc.") && !s.name.ends_with("dyn.weight")) {
        EXPECT_FALSE(s.weight_decay) << s.name;
      } else {
        EXPECT_EQ(s.weight_decay, s.shape.size() == 2) << s.name;
      }
    }
  }
}

}  // namespace
}  // namespace fca

namespace fca {
namespace {

// fca trace of a hyper model names every site's streams and read (docs/hyper.md): the reads are the
// streams weighted by the traced coefficients' row 0 (the same products and additions in order, so
// bitwise), hidden.1 is the pairwise collapse of the last streams, and a replay of the trace's
// coefficients gives every intermediate bit for bit.
TEST(HyperTrace, StreamsAndReadsAreNamedAndConsistentWithTheCoefficients) {
  Fixture f("mhc");  // token-dependent coefficients, n 3 (an odd stream carried up by the collapse)
  testing::TempDir dir;
  const std::string path = dir.file("mhc.safetensors");
  f.model.save(path);
  auto r = testing::run_fca({"trace", "--model", path, "--text", "streams", "--out", dir.file("live.safetensors")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_fca({"trace", "--model", path, "--text", "streams", "--replay", dir.file("live.safetensors"),
                        "--out", dir.file("replay.safetensors")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  SafetensorsReader live(dir.file("live.safetensors")), replay(dir.file("replay.safetensors"));
  const HyperConfig& c = f.config;
  const int n = c.streams, D = c.d_model, S = n + 1, T = c.seq_len;  // "streams": 7 of the 8 positions
  const auto C = live.read_as_double("coefficients");  // [1, 2L, T', S, S]
  const int Tn = int(live.get("tokens").shape[1]);
  ASSERT_LE(Tn, T);
  for (int p = 0; p <= c.sites(); ++p) {
    const std::string name = "hc.streams." + std::to_string(p);
    ASSERT_EQ(live.get(name).shape, (std::vector<int64_t>{1, Tn, n, D})) << name;
    EXPECT_EQ(live.read_as_double(name), replay.read_as_double(name)) << name;
  }
  for (int p = 0; p < c.sites(); ++p) {
    const std::string name = "hc.read." + std::to_string(p);
    const auto X = live.read_as_double("hc.streams." + std::to_string(p)), a = live.read_as_double(name);
    EXPECT_EQ(a, replay.read_as_double(name)) << name;
    for (int t = 0; t < Tn; ++t)
      for (int d = 0; d < D; ++d) {
        const double* Ct = &C[(size_t(p) * Tn + t) * S * S];
        float want = float(Ct[1]) * float(X[(size_t(t) * n) * D + d]);
        for (int i = 1; i < n; ++i) want = want + float(Ct[1 + i]) * float(X[(size_t(t) * n + i) * D + d]);
        ASSERT_EQ(float(a[size_t(t) * D + d]), want) << name << " token " << t << " d " << d;
      }
  }
  const auto last = live.read_as_double("hc.streams." + std::to_string(c.sites())), h = live.read_as_double("hidden.1");
  for (int t = 0; t < Tn; ++t)
    for (int d = 0; d < D; ++d) {
      const auto x = [&](int i) { return float(last[(size_t(t) * n + i) * D + d]); };
      ASSERT_EQ(float(h[size_t(t) * D + d]), (x(0) + x(1)) + x(2)) << "token " << t;  // n 3: pairs, then the carried one
    }
}

}  // namespace
}  // namespace fca

namespace fca {
namespace {

// hc_out_init_div_sqrt_n (docs/hyper.md): the attention and MLP output projections' initial values
// divided by sqrt(n), nothing else; written into the checkpoint's config, and a config written
// before the key existed reads as false.
TEST(HyperInit, OutInitDivSqrtNScalesOnlyTheOutputProjections) {
  HyperConfig c;
  c.n_layer = 2, c.d_model = 16, c.n_head = 2, c.seq_len = 8, c.variant = HyperVariant::mhc, c.streams = 4;
  HyperConfig scaled = c;
  scaled.out_init_div_sqrt_n = true;
  const HyperModel<float> plain = HyperModel<float>::initialized(c, 5), divided = HyperModel<float>::initialized(scaled, 5);
  int scaled_tensors = 0;
  for (const auto& slot : plain.layout()) {
    const bool output = slot.name.ends_with("attn.proj.weight") || slot.name.ends_with("mlp.proj.weight");
    scaled_tensors += output;
    const float* a = plain.tensor(slot.name);
    const float* b = divided.tensor(slot.name);
    for (size_t i = 0; i < slot.numel; ++i)  // sqrt(4) = 2: the division is exact
      ASSERT_EQ(b[i], output ? a[i] * 0.5f : a[i]) << slot.name << " [" << i << "]";
  }
  EXPECT_EQ(scaled_tensors, 2 * c.n_layer);
  EXPECT_TRUE(HyperConfig::from_json(scaled.to_json(), "test") == scaled);
  auto old = nlohmann::json::parse(c.to_json());
  old.erase("hc_out_init_div_sqrt_n");
  EXPECT_FALSE(HyperConfig::from_json(old.dump(), "test").out_init_div_sqrt_n);
}

}  // namespace
}  // namespace fca
