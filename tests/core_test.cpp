// core: safetensors read/write and dtype upcasts, SHA-256, the RNG, windows of a split.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include "core/json.h"

#include "audit/conditions.h"
#include "core/error.h"
#include "core/half.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "core/sha256.h"
#include "data/corpus.h"
#include "models/gated/model.h"
#include "models/mod/model.h"
#include "models/moe/model.h"
#include "models/mudd/model.h"
#include "test_util.h"

namespace fca {
namespace {

// Writes a safetensors file with one tensor of raw bytes and the given dtype name.
void write_raw(const std::string& path, const std::string& dtype, std::vector<int64_t> shape, const std::string& data) {
  nlohmann::json h;
  h["x"] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {0, data.size()}}};
  const std::string text = h.dump();
  const uint64_t n = text.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << text << data;
}

TEST(Safetensors, RoundTripF32WithMetadata) {
  testing::TempDir dir;
  const std::vector<float> a{1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 1e-30f};
  write_safetensors(dir.file("t.safetensors"), {{"a", {2, 3}, a.data()}}, {{"format", "x"}});
  SafetensorsReader r(dir.file("t.safetensors"));
  EXPECT_EQ(r.metadata().at("format"), "x");
  std::vector<float> back(6);
  r.read_into<float>("a", {2, 3}, back.data());
  EXPECT_EQ(a, back);
  EXPECT_THROW(r.read_into<float>("a", {3, 2}, back.data()), Error);
  EXPECT_THROW(r.get("b"), Error);
}

TEST(Safetensors, Bf16AndF16UpcastExactly) {
  testing::TempDir dir;
  // bf16 0x3FC0 = 1.5, 0xC000 = -2; f16 0x3E00 = 1.5, 0xC000 = -2, 0x0001 = 2^-24 (subnormal).
  const uint16_t bf[2] = {0x3FC0, 0xC000}, hf[3] = {0x3E00, 0xC000, 0x0001};
  write_raw(dir.file("bf.safetensors"), "BF16", {2}, std::string(reinterpret_cast<const char*>(bf), 4));
  write_raw(dir.file("hf.safetensors"), "F16", {3}, std::string(reinterpret_cast<const char*>(hf), 6));
  std::vector<float> x(3);
  SafetensorsReader(dir.file("bf.safetensors")).read_into<float>("x", {2}, x.data());
  EXPECT_EQ(x[0], 1.5f);
  EXPECT_EQ(x[1], -2.0f);
  SafetensorsReader(dir.file("hf.safetensors")).read_into<float>("x", {3}, x.data());
  EXPECT_EQ(x[0], 1.5f);
  EXPECT_EQ(x[1], -2.0f);
  EXPECT_EQ(x[2], std::ldexp(1.0f, -24));
}

// Narrowing float32 to F16 and BF16 as PyTorch does: the expected bits are those of
// torch.tensor(v, dtype=torch.float32).to(torch.float16 / torch.bfloat16) (torch 1.13, Debian 12),
// chosen to cover ties to even, the F16 subnormals and the thresholds of zero and of inf.
TEST(HalfFormats, NarrowingRoundsAsPyTorchDoes) {
  struct Case {
    uint32_t f32;
    uint16_t f16, bf16;
  };
  const Case cases[] = {
      {0x3dcccccd, 0x2e66, 0x3dcd},  // 0.1
      {0x3eaaaaab, 0x3555, 0x3eab},  // 1/3
      {0x477fef00, 0x7bff, 0x4780},  // 65519: the largest F16 below
      {0x477ff000, 0x7c00, 0x4780},  // 65520: ties up into inf
      {0x3727c5ac, 0x00a8, 0x3728},  // 1e-5: F16 subnormal
      {0x3300d959, 0x0001, 0x3301},  // 3e-8: just above 2^-25 rounds to the smallest subnormal
      {0x32fffae5, 0x0000, 0x3300},  // 2.98e-8: below 2^-25 rounds to zero
      {0x387fda40, 0x03ff, 0x3880},  // 6.1e-5: the largest subnormal
      {0xbf333333, 0xb99a, 0xbf33},  // -0.7
      {0x3f801000, 0x3c00, 0x3f80},  // 1 + 2^-11: a tie, to even (down)
      {0x3f803000, 0x3c02, 0x3f80},  // 1 + 3 * 2^-11: a tie, to even (up)
      {0x33c00000, 0x0002, 0x33c0},  // 1.5 * 2^-24: a subnormal tie, up to even
      {0x34200000, 0x0002, 0x3420},  // 2.5 * 2^-24: a subnormal tie, down to even
      {0x33000000, 0x0000, 0x3300},  // 2^-25: ties to zero
      {0x33000001, 0x0001, 0x3300},  // just above 2^-25
      {0x49742400, 0x7c00, 0x4974},  // 1e6: beyond F16, inf
      {0x80000000, 0x8000, 0x8000},  // -0
      {0x3f008000, 0x3804, 0x3f00},  // 0.5 + 2^-9: a BF16 tie, to even (down)
      {0x3f018000, 0x380c, 0x3f02},  // 0.5 + 3 * 2^-9: a BF16 tie, to even (up)
      {0x3f80c000, 0x3c06, 0x3f81},  // 1.005859375
  };
  for (const Case& c : cases) {
    float v;
    std::memcpy(&v, &c.f32, 4);
    EXPECT_EQ(f32_to_f16(v), c.f16) << std::hex << "f32 0x" << c.f32;
    EXPECT_EQ(f32_to_bf16(v), c.bf16) << std::hex << "f32 0x" << c.f32;
    if (std::isfinite(f16_to_f32(c.f16))) {
      EXPECT_EQ(f32_to_f16(f16_to_f32(c.f16)), c.f16);  // widening is exact
    }
    EXPECT_EQ(f32_to_bf16(bf16_to_f32(c.bf16)), c.bf16);
  }
  EXPECT_TRUE(std::isnan(round_through_f16(std::nanf(""))));
  EXPECT_TRUE(std::isnan(round_through_bf16(std::nanf(""))));
  EXPECT_EQ(round_through_f16(-INFINITY), -INFINITY);
  // Every F16 value survives the round trip, so a recorded fp16 coefficient replays exactly.
  for (uint32_t h = 0; h < 0x10000; ++h)
    if ((h & 0x7C00) != 0x7C00) {
      ASSERT_EQ(f32_to_f16(f16_to_f32(uint16_t(h))), h) << std::hex << h;
    }
}

TEST(Safetensors, ByteCountMustMatchShape) {
  testing::TempDir dir;
  write_raw(dir.file("x.safetensors"), "F32", {3}, std::string(8, '\0'));
  EXPECT_THROW(SafetensorsReader(dir.file("x.safetensors")), Error);
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string million(1000000, 'a');
  EXPECT_EQ(sha256_hex(million.data(), million.size()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Rng, DeterministicAndWellSpread) {
  Rng a(123), b(123), c(124);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
  EXPECT_NE(Rng(123).next_u64(), c.next_u64());
  Rng r(7);
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = r.normal();
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);  // 5 standard errors (1/sqrt(n) = 0.0022)
  EXPECT_NEAR(sq / n, 1.0, 0.016);
  for (int i = 0; i < 1000; ++i) EXPECT_LT(r.below(7), 7u);
  EXPECT_NE(derive_seed(1, 2, 3), derive_seed(1, 3, 2));
}

TEST(Windows, SpecLayoutAndEvenSpacing) {
  testing::TempDir dir;
  testing::write_text(dir.file("s.txt"), "abcdefghij");  // 10 bytes
  TextSplit split("test", dir.file("s.txt"));
  EXPECT_EQ(split.window_count(3), 3);  // floor((10 - 1) / 3)
  std::vector<int32_t> in(3), out(3);
  split.window(2, 3, in.data(), out.data());  // bytes [6, 10)
  EXPECT_EQ(in, (std::vector<int32_t>{'g', 'h', 'i'}));
  EXPECT_EQ(out, (std::vector<int32_t>{'h', 'i', 'j'}));
  EXPECT_THROW(split.window_count(10), Error);  // needs 11 bytes
  EXPECT_EQ(evenly_spaced_windows(10, 4, "test"), (std::vector<int64_t>{0, 2, 5, 7}));
  EXPECT_THROW(evenly_spaced_windows(3, 4, "test"), Error);
}

}  // namespace
}  // namespace fca

namespace fca {
namespace {

// A moved model keeps its parameter buffer (no allocation, no copy) and its bound views still point
// into it; moves cannot throw.
TEST(ModelMoves, KeepTheBufferAndCannotThrow) {
  static_assert(std::is_nothrow_move_constructible_v<GatedModel<float>>);
  static_assert(std::is_nothrow_move_constructible_v<MoeModel<float>>);
  static_assert(std::is_nothrow_move_constructible_v<ModModel<float>>);
  static_assert(std::is_nothrow_move_constructible_v<MuddModel<float>>);
  GatedModel<float> g = GatedModel<float>::initialized(testing::tiny_config(GateKind::featuregate), 1);
  const float* buffer = g.data();
  GatedModel<float> moved(std::move(g));
  EXPECT_EQ(moved.data(), buffer);
  EXPECT_EQ(moved.weights().wte, buffer);
  MoeModel<float> m = MoeModel<float>::initialized({2, 16, 2, 16, 4, 2, 0, 0.01}, 3);
  const float* moe_buffer = m.data();
  MoeModel<float> moved_moe(std::move(m));
  EXPECT_EQ(moved_moe.data(), moe_buffer);
}

// The derangements are drawn once; a reference to one stays valid while others are asked for
// (a lazily grown cache of vectors would have moved it), and a randomisation beyond reps is an error.
TEST(AuditRandomness, DerangementReferencesStayValid) {
  const AuditRandomness rand(7, 10, 4, 50);
  const std::vector<int>& first = rand.derangement(0);
  const std::vector<int> copy = first;
  for (int r = 1; r < 50; ++r) rand.derangement(r);
  EXPECT_EQ(&first, &rand.derangement(0));
  EXPECT_EQ(first, copy);
  for (int i = 0; i < 10; ++i) EXPECT_NE(first[size_t(i)], i);
  EXPECT_THROW(rand.derangement(50), Error);
}

}  // namespace
}  // namespace fca
