// MUDD models against the golden fixtures of the public reference implementation
// (tests/data/muddpythia-tiny*): live logits, every alpha, every hidden state, the final stream,
// NLL, and the replay fixtures, for the F32, BF16 and sharded folders; bitwise exact replay; bad folders.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/safetensors.h"
#include "core/threads.h"
#include "models/gated/model.h"
#include "models/mudd/forward.h"
#include "core/json.h"
#include "test_util.h"

namespace fca {
namespace {

const std::string kTiny = std::string(FCA_SOURCE_DIR) + "/tests/data/muddpythia-tiny";
const std::string kSharded = std::string(FCA_SOURCE_DIR) + "/tests/data/muddpythia-tiny-sharded";
constexpr int B = 3, T = 24;

// Tolerances from the fixture README ("Observed tolerances"): an independent fp32 implementation
// differed from the reference by at most 1.4e-4 (logits), 3.2e-5 (alpha), 8.0e-5 (hidden), 3.9e-6
// (NLL) and 2.4e-6 (replay logits from the stored alphas); the README's suggested atols keep about
// 4x margin over those: 5e-4, 2e-4, 5e-4, 5e-5 and 2e-5.
constexpr double kLogitsTol = 5e-4, kAlphaTol = 2e-4, kHiddenTol = 5e-4, kNllTol = 5e-5, kReplayTol = 2e-5;

double max_abs_diff(const float* ours, const std::vector<double>& ref) {
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(double(ours[i]) - ref[i]));
  return worst;
}

// Mean NLL per sequence of predicting ids[:, 1:] from logits[:, :-1], over all vocab rows, in double.
std::vector<double> sequence_nll(const float* logits, const std::vector<int32_t>& ids, int V) {
  std::vector<double> out(B, 0.0);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t + 1 < T; ++t) {
      const float* z = logits + (int64_t(b) * T + t) * V;
      double mx = z[0], s = 0;
      for (int v = 1; v < V; ++v) mx = std::max(mx, double(z[v]));
      for (int v = 0; v < V; ++v) s += std::exp(double(z[v]) - mx);
      out[size_t(b)] += mx + std::log(s) - z[ids[size_t(b * T + t + 1)]];
    }
    out[size_t(b)] /= T - 1;
  }
  return out;
}

struct Fixture {
  SafetensorsReader fx{kTiny + "/fixture.safetensors"};
  std::vector<int32_t> ids;
  Fixture() {
    for (double v : fx.read_as_double("input_ids")) ids.push_back(int32_t(v));
  }
  // The fixture's alpha.{i} [C_i, B, T, S_i] as a CoefficientTensor of B windows.
  CoefficientTensor stored_alpha(const MuddConfig& c) {
    CoefficientTensor a = make_mudd_coefficients(c, B, T);
    for (int i = 0; i < c.n_layer; ++i) {
      const auto v = fx.read_as_double("alpha." + std::to_string(i));
      const int C = c.streams(i), S = c.sources(i);
      for (int s = 0; s < C; ++s)
        for (int b = 0; b < B; ++b)
          for (int t = 0; t < T; ++t)
            for (int j = 0; j < S; ++j) a.at(b, i, t, s, j) = float(v[size_t(((s * B + b) * T + t) * S + j)]);
    }
    return a;
  }
};

void check_live_parity(const std::string& dir) {
  set_threads(2);
  Fixture f;
  const MuddModel<float> model = MuddModel<float>::load(dir);
  const MuddConfig& c = model.config();
  MuddRunState<float> rs(c, B, T);
  CoefficientTensor recorded = make_mudd_coefficients(c, B, T);
  MuddRecordingCoefficients<float> source(model, recorded);
  mudd_forward(model, rs, f.ids.data(), B, T, source);
  EXPECT_LE(max_abs_diff(rs.logits, f.fx.read_as_double("logits")), kLogitsTol) << dir;
  for (int j = 0; j <= c.n_layer; ++j)
    EXPECT_LE(max_abs_diff(rs.hidden[size_t(j)], f.fx.read_as_double("hidden." + std::to_string(j))), kHiddenTol) << "hidden." << j;
  EXPECT_LE(max_abs_diff(rs.final_stream(), f.fx.read_as_double("final_stream")), kHiddenTol);
  const CoefficientTensor stored = f.stored_alpha(c);
  double worst_alpha = 0;
  for (size_t k = 0; k < stored.values().size(); ++k)
    worst_alpha = std::max(worst_alpha, double(std::abs(stored.values()[k] - recorded.values()[k])));
  EXPECT_LE(worst_alpha, kAlphaTol);
  const auto nll = sequence_nll(rs.logits, f.ids, c.vocab_size);
  const auto ref_nll = f.fx.read_as_double("nll");
  for (int b = 0; b < B; ++b) EXPECT_NEAR(nll[size_t(b)], ref_nll[size_t(b)], kNllTol);
  EXPECT_EQ(rs.controller_evaluations, c.n_layer);
}

TEST(MuddParity, F32Folder) { check_live_parity(kTiny); }

// Two loads of one model run live on the same windows: bitwise the same logits.
void expect_same_logits(const MuddModel<float>& one, const MuddModel<float>& other, const std::vector<int32_t>& ids) {
  const MuddConfig& c = one.config();
  MuddRunState<float> a(c, B, T), b(c, B, T);
  MuddLiveCoefficients<float> live_one(one), live_other(other);
  mudd_forward(one, a, ids.data(), B, T, live_one);
  mudd_forward(other, b, ids.data(), B, T, live_other);
  EXPECT_EQ(0, std::memcmp(a.logits, b.logits, sizeof(float) * size_t(B) * T * c.vocab_size));
}

// Loaded in place, an F32 folder's weights are the mapped file's pages (no copy): the same logits
// bit for bit as the copied load, and the model refuses to be saved.
TEST(MuddParity, F32FolderInPlaceIsTheCopiedModel) {
  set_threads(2);
  Fixture f;
  const MuddModel<float> copied = MuddModel<float>::load(kTiny);
  const MuddModel<float> in_place = MuddModel<float>::load(kTiny, /*in_place=*/true);
  EXPECT_FALSE(copied.mapped());
  ASSERT_TRUE(in_place.mapped());
  EXPECT_EQ(in_place.buffer_size(), 0u) << "every F32 tensor of the folder is used where it lies";
  EXPECT_EQ(in_place.content_hash(), copied.content_hash());
  expect_same_logits(copied, in_place, f.ids);
  testing::TempDir dir;
  EXPECT_THROW(in_place.save(dir.file("copy")), Error);
}

// The parameter store itself: slots in place point into the mapped file; a copy owns every value
// (laid out by the layout, writable) and equals the mapped values.
TEST(MuddParity, ACopyOfAStoreInPlaceOwnsItsValues) {
  const std::vector<TensorSlot> layout = mudd_tensor_layout(MuddConfig::load(kTiny));
  std::vector<std::unique_ptr<SafetensorsReader>> files;
  files.push_back(std::make_unique<SafetensorsReader>(kTiny + "/model.safetensors"));
  const ParameterBuffer<float> mapped =
      ParameterBuffer<float>::from_files(layout, std::move(files), std::vector<size_t>(layout.size(), 0), true);
  ASSERT_TRUE(mapped.mapped());
  const ParameterBuffer<float> copy = mapped;
  EXPECT_FALSE(copy.mapped());
  ASSERT_EQ(copy.size(), layout.back().offset + (layout.back().numel + 15) / 16 * 16);
  for (size_t i = 0; i < layout.size(); ++i) {
    EXPECT_NE(copy.slot(i), mapped.slot(i));
    EXPECT_EQ(copy.slot(i), copy.data() + layout[i].offset);
    EXPECT_EQ(0, std::memcmp(copy.slot(i), mapped.slot(i), sizeof(float) * layout[i].numel)) << layout[i].name;
  }
}

TEST(MuddParity, Bf16Folder) {
  testing::TempDir dir;
  std::filesystem::copy_file(kTiny + "/config.json", dir.file("config.json"));
  std::filesystem::copy_file(kTiny + "/model-bf16.safetensors", dir.file("model.safetensors"));
  check_live_parity(dir.path());
}

TEST(MuddParity, ShardedFolder) { check_live_parity(kSharded); }

// fca convert writes a BF16 folder's weights as F32 once: the converted folder loads in place and
// gives the BF16 folder's logits bit for bit (BF16 to F32 is exact); a non-MUDD input is refused.
TEST(MuddParity, ConvertedBf16FolderLoadsInPlaceWithTheSameLogits) {
  set_threads(2);
  testing::TempDir dir;
  std::filesystem::create_directories(dir.file("bf16"));
  std::filesystem::copy_file(kTiny + "/config.json", dir.file("bf16/config.json"));
  std::filesystem::copy_file(kTiny + "/model-bf16.safetensors", dir.file("bf16/model.safetensors"));
  const auto r = testing::run_fca({"convert", "--model", dir.file("bf16"), "--out", dir.file("f32")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const MuddModel<float> upcast = MuddModel<float>::load(dir.file("bf16"), /*in_place=*/true);
  const MuddModel<float> converted = MuddModel<float>::load(dir.file("f32"), /*in_place=*/true);
  EXPECT_FALSE(upcast.mapped()) << "BF16 tensors are upcast into the model's buffer";
  EXPECT_TRUE(converted.mapped());
  expect_same_logits(upcast, converted, Fixture().ids);
  GatedModel<float>::initialized(testing::tiny_config(GateKind::featuregate), 1).save(dir.file("gated.safetensors"));
  const auto refused = testing::run_fca({"convert", "--model", dir.file("gated.safetensors"), "--out", dir.file("x")});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("a gated checkpoint needs no conversion"), std::string::npos) << refused.output;
}

TEST(MuddParity, ReplayFixtures) {
  set_threads(2);
  Fixture f;
  const MuddModel<float> model = MuddModel<float>::load(kTiny);
  const MuddConfig& c = model.config();
  const CoefficientTensor stored = f.stored_alpha(c);
  // The fixture's transformations of the stored alphas.
  CoefficientTensor cross = make_mudd_coefficients(c, B, T), shuffle = cross, stat = cross;
  std::vector<int> perm;
  for (double v : f.fx.read_as_double("shuffle_perm")) perm.push_back(int(v));
  const auto& s = stored.shape();
  for (int l = 0; l < s.layers; ++l)
    for (int st = 0; st < s.streams; ++st)
      for (int k = 0; k < s.sources; ++k) {
        double mean = 0;
        for (int b = 0; b < B; ++b)
          for (int t = 0; t < T; ++t) {
            cross.at(b, l, t, st, k) = stored.at((b + 1) % B, l, t, st, k);
            shuffle.at(b, l, t, st, k) = stored.at(b, l, perm[size_t(t)], st, k);
            mean += stored.at(b, l, t, st, k);
          }
        for (int b = 0; b < B; ++b)
          for (int t = 0; t < T; ++t) stat.at(b, l, t, st, k) = float(mean / (B * T));
      }
  MuddRunState<float> rs(c, B, T);
  for (const auto& [name, coeffs] : {std::pair<std::string, const CoefficientTensor*>{"replay_exact", &stored},
                                     {"replay_cross", &cross}, {"replay_shuffle", &shuffle}, {"replay_static", &stat}}) {
    MuddReplayedCoefficients<float> replay(*coeffs);
    mudd_forward(model, rs, f.ids.data(), B, T, replay);
    EXPECT_LE(max_abs_diff(rs.logits, f.fx.read_as_double(name + ".logits")), kReplayTol) << name;
    EXPECT_EQ(rs.controller_evaluations, 0);
    if (name != "replay_exact") {
      const auto nll = sequence_nll(rs.logits, f.ids, c.vocab_size);
      const auto ref = f.fx.read_as_double(name + ".nll");
      for (int b = 0; b < B; ++b) EXPECT_NEAR(nll[size_t(b)], ref[size_t(b)], kNllTol) << name;
    }
  }
}

TEST(MuddReplay, ExactReplayIsBitwise) {
  set_threads(2);
  Fixture f;
  const MuddModel<float> model = MuddModel<float>::load(kTiny);
  MuddRunState<float> live_rs(model.config(), B, T), replay_rs(model.config(), B, T);
  CoefficientTensor recorded = make_mudd_coefficients(model.config(), B, T);
  MuddRecordingCoefficients<float> recording(model, recorded);
  MuddReplayedCoefficients<float> replay(recorded);
  mudd_forward(model, live_rs, f.ids.data(), B, T, recording);
  mudd_forward(model, replay_rs, f.ids.data(), B, T, replay);
  EXPECT_EQ(0, std::memcmp(live_rs.logits, replay_rs.logits, sizeof(float) * B * T * size_t(model.config().vocab_size)));
  EXPECT_EQ(replay_rs.controller_evaluations, 0);
  EXPECT_EQ(live_rs.controller_evaluations, model.config().n_layer);
}

TEST(MuddConfigShapes, WidthsFollowTheFormulas) {
  const MuddConfig c = MuddConfig::load(kTiny);
  EXPECT_EQ(c.ffn_width(0), 128);
  EXPECT_EQ(c.ffn_width(1), 256);
  EXPECT_EQ(c.ffn_width(2), 256);
  EXPECT_EQ(c.ffn_width(3), 384);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(c.da_hidden(i), 64);
  // The 1.4B shapes (docs/mudd.md, "Architecture"): F from 4096 to 12288, H 64 then 128, round64's +64 quirk.
  MuddConfig big = c;
  big.n_layer = 24;
  big.intermediate_size = 8192;
  EXPECT_EQ(big.ffn_width(0), 4096);
  EXPECT_EQ(big.ffn_width(7), 6528);
  EXPECT_EQ(big.ffn_width(23), 12288);
  EXPECT_EQ(big.da_hidden(13), 64);
  EXPECT_EQ(big.da_hidden(14), 128);  // base 64 -> 128
  EXPECT_EQ(big.da_hidden(23), 128);  // 25 * 4 = 100 -> 128
  int sum = 0;
  for (int i = 0; i < 24; ++i) sum += big.ffn_width(i);
  EXPECT_EQ(sum, 24 * 8192);
}

TEST(MuddConfigShapes, WeightDecayOnRankTwoTensorsOnly) {
  // The gated family's AdamW rule (docs/model.md): decay on the rank-2 tensors, which for MUDD are
  // every weight matrix and dense_bs; never on biases and norm scales. (Before the layout was built
  // by LayoutBuilder, a moved-from shape made every flag false: MUDD trained without decay.)
  const std::vector<TensorSlot> layout = mudd_tensor_layout(MuddConfig::load(kTiny));
  int decayed = 0;
  for (const TensorSlot& s : layout) {
    EXPECT_EQ(s.weight_decay, s.shape.size() == 2) << s.name;
    decayed += s.weight_decay ? 1 : 0;
  }
  EXPECT_GT(decayed, 0);
}

class MuddBadFolder : public ::testing::Test {
 protected:
  // A copy of the tiny F32 folder to break.
  void SetUp() override {
    for (const char* f : {"config.json", "model.safetensors"}) std::filesystem::copy_file(kTiny + "/" + f, dir.file(f));
  }
  void expect_error(const std::string& folder, const std::vector<std::string>& parts) {
    try {
      MuddModel<float>::load(folder);
      ADD_FAILURE() << "loaded a bad folder";
    } catch (const Error& e) {
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }
  testing::TempDir dir;
};

TEST_F(MuddBadFolder, NoConfig) {
  std::filesystem::remove(dir.file("config.json"));
  expect_error(dir.path(), {"config.json", "cannot open"});
}

TEST_F(MuddBadFolder, MissingAndMisshapenTensors) {
  const MuddModel<float> m = MuddModel<float>::load(kTiny);
  for (const std::string drop : {"dense_bs.2", "dynamic_dense.1.w1.weight", "layers.3.attention.k_norm.weight"}) {
    std::vector<TensorToWrite> tensors;
    for (const auto& s : m.layout())
      if (s.name != drop) tensors.push_back({s.name, s.shape, m.data() + s.offset});
    write_safetensors(dir.file("model.safetensors"), tensors, {{"format", "pt"}});
    expect_error(dir.path(), {"model.safetensors", drop, "missing"});
  }
  std::vector<TensorToWrite> tensors;
  for (const auto& s : m.layout()) {
    auto shape = s.shape;
    if (s.name == "layers.1.feed_forward.w1.weight") shape = {128, 64};  // F_1 is 256
    tensors.push_back({s.name, shape, m.data() + s.offset});
  }
  write_safetensors(dir.file("model.safetensors"), tensors, {{"format", "pt"}});
  expect_error(dir.path(), {"layers.1.feed_forward.w1.weight", "[128, 64]", "expected [256, 64]"});
}

TEST_F(MuddBadFolder, ShardProblems) {
  const std::string sharded = dir.file("sharded");
  std::filesystem::copy(kSharded, sharded);
  // Truncated shard.
  const std::string shard = sharded + "/model-00002-of-00002.safetensors";
  const std::string bytes = testing::read_bytes(shard);
  testing::write_text(shard, bytes.substr(0, bytes.size() / 2));
  expect_error(sharded, {"model-00002-of-00002.safetensors"});
  // An index naming a missing file.
  std::filesystem::remove(shard);
  expect_error(sharded, {"model.safetensors.index.json", "model-00002-of-00002.safetensors", "does not exist"});
  // Shard names that leave the folder, or are not names at all.
  std::filesystem::copy_file(kSharded + "/model-00002-of-00002.safetensors", shard);
  for (const std::string entry : {"\"../sharded/model-00002-of-00002.safetensors\"", "\"/etc/passwd\"", "\"..\"", "7"}) {
    nlohmann::json index = nlohmann::json::parse(testing::read_bytes(kSharded + "/model.safetensors.index.json"));
    index["weight_map"]["norm.weight"] = nlohmann::json::parse(entry);
    testing::write_text(sharded + "/model.safetensors.index.json", index.dump());
    expect_error(sharded, {"model.safetensors.index.json", "weight_map entry 'norm.weight'"});
  }
  for (const std::string index : {"{\"weight_map\": {}}", "[]", "{\"weight_map\": []}"}) {
    testing::write_text(sharded + "/model.safetensors.index.json", index);
    expect_error(sharded, {"model.safetensors.index.json", "weight_map"});
  }
}

TEST_F(MuddBadFolder, ConfigValuesOutOfRange) {
  const nlohmann::json good = nlohmann::json::parse(testing::read_bytes(kTiny + "/config.json"));
  struct Case {
    const char* key;
    nlohmann::json value;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"n_layer", 1099511627776LL, {"'n_layer'", "1 .. 4096", "1099511627776"}},  // would narrow to 0 in an int
      {"n_layer", -4, {"'n_layer'", "1 .. 4096"}},
      {"dim", 0, {"'dim'"}},
      {"n_head", 3.5, {"'n_head'", "integer"}},
      {"vocab_size", "512", {"'vocab_size'", "integer"}},
      {"norm_eps", 0.0, {"'norm_eps'", "positive"}},
      {"norm_eps", -1e-5, {"'norm_eps'"}},
      {"rope_base", 0, {"'rope_base'", "positive"}},
      {"rotary_pct", 1.5, {"'rotary_pct'", "[0, 1]"}},
      {"use_qk_norm", 1, {"'use_qk_norm'", "true or false"}},
      {"head_dim", 8, {"head_dim", "differs"}},
      // A config describing 8 GiB of weights the file does not hold: refused, naming the first tensor
      // that disagrees, before the buffer is allocated.
      {"vocab_size", 1 << 24, {"model.safetensors", "tok_embeddings.weight", "expected [16777216, 64]"}},
  };
  for (const auto& c : cases) {
    nlohmann::json cfg = good;
    cfg[c.key] = c.value;
    testing::write_text(dir.file("config.json"), cfg.dump());
    SCOPED_TRACE(std::string(c.key) + " = " + c.value.dump());
    expect_error(dir.path(), c.message);
  }
  nlohmann::json cfg = good;
  cfg.erase("rotary_pct");
  testing::write_text(dir.file("config.json"), cfg.dump());
  expect_error(dir.path(), {"config.json", "'rotary_pct' is missing"});
  // Keys fca does not use are metadata of a third-party format and are ignored.
  cfg = good;
  cfg["transformers_version_next"] = "9.9";
  testing::write_text(dir.file("config.json"), cfg.dump());
  EXPECT_NO_THROW(MuddModel<float>::load(dir.path()));
}

TEST_F(MuddBadFolder, UnsupportedConfig) {
  std::string cfg = testing::read_bytes(dir.file("config.json"));
  const size_t at = cfg.find("\"qkvr\"");
  testing::write_text(dir.file("config.json"), cfg.substr(0, at) + "\"qkv\"" + cfg.substr(at + 6));
  expect_error(dir.path(), {"dense_type", "qkv"});
}

}  // namespace
}  // namespace fca
