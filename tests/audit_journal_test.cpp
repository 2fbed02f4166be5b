// The audit journal (audit/journal.h): records survive a reopen, a last line cut short by a kill is
// dropped, another audit's journal is refused naming the field, and doubles round-trip exactly.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>

#include "audit/journal.h"
#include "core/error.h"
#include "core/file_io.h"
#include "test_util.h"

namespace fca {
namespace {

nlohmann::ordered_json identity(int reps) { return {{"model_sha256", "abc"}, {"reps", reps}, {"conditions", {"cross_input"}}}; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(AuditJournal, RecordsSurviveAndACutLineIsDropped) {
  testing::TempDir dir;
  const std::string path = dir.file("journal.jsonl");
  {
    AuditJournal j(path, identity(3), 8);
    EXPECT_FALSE(file_exists(path)) << "nothing on disk before the first record";
    j.append({{"kind", "exact_replay"}});
    j.append({{"kind", "batch"}, {"w0", 0}});
    j.append({{"kind", "batch"}, {"w0", 8}});
  }
  {
    std::ofstream out(path, std::ios::app);
    out << R"({"kind": "batch", "w0": 16, "nll": [[1, 2)";  // killed mid-write: no newline
  }
  EXPECT_EQ(AuditJournal::recorded_batch(path), 8);
  {
    AuditJournal j(path, identity(3), 8);
    EXPECT_EQ(j.resumed_records(), 3);
    ASSERT_NE(j.find("batch", 8), nullptr);
    EXPECT_EQ(j.find("batch", 16), nullptr);
    EXPECT_NE(j.find("exact_replay"), nullptr);
    j.append({{"kind", "batch"}, {"w0", 16}});
  }
  AuditJournal again(path, identity(3), 8);
  EXPECT_EQ(again.resumed_records(), 4);
  ASSERT_NE(again.find("batch", 16), nullptr);
  again.remove();
  EXPECT_FALSE(file_exists(path));
}

TEST(AuditJournal, AnotherAuditsJournalIsRefused) {
  testing::TempDir dir;
  const std::string path = dir.file("journal.jsonl");
  AuditJournal(path, identity(3), 8).append({{"kind", "exact_replay"}});
  EXPECT_NE(error_of([&] { AuditJournal(path, identity(5), 8); }).find("/reps differs"), std::string::npos);
  EXPECT_NE(error_of([&] { AuditJournal(path, identity(3), 4); }).find("made at batch 8, this audit runs batch 4"),
            std::string::npos);
  std::ofstream(path) << "not json\n";
  EXPECT_NE(error_of([&] { AuditJournal(path, identity(3), 8); }).find("not an audit journal"), std::string::npos);
}

TEST(AuditJournal, DoublesRoundTripBitForBit) {
  const double values[] = {0.1, -0.0, 1e-310, std::numeric_limits<double>::infinity(), std::nan(""), 2.5066282746310002};
  const size_t n = std::size(values);
  const nlohmann::json stored = nlohmann::json::parse(doubles_to_bits(values, n).dump());
  double back[std::size(values)];
  bits_to_doubles(stored, back, n, "test");
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(std::bit_cast<uint64_t>(back[i]), std::bit_cast<uint64_t>(values[i])) << i;
  EXPECT_NE(error_of([&] { bits_to_doubles(stored, back, n + 1, "record 3"); }).find("record 3: expected 7 values, found 6"),
            std::string::npos);
}

}  // namespace
}  // namespace fca
