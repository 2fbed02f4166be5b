// The routed families end to end: exact replay is bitwise with zero router evaluations (and a
// corrupted record is caught), an MoE whose router is uniform gets assignment penalties of exactly
// zero, training is bitwise deterministic, and bad configs, flags and routing records get clear
// errors.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "audit/audit.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "core/threads.h"
#include "models/mod/auditable.h"
#include "models/moe/auditable.h"
#include "models/registry.h"
#include "models/routing_record.h"
#include "test_util.h"
#include "train/trainer.h"

namespace fca {
namespace {

MoeConfig tiny_moe() { return {2, 16, 2, 16, 4, 2, 0, 0.01}; }
ModConfig tiny_mod() { return {4, 16, 2, 16, 0.25, 2}; }

std::vector<int32_t> tokens(int n, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n), 0);
  Rng rng(seed);
  for (auto& v : t) v = int32_t(rng.below(256));
  return t;
}

template <typename Model, typename RunState, typename Live, typename Recording, typename Replayed, typename Forward>
void expect_exact_replay(const Model& model, const CoefficientShape& shape, Forward forward) {
  set_threads(2);
  const int B = 3, T = model.config().seq_len, N = B * T;
  const auto x = tokens(N, 5);
  RunState rs(model.config(), B, T, false);
  CoefficientTensor record(B, shape);
  Recording recording(model, record);
  forward(model, rs, x.data(), B, T, recording);
  const std::vector<float> live_logits(rs.logits, rs.logits + int64_t(N) * 256);
  // One router evaluation per routed layer, counted by the router code.
  const int64_t live_evaluations = rs.controller_evaluations;
  EXPECT_EQ(live_evaluations, model.config().n_layer / (shape.kind == RecordKind::token_selection ? 2 : 1));
  Replayed replayed(model.config(), record);
  forward(model, rs, x.data(), B, T, replayed);
  EXPECT_EQ(std::memcmp(live_logits.data(), rs.logits, sizeof(float) * live_logits.size()), 0) << "replay is not bitwise";
  EXPECT_EQ(rs.controller_evaluations, live_evaluations) << "the replay reached the router";
  // The check can fail: a changed weight in the record changes the logits.
  record.at(1, 0, 3, 0, 0) += 0.25f;
  forward(model, rs, x.data(), B, T, replayed);
  EXPECT_NE(std::memcmp(live_logits.data(), rs.logits, sizeof(float) * live_logits.size()), 0);
}

TEST(RoutedReplay, MoeIsBitwiseWithoutTheRouter) {
  const auto model = MoeModel<float>::initialized(tiny_moe(), 3);
  expect_exact_replay<MoeModel<float>, MoeRunState<float>, MoeLiveRouting<float>, MoeRecordingRouting<float>,
                      MoeReplayedRouting<float>>(model, moe_record_shape(model.config(), 16),
                                                 [](auto& m, auto& rs, const int32_t* t, int B, int T, auto& src) {
                                                   moe_forward(m, rs, t, B, T, src);
                                                 });
}

TEST(RoutedReplay, ModIsBitwiseWithoutTheRouter) {
  const auto model = ModModel<float>::initialized(tiny_mod(), 3);
  expect_exact_replay<ModModel<float>, ModRunState<float>, ModLiveRouting<float>, ModRecordingRouting<float>,
                      ModReplayedRouting<float>>(model, mod_record_shape(model.config(), 16),
                                                 [](auto& m, auto& rs, const int32_t* t, int B, int T, auto& src) {
                                                   mod_forward(m, rs, t, B, T, src);
                                                 });
}

TEST(RoutedReplay, DenseExpertsComputesTheSameFunction) {
  // Every expert on every token, unselected ones times zero: the same outputs up to summation order.
  set_threads(2);
  const auto model = MoeModel<float>::initialized(tiny_moe(), 4);
  const int B = 2, T = 16;
  const auto x = tokens(B * T, 6);
  MoeRunState<float> grouped(model.config(), B, T, false), dense(model.config(), B, T, false, true);
  MoeLiveRouting<float> live(model);
  moe_forward(model, grouped, x.data(), B, T, live);
  moe_forward(model, dense, x.data(), B, T, live);
  for (int i = 0; i < B * T * 256; ++i) ASSERT_NEAR(grouped.logits[i], dense.logits[i], 1e-5) << i;
}

TEST(RoutedInput, BadConfigsAndRecordsAreRefused) {
  MoeConfig moe = tiny_moe();
  moe.top_k = 5;
  try {
    moe.validate("flags");
    ADD_FAILURE() << "k > E accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top_k 5 is larger than n_expert 4"), std::string::npos) << e.what();
  }
  for (double c : {0.0, -0.5, 1.5}) {
    ModConfig mod = tiny_mod();
    mod.capacity = c;
    try {
      mod.validate("flags");
      ADD_FAILURE() << "capacity " << c << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("capacity must be in (0, 1]"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(MoeConfig::from_json(R"({"n_layer":2,"d_model":16,"n_head":2,"seq_len":16,"n_expert":4,"top_k":2,)"
                                    R"("expert_hidden":32,"aux_loss":0.01,"colour":1})", "x"), Error);
  // A record whose experts are out of range, repeated, or whose selection count is not K.
  const auto model = MoeModel<float>::initialized(tiny_moe(), 3);
  MoeRunState<float> rs(model.config(), 1, 16, false);
  CoefficientTensor record(1, moe_record_shape(model.config(), 16));
  for (int l = 0; l < 2; ++l)
    for (int t = 0; t < 16; ++t) record.discrete_at(0, l, t, 1) = 1;
  const auto x = tokens(16, 1);
  MoeReplayedRouting<float> ok(model.config(), record);
  EXPECT_NO_THROW(moe_forward(model, rs, x.data(), 1, 16, ok));
  record.discrete_at(0, 1, 7, 0) = 9;
  try {
    moe_forward(model, rs, x.data(), 1, 16, ok);
    ADD_FAILURE() << "expert 9 of 4 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1, token 7: expert index 9 is outside [0, 4)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_routing_records(record.view(), "cache"), Error);
  record.discrete_at(0, 1, 7, 0) = 1;  // now expert 1 twice
  EXPECT_THROW(moe_forward(model, rs, x.data(), 1, 16, ok), Error);
  const auto mod = ModModel<float>::initialized(tiny_mod(), 3);
  ModRunState<float> mrs(mod.config(), 1, 16, false);
  CoefficientTensor selection(1, mod_record_shape(mod.config(), 16));  // K = 4, none selected
  ModReplayedRouting<float> replay(mod.config(), selection);
  try {
    mod_forward(mod, mrs, x.data(), 1, 16, replay);
    ADD_FAILURE() << "an empty selection accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("0 tokens selected, expected exactly K = 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_routing_records(selection.view(), "cache"), Error);
}

TEST(RoutedInput, TrainFlagsAreChecked) {
  testing::TempDir dir;
  auto r = testing::run_fca({"train", "--arch", "moe", "--experts", "2", "--top-k", "3", "--layers", "1", "--dim", "16",
                             "--heads", "2", "--seq", "16", "--steps", "1", "--out", dir.file("m.safetensors")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("top_k 3 is larger than n_expert 2"), std::string::npos) << r.output;
  r = testing::run_fca({"train", "--arch", "mod", "--capacity", "1.5", "--out", dir.file("m.safetensors")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--capacity: 1.5 is not a number in (0, 1]"), std::string::npos) << r.output;
  r = testing::run_fca({"train", "--capacity", "0.5", "--out", dir.file("m.safetensors")});
  EXPECT_NE(r.output.find("--capacity applies to --arch mod only"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("m.safetensors")));
}

class RoutedAudit : public ::testing::Test {
 protected:
  void SetUp() override {
    set_threads(2);
    testing::write_corpus(dir.path(), 30000, 6000, 6000);
  }
  nlohmann::ordered_json audit(const std::string& path, const std::string& out) {
    AuditOptions o;
    o.model_path = path;
    o.eval_windows = 12;
    o.calib_windows = 8;
    o.reps = 2;
    o.bootstrap_resamples = 200;
    o.out_dir = dir.file(out);
    o.progress = false;
    return run_audit(*open_model(path, o.batch, 1 << 20), Corpus(dir.path()), o);
  }
  static double delta(const nlohmann::ordered_json& j, const std::string& name) {
    for (const auto& c : j["conditions"])
      if (c["name"] == name) return c["delta_nll"];
    ADD_FAILURE() << "no condition " << name;
    return 0;
  }
  testing::TempDir dir;
};

TEST_F(RoutedAudit, UniformRouterGivesZeroAssignmentPenalties) {
  // Router weights 0: p is uniform, so every token takes experts 0..k-1 (ties to the lower index)
  // with weights 1/k, in every window: reassigning experts across inputs or tokens changes nothing.
  MoeModel<float> model = MoeModel<float>::initialized(tiny_moe(), 8);
  for (const auto& s : model.layout())
    if (s.name.ends_with("router.weight")) std::fill(model.data() + s.offset, model.data() + s.offset + s.numel, 0.0f);
  model.save(dir.file("uniform.safetensors"));
  const auto j = audit(dir.file("uniform.safetensors"), "uniform");
  EXPECT_EQ(j["exact_replay"]["max_abs_delta_logit"].get<double>(), 0.0);
  for (const auto& c : j["conditions"]) EXPECT_EQ(c["controller_evaluations"].get<int64_t>(), 0) << c["name"];
  for (const char* c : {"cross_input", "token_shuffle", "cross_shuffle", "assignment_cross_input", "assignment_shuffle",
                        "layer_position_mean", "static_profile"})
    EXPECT_EQ(delta(j, c), 0.0) << c;
  EXPECT_NE(delta(j, "structure_removed"), 0.0);  // random experts do change the function
  // Half of the (token, slot) assignments go to expert 0 (a sum of 1/(W T k) shares: rounding only).
  EXPECT_NEAR(j["routing"]["expert_load"][0][0].get<double>(), 0.5, 1e-12);
  EXPECT_NEAR(j["routing"]["expert_load"][0][2].get<double>(), 0.0, 1e-12);
}

TEST_F(RoutedAudit, ModAuditRunsEveryConditionAndReportsSelection) {
  ModModel<float>::initialized(tiny_mod(), 8).save(dir.file("mod.safetensors"));
  const auto j = audit(dir.file("mod.safetensors"), "mod");
  EXPECT_EQ(j["conditions"].size(), 9u);
  EXPECT_EQ(j["routing"]["kind"], "token_selection");
  double frequency = 0;
  for (double f : j["routing"]["selection_frequency"][0]) frequency += f;
  EXPECT_DOUBLE_EQ(frequency, 4.0);  // K = 4 selected positions per window
}

TEST(RoutedCli, TraceRecordsRoutingAndReplaysItExactly) {
  testing::TempDir dir;
  for (const char* arch : {"moe", "mod"}) {
    const std::string model = dir.file(std::string(arch) + ".safetensors");
    if (std::string(arch) == "moe") MoeModel<float>::initialized(tiny_moe(), 2).save(model);
    else ModModel<float>::initialized(tiny_mod(), 2).save(model);
    auto r = testing::run_fca({"trace", "--model", model, "--text", "routing, record", "--out", dir.file("live.safetensors")});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = testing::run_fca({"trace", "--model", model, "--text", "routing, record", "--replay", dir.file("live.safetensors"),
                          "--out", dir.file("replay.safetensors")});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("controller evaluations: 0"), std::string::npos) << r.output;
    SafetensorsReader live(dir.file("live.safetensors")), replay(dir.file("replay.safetensors"));
    EXPECT_EQ(live.read_as_double("logits"), replay.read_as_double("logits")) << arch;
    EXPECT_EQ(live.read_as_double("routing"), replay.read_as_double("routing")) << arch;
    // The benchmark's FLOPs are those of the pass it times, counted: a replay runs no router, so the
    // MoE's router GEMMs (2 N D E per block) drop out; MoD's router is no GEMM.
    double gflop[2] = {0, 0};
    for (int replay = 0; replay < 2; ++replay) {
      r = testing::run_fca({"bench", "forward", "--model", model, "--runs", "1", "--warmup", "0", "--json", "--source",
                            replay ? "replay" : "live"});
      ASSERT_EQ(r.exit_code, 0) << r.output;
      gflop[replay] = nlohmann::json::parse(r.output.substr(r.output.find('{')))["gflop_per_pass"].get<double>();
    }
    if (std::string(arch) == "moe") {
      const MoeConfig c = tiny_moe();
      const int B = 8;  // bench's default batch
      EXPECT_NEAR((gflop[0] - gflop[1]) * 1e9, 2.0 * B * c.seq_len * c.d_model * c.n_expert * c.n_layer, 1e-3);
    } else {
      EXPECT_EQ(gflop[0], gflop[1]);
    }
  }
}

TEST(RoutedTraining, SameSeedSameBits) {
  set_threads(2);
  testing::TempDir dir;
  testing::write_corpus(dir.path(), 20000, 2000, 2000);
  Corpus corpus(dir.path());
  for (const char* arch : {"moe", "mod"}) {
    for (const char* name : {"a", "b"}) {
      TrainOptions o;
      o.arch = arch;
      if (std::string(arch) == "moe") {
        const MoeConfig c = tiny_moe();
        o.shape = {c.n_layer, c.d_model, c.n_head, c.seq_len};
        o.settings = {{"experts", c.n_expert}, {"top_k", c.top_k}, {"expert_hidden", c.expert_hidden}, {"aux_loss", c.aux_loss}};
      } else {
        const ModConfig c = tiny_mod();
        o.shape = {c.n_layer, c.d_model, c.n_head, c.seq_len};
        o.settings = {{"capacity", c.capacity}, {"routed_every", c.routed_every}};
      }
      o.batch = 4;
      o.steps = 6;
      o.warmup = 2;
      o.seed = 9;
      o.eval_every = 3;
      o.eval_windows = 4;
      o.out = dir.file(std::string(arch) + name + ".safetensors");
      o.progress = false;
      train_model(o, corpus);
    }
    EXPECT_EQ(testing::read_bytes(dir.file(std::string(arch) + "a.safetensors")),
              testing::read_bytes(dir.file(std::string(arch) + "b.safetensors")))
        << arch;
    EXPECT_EQ(family_of(dir.file(std::string(arch) + "a.safetensors")).name, arch);
  }
}

}  // namespace
}  // namespace fca
