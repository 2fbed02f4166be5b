// The early-exit family (docs/exit.md): training passes and the ragged window pass
// against the golden fixture of an independent PyTorch implementation
// (tests/fixtures/make_exit_fixture.py, whose own checks include a token-by-token decode with a K/V
// cache and eager propagation equal to the window pass); the bitwise properties of the ragged pass (threshold
// 1 is the gated Dense forward of the same weights, threshold 0 is the Dense model cut at min_exit,
// replay is the live pass with no classifier, rows do not depend on the batch); gradient checks in
// double; record validation. Tolerances: expect_close (test_util.cpp), as the other fixtures; the
// fixture's decisions are at least 8.5e-3 from the threshold, so float32 takes the same ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/error.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "core/threads.h"
#include "models/exit/auditable.h"
#include "models/exit/forward.h"
#include "models/exit/train_pass.h"
#include "models/gated/forward.h"
#include "models/routing_record.h"
#include "train/trainer.h"
#include "test_util.h"

namespace fca {
namespace {

using testing::expect_close;

const std::string kFixture = std::string(FCA_SOURCE_DIR) + "/tests/fixtures/exit_tiny.safetensors";

struct Fixture {
  SafetensorsReader fx{kFixture};
  ExitConfig config = ExitConfig::from_json(fx.metadata().at("exit.config"), kFixture);
  ExitModel<float> model{config};
  std::vector<int32_t> inputs, targets;
  int B = 0, T = 0;
  Fixture() {
    for (const auto& s : model.layout()) fx.read_into<float>("exit.param." + s.name, s.shape, model.data() + s.offset);
    T = config.seq_len;
    const auto tokens = fx.read_as_double("exit.tokens");
    B = int(fx.get("exit.tokens").shape[0]);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        inputs.push_back(int32_t(tokens[size_t(b * (T + 1) + t)]));
        targets.push_back(int32_t(tokens[size_t(b * (T + 1) + t + 1)]));
      }
  }
  // The fixture's depth record as an exit_depth record of one pass.
  CoefficientTensor record_of(const std::vector<double>& depth) const {
    CoefficientTensor r(B, exit_record_shape(config, T));
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t)
        for (int k = 1; k < config.n_layer; ++k) r.discrete_at(b, k - 1, t, 0) = depth[size_t(b * T + t)] > k ? 1 : 0;
    return r;
  }
};

TEST(ExitFixture, PhaseOneLossAndEveryGradient) {
  set_threads(2);
  Fixture f;
  ExitTrainState<float> rs(f.config, f.B, f.T, true);
  exit_trunk_forward(f.model, rs, f.inputs.data(), f.B, f.T);
  const double loss = exit_trunk_loss(rs, f.targets.data());
  const std::vector<float> ours_loss{float(loss)}, ours_ce(rs.exit_nll.begin(), rs.exit_nll.end());
  expect_close("p1.loss", ours_loss.data(), f.fx.read_as_double("exit.p1.loss"));
  expect_close("p1.ce", ours_ce.data(), f.fx.read_as_double("exit.p1.ce"));
  ExitModel<float> grads(f.config);
  exit_trunk_backward(f.model, rs, grads, 1.0f / float(f.B * f.T));
  for (const auto& s : f.model.layout())
    expect_close("p1.grad." + s.name, grads.data() + s.offset, f.fx.read_as_double("exit.p1.grad." + s.name));
}

TEST(ExitFixture, PhaseTwoLabelsLossAndClassifierGradients) {
  set_threads(2);
  Fixture f;
  ExitTrainState<float> rs(f.config, f.B, f.T, false);
  exit_trunk_forward(f.model, rs, f.inputs.data(), f.B, f.T);
  std::vector<float> gw(size_t(f.config.exit_points() * f.config.d_model), 0.0f), gb(size_t(f.config.exit_points()), 0.0f);
  const double loss = exit_probe_loss(f.model, rs, gw.data(), gb.data(), 1.0f / float(f.B * f.T));
  const auto labels = f.fx.read_as_double("exit.p2.labels");
  const int N = f.B * f.T, points = f.config.n_layer - f.config.min_exit;
  for (int i = 0; i < points * N; ++i) ASSERT_EQ(rs.probe_labels[i], int32_t(labels[size_t(i)])) << "label " << i;
  const std::vector<float> ours_loss{float(loss)};
  expect_close("p2.loss", ours_loss.data(), f.fx.read_as_double("exit.p2.loss"));
  expect_close("p2.grad.exit.weight", gw.data(), f.fx.read_as_double("exit.p2.grad.exit.weight"));
  expect_close("p2.grad.exit.bias", gb.data(), f.fx.read_as_double("exit.p2.grad.exit.bias"));
}

TEST(ExitFixture, LiveWindowPassDepthsScoresLogitsAndNll) {
  set_threads(2);
  Fixture f;
  ExitRunState<float> rs(f.config, f.B, f.T);
  CoefficientTensor record(f.B, exit_record_shape(f.config, f.T));
  ExitRecordingDepth<float> live(f.model, record);
  exit_forward(f.model, rs, f.inputs.data(), f.B, f.T, live);
  std::vector<double> nll(size_t(f.B));
  exit_loss(rs, f.targets.data(), nll.data());
  const auto depth = f.fx.read_as_double("exit.live.depth"), decoded = f.fx.read_as_double("exit.decode.depth");
  const auto scores = f.fx.read_as_double("exit.live.scores");
  const int N = f.B * f.T;
  for (int n = 0; n < N; ++n) {
    ASSERT_EQ(rs.depth[n], int(depth[size_t(n)])) << "row " << n;
    ASSERT_EQ(rs.depth[n], int(decoded[size_t(n)])) << "row " << n << " (token-by-token decode)";
  }
  // Scores where the classifier ran: q = sigmoid(s) in the record.
  for (int k = 1; k < f.config.n_layer; ++k)
    for (int n = 0; n < N; ++n) {
      const double s = scores[size_t((k - 1) * N + n)];
      const float q = record.at(n / f.T, k - 1, n % f.T);
      if (std::isnan(s)) {
        EXPECT_EQ(q, k < f.config.min_exit ? 0.0f : 1.0f) << "absorbing fill, point " << k << " row " << n;
      } else {
        EXPECT_NEAR(q, 1.0 / (1.0 + std::exp(-s)), 2e-6) << "point " << k << " row " << n;
      }
    }
  expect_close("live.logits", rs.logits, f.fx.read_as_double("exit.live.logits"));
  expect_close("decode.logits", rs.logits, f.fx.read_as_double("exit.decode.logits"));
  const std::vector<float> ours_nll(nll.begin(), nll.end());
  expect_close("live.window_nll", ours_nll.data(), f.fx.read_as_double("exit.live.window_nll"));
  check_exit_record(record.window_discrete(0), record.shape(), "recorded");
}

TEST(ExitFixture, ReplayOfAHandMadeRecord) {
  set_threads(2);
  Fixture f;
  ExitRunState<float> rs(f.config, f.B, f.T);
  const auto depth = f.fx.read_as_double("exit.replay.depth");
  const CoefficientTensor record = f.record_of(depth);
  ExitReplayedDepth<float> replayed(f.config, record);
  exit_forward(f.model, rs, f.inputs.data(), f.B, f.T, replayed);
  for (int n = 0; n < f.B * f.T; ++n) ASSERT_EQ(rs.depth[n], int(depth[size_t(n)]));
  EXPECT_EQ(rs.controller_evaluations, 0);
  expect_close("replay.logits", rs.logits, f.fx.read_as_double("exit.replay.logits"));
}

// A random exit model whose classifiers exit a share of the tokens at every point (scores spread
// around 0), at a shape with several attention tiles and a window length that is not a multiple of
// the key rounding.
ExitModel<float> random_model(int L = 4, int T = 40, int m = 1) {
  ExitConfig c;
  c.n_layer = L, c.d_model = 32, c.n_head = 4, c.seq_len = T, c.min_exit = m, c.exit_threshold = 0.5;
  ExitModel<float> model = ExitModel<float>::initialized(c, 11);
  Rng rng(5);
  for (int i = 0; i < c.exit_points() * c.d_model; ++i) model.weights().exit_weight[i] = float(rng.normal() * 0.5);
  return model;
}

std::vector<int32_t> random_tokens(int n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> x(static_cast<size_t>(n));
  for (auto& v : x) v = int32_t(rng.below(256));
  return x;
}

// The logits of the gated Dense model made of the exit model's first `layers` blocks (its tensors
// by name), over windows x [B, T].
std::vector<float> dense_logits(const ExitModel<float>& model, int layers, const std::vector<int32_t>& x, int B) {
  const ExitConfig& c = model.config();
  GatedConfig gc;
  gc.n_layer = layers, gc.d_model = c.d_model, gc.n_head = c.n_head, gc.seq_len = c.seq_len, gc.gate = GateKind::dense;
  GatedModel<float> dense(gc);
  for (const auto& s : dense.layout()) std::memcpy(dense.tensor(s.name), model.tensor(s.name), sizeof(float) * s.numel);
  const int T = c.seq_len;
  GatedRunState<float> rs(gc, B, T, false);
  LiveCoefficients<float> gates(dense);
  gated_forward(dense, rs, x.data(), B, T, gates);
  return std::vector<float>(rs.logits, rs.logits + int64_t(B) * T * 256);
}

TEST(ExitPass, ThresholdOneIsTheDenseForwardOfTheSameWeightsBitForBit) {
  set_threads(2);
  const ExitModel<float> model = random_model();
  const ExitConfig& c = model.config();
  const int B = 3, T = c.seq_len;
  const auto x = random_tokens(B * T, 1);
  const std::vector<float> dense = dense_logits(model, c.n_layer, x, B);
  ExitRunState<float> rs(c, B, T);
  ExitLiveDepth<float> never(model, 1.0);
  exit_forward(model, rs, x.data(), B, T, never);
  EXPECT_EQ(std::memcmp(rs.logits, dense.data(), sizeof(float) * dense.size()), 0);
  for (int n = 0; n < B * T; ++n) ASSERT_EQ(rs.depth[n], c.n_layer);
  // The classifier still ran at every exit point (docs/exit.md, "Exact rules").
  EXPECT_EQ(rs.controller_evaluations, c.n_layer - c.min_exit);
}

TEST(ExitPass, ThresholdZeroIsTheDenseModelCutAtMinExit) {
  set_threads(2);
  const ExitModel<float> model = random_model(5, 24, 2);
  const ExitConfig& c = model.config();
  const int B = 2, T = c.seq_len;
  const auto x = random_tokens(B * T, 2);
  const std::vector<float> cut = dense_logits(model, c.min_exit, x, B);
  ExitRunState<float> rs(c, B, T);
  ExitLiveDepth<float> always(model, 0.0);
  exit_forward(model, rs, x.data(), B, T, always);
  EXPECT_EQ(std::memcmp(rs.logits, cut.data(), sizeof(float) * cut.size()), 0);
  for (int n = 0; n < B * T; ++n) ASSERT_EQ(rs.depth[n], c.min_exit);
  for (int k = c.min_exit; k < c.n_layer; ++k) EXPECT_EQ(rs.active_rows[size_t(k)], 0) << "block " << k + 1 << " ran";
  for (int64_t p : rs.propagated_rows) EXPECT_EQ(p, 0);  // a constant depth needs no propagation
}

TEST(ExitPass, ReplayIsTheLivePassBitForBitWithNoClassifier) {
  set_threads(2);
  const ExitModel<float> model = random_model();
  const ExitConfig& c = model.config();
  const int B = 4, T = c.seq_len, N = B * T;
  const auto x = random_tokens(N, 3);
  ExitRunState<float> rs(c, B, T);
  CoefficientTensor record(B, exit_record_shape(c, T));
  ExitRecordingDepth<float> recording(model, record);
  exit_forward(model, rs, x.data(), B, T, recording);
  const std::vector<float> live(rs.logits, rs.logits + int64_t(N) * 256);
  const std::vector<int32_t> depth(rs.depth, rs.depth + N);
  int exited = 0;
  for (int d : depth) exited += d < c.n_layer;
  ASSERT_GT(exited, N / 10);
  ASSERT_LT(exited, N - N / 10);
  int64_t propagated = 0;
  for (int64_t p : rs.propagated_rows) propagated += p;
  EXPECT_GT(propagated, 0);
  const int64_t before = rs.controller_evaluations;
  ExitReplayedDepth<float> replayed(c, record);
  exit_forward(model, rs, x.data(), B, T, replayed);
  EXPECT_EQ(rs.controller_evaluations, before);
  EXPECT_EQ(std::memcmp(rs.logits, live.data(), sizeof(float) * live.size()), 0);
  EXPECT_EQ(std::memcmp(rs.depth, depth.data(), sizeof(int32_t) * depth.size()), 0);
  // Live twice: the same bits; each window alone (batch 1): the same bits as in the batch of 4.
  ExitLiveDepth<float> again(model);
  exit_forward(model, rs, x.data(), B, T, again);
  EXPECT_EQ(std::memcmp(rs.logits, live.data(), sizeof(float) * live.size()), 0);
  for (int b = 0; b < B; ++b) {
    ExitLiveDepth<float> alone(model);
    exit_forward(model, rs, x.data() + b * T, 1, T, alone);
    EXPECT_EQ(std::memcmp(rs.logits, live.data() + int64_t(b) * T * 256, sizeof(float) * T * 256), 0) << "window " << b;
  }
}

TEST(ExitPass, AReplayedRecordThatIsNotADepthIsRefused) {
  const ExitModel<float> model = random_model(4, 16, 2);
  const ExitConfig& c = model.config();
  ExitRunState<float> rs(c, 1, 16);
  const auto x = random_tokens(16, 4);
  auto expect_refused = [&](int k, int t, int32_t value, const std::string& what) {
    CoefficientTensor record(1, exit_record_shape(c, 16));
    for (int j = 0; j < c.exit_points(); ++j)
      for (int u = 0; u < 16; ++u) record.discrete_at(0, j, u, 0) = 1;
    record.discrete_at(0, k - 1, t, 0) = value;
    ExitReplayedDepth<float> replayed(c, record);
    try {
      exit_forward(model, rs, x.data(), 1, 16, replayed);
      ADD_FAILURE() << "accepted a record with " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("exit point " + std::to_string(k)), std::string::npos) << e.what();
    }
  };
  expect_refused(1, 3, 0, "a 0 below min_exit");
  expect_refused(2, 3, 2, "a flag of 2");
  // Non-increasing: 0 at point 2, then 1 at point 3.
  CoefficientTensor record(1, exit_record_shape(c, 16));
  for (int j = 0; j < c.exit_points(); ++j)
    for (int u = 0; u < 16; ++u) record.discrete_at(0, j, u, 0) = 1;
  record.discrete_at(0, 1, 5, 0) = 0;
  ExitReplayedDepth<float> replayed(c, record);
  EXPECT_THROW(exit_forward(model, rs, x.data(), 1, 16, replayed), Error);
}

TEST(ExitGradCheck, PhaseOneAndTheClassifiersAgainstFiniteDifferencesInDouble) {
  set_threads(1);
  Fixture f;
  ExitModel<double> model = ExitModel<double>::converted_from(f.model);
  ExitTrainState<double> rs(f.config, f.B, f.T, true);
  auto loss_at = [&]() {
    exit_trunk_forward(model, rs, f.inputs.data(), f.B, f.T);
    return exit_trunk_loss(rs, f.targets.data());
  };
  loss_at();
  ExitModel<double> grads(f.config);
  exit_trunk_backward(model, rs, grads, 1.0 / double(f.B * f.T));
  testing::expect_gradients_match_finite_differences(
      model.layout(), [&](const TensorSlot& s) { return model.data() + s.offset; },
      [&](const TensorSlot& s) { return grads.data() + s.offset; }, loss_at, 17,
      [](const TensorSlot& s, size_t) { return s.name.rfind("exit.", 0) == 0; });  // phase 1 does not read exit.*
  // Phase 2: the classifiers alone.
  std::vector<double> gw(size_t(f.config.exit_points() * f.config.d_model)), gb(size_t(f.config.exit_points()));
  auto probe_at = [&]() {
    exit_trunk_forward(model, rs, f.inputs.data(), f.B, f.T);
    std::vector<double> w(gw.size()), b(gb.size());
    return exit_probe_loss(model, rs, w.data(), b.data(), 1.0);
  };
  exit_trunk_forward(model, rs, f.inputs.data(), f.B, f.T);
  exit_probe_loss(model, rs, gw.data(), gb.data(), 1.0 / double(f.B * f.T));
  std::vector<TensorSlot> probe;
  for (const auto& s : model.layout())
    if (s.name.rfind("exit.", 0) == 0) probe.push_back(s);
  testing::expect_gradients_match_finite_differences(
      probe, [&](const TensorSlot& s) { return model.data() + s.offset; },
      [&](const TensorSlot& s) { return static_cast<const double*>(s.name == "exit.weight" ? gw.data() : gb.data()); },
      probe_at, 19);
}

TrainOptions tiny_exit_training(const std::string& out, int head_steps) {
  TrainOptions o;
  o.arch = "exit";
  o.shape = {3, 16, 2, 16};
  o.settings = {{"min_exit", 1}, {"exit_threshold", 0.9}, {"exit_head_steps", head_steps}};
  o.batch = 4;
  o.steps = 6;
  o.warmup = 2;
  o.eval_every = 0;
  o.eval_windows = 8;
  o.log_every = 1;
  o.seed = 3;
  o.out = out;
  o.progress = false;
  return o;
}

TEST(ExitTraining, PhaseTwoMovesOnlyTheClassifiersAndIsNotRepeatedOnResume) {
  set_threads(2);
  testing::TempDir dir;
  testing::write_corpus(dir.path(), 20000, 4000, 4000);
  Corpus corpus(dir.path());
  train_model(tiny_exit_training(dir.file("none.safetensors"), 0), corpus);
  train_model(tiny_exit_training(dir.file("heads.safetensors"), 5), corpus);
  const ExitModel<float> none = ExitModel<float>::load(dir.file("none.safetensors"));
  const ExitModel<float> heads = ExitModel<float>::load(dir.file("heads.safetensors"));
  for (const auto& s : none.layout()) {
    const bool same = std::memcmp(none.tensor(s.name), heads.tensor(s.name), sizeof(float) * s.numel) == 0;
    const bool classifier = s.name.rfind("exit.", 0) == 0;
    EXPECT_EQ(same, !classifier) << s.name << (classifier ? " was not trained in phase 2" : " changed in phase 2");
  }
  const std::string log = testing::read_bytes(dir.file("heads.safetensors.log.jsonl"));
  EXPECT_NE(log.find("\"phase\":\"exit_heads\",\"step\":5"), std::string::npos) << log;
  // Resuming the finished run trains nothing again: the weights stay bit for bit.
  TrainOptions again = tiny_exit_training(dir.file("heads.safetensors"), 5);
  again.resume = true;
  train_model(again, corpus);
  const ExitModel<float> resumed = ExitModel<float>::load(dir.file("heads.safetensors"));
  EXPECT_EQ(std::memcmp(resumed.data(), heads.data(), sizeof(float) * heads.buffer_size()), 0);
  const std::string log2 = testing::read_bytes(dir.file("heads.safetensors.log.jsonl"));
  EXPECT_EQ(log2.find("exit_heads", log.size()), std::string::npos) << "phase 2 ran again on resume";
}

}  // namespace
}  // namespace fca
