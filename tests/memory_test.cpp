// The arena's memory check (core/memory.h, core/arena.h): the bytes a run state needs against an
// injected "available" figure, the bound Arena::for_windows puts on a batch's bytes, the batch it
// suggests, and byte counts that would overflow 64 bits.
#include <gtest/gtest.h>

#include <climits>
#include <string>

#include "core/arena.h"
#include "core/memory.h"
#include "models/gated/run_state.h"
#include "test_util.h"

namespace fca {
namespace {

// The bytes of a layout of `windows` windows: 1000 floats and 3 int32 per window, plus 100 bytes.
struct PerWindowLayout {
  template <typename A>
  void operator()(A& a, int windows) const {
    a.template take<float>(size_t(windows) * 1000);
    a.template take<int32_t>(size_t(windows) * 3);
    a.template take<uint8_t>(100);
  }
};

OutOfMemory expect_out_of_memory(const std::function<void()>& f) {
  try {
    f();
  } catch (const OutOfMemory& e) {
    return e;
  }
  ADD_FAILURE() << "no OutOfMemory";
  return OutOfMemory(0, 0, {});
}

TEST(ArenaMemory, ArenaRefusesMoreThanAvailable) {
  {
    const AvailableMemoryOverride available(1 << 20);
    const OutOfMemory e = expect_out_of_memory([] { Arena a((1 << 20) + 1); });
    EXPECT_EQ(e.needed(), size_t(1 << 20) + 1);
    EXPECT_EQ(e.available(), size_t(1 << 20));
    EXPECT_EQ(e.sizing().windows, 0);
    EXPECT_EQ(std::string(e.what()), "an arena needs 1.0 MiB, 1.0 MiB available");
    EXPECT_NO_THROW(Arena a(1 << 20));
  }
  // A byte count that saturated (overflow) is refused whatever the memory.
  const AvailableMemoryOverride available(kUncountableBytes);
  EXPECT_THROW(Arena a(kUncountableBytes), OutOfMemory);
}

TEST(ArenaMemory, ForWindowsBoundsTheBatchAndSuggestsOneThatFits) {
  const size_t available_bytes = 4000 * 1000;
  const AvailableMemoryOverride available(available_bytes);
  const OutOfMemory e = expect_out_of_memory([] { Arena::for_windows(100000, PerWindowLayout{}); });
  const WindowBytes& s = e.sizing();
  EXPECT_EQ(s.windows, 100000);
  ASSERT_EQ(s.per_window, 4012u);             // 1000 floats and 3 int32
  EXPECT_EQ(s.fixed, 100u + 3 * (kArenaAlignment - 1));  // the constant, plus each take's padding at most
  EXPECT_EQ(e.needed(), s.fixed + 100000 * s.per_window);
  const int fit = s.windows_that_fit(available_bytes);
  EXPECT_EQ(fit, int((available_bytes - s.fixed) / s.per_window));
  EXPECT_NE(e.advice("--batch").find("the run state of 100000 windows needs 382.6 MiB, 3.8 MiB available; try --batch " +
                                     std::to_string(fit)),
            std::string::npos)
      << e.advice("--batch");
  // The suggested batch fits, with the real (padded) bytes within the bound; one more does not.
  const Arena arena = Arena::for_windows(fit, PerWindowLayout{});
  EXPECT_LE(arena.capacity(), s.fixed + size_t(fit) * s.per_window);
  EXPECT_EQ(arena.used(), arena.capacity());
  EXPECT_THROW(Arena::for_windows(fit + 1, PerWindowLayout{}), OutOfMemory);
}

TEST(ArenaMemory, NotEvenOneWindowFits) {
  const AvailableMemoryOverride available(1000);
  const OutOfMemory e = expect_out_of_memory([] { Arena::for_windows(8, PerWindowLayout{}); });
  EXPECT_EQ(e.sizing().windows_that_fit(1000), 0);
  EXPECT_NE(e.advice("--batch").find("; not even --batch 1 fits (one window needs"), std::string::npos) << e.advice("--batch");
}

TEST(ArenaMemory, ByteCountsThatWouldOverflowSaturate) {
  // 2^62 floats per window: 2^64 bytes, which size_t cannot hold.
  const auto huge = [](auto& a, int windows) { a.template take<float>(size_t(windows) << 62); };
  ArenaMeasure m;
  huge(m, 1);
  EXPECT_EQ(m.bytes(), kUncountableBytes);
  EXPECT_EQ(m.unpadded(), kUncountableBytes);
  const AvailableMemoryOverride available(kUncountableBytes - 1);
  const OutOfMemory e = expect_out_of_memory([&] { Arena::for_windows(INT_MAX, huge); });
  EXPECT_EQ(e.needed(), kUncountableBytes);
  EXPECT_NE(std::string(e.what()).find("needs 2^64 bytes or more"), std::string::npos) << e.what();
}

// A real run state: a FeatureGate model's controller keeps [B, H, T, T] log-probabilities, so a
// batch of INT_MAX windows of 32768 tokens needs more than 2^64 bytes (the old int64 and size_t
// products wrapped); a batch of a billion windows of 16 tokens needs terabytes.
TEST(ArenaMemory, RunStatesCheckTheirBatch) {
  GatedConfig c = testing::tiny_config(GateKind::featuregate);
  EXPECT_THROW(GatedRunState<float>(c, 1000000000, c.seq_len, false), OutOfMemory);
  {
    const AvailableMemoryOverride available(size_t(64) << 20);
    const OutOfMemory e = expect_out_of_memory([&] { GatedRunState<float>(c, 1 << 20, c.seq_len, false); });
    const int fit = e.sizing().windows_that_fit(e.available());
    ASSERT_GT(fit, 0);
    EXPECT_NO_THROW(GatedRunState<float>(c, fit, c.seq_len, false));
  }
  c.seq_len = 32768;
  const OutOfMemory e = expect_out_of_memory([&] { GatedRunState<float>(c, INT_MAX, c.seq_len, false); });
  EXPECT_EQ(e.needed(), kUncountableBytes);
}

TEST(AvailableMemory, ReadsMeminfoAndCgroupText) {
  EXPECT_EQ(meminfo_available_bytes("MemTotal:  4096 kB\nMemFree:  1024 kB\nMemAvailable:   2048 kB\n"), size_t(2048) * 1024);
  EXPECT_FALSE(meminfo_available_bytes("MemTotal:  4096 kB\n"));
  EXPECT_FALSE(cgroup_room_bytes("max\n", "100\n", ""));  // no limit at this level
  EXPECT_EQ(cgroup_room_bytes("1000\n", "600\n", "anon 400\ninactive_file 100\nactive_file 100\n"), 500u);
  EXPECT_EQ(cgroup_room_bytes("1000\n", "1200\n", "inactive_file 0\n"), 0u);
  EXPECT_FALSE(cgroup_room_bytes("", "", ""));  // no such file
  // The machine's figure is some positive count; an override replaces it while it lives.
  EXPECT_GT(available_memory_bytes(), 0u);
  {
    const AvailableMemoryOverride available(12345);
    EXPECT_EQ(available_memory_bytes(), 12345u);
  }
  EXPECT_NE(available_memory_bytes(), 12345u);
}

}  // namespace
}  // namespace fca
