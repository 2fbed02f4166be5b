// The record-kind table (models/record_kind.h): one row per kind, found by kind and by name, with
// the operations its records need; and the shared recording and replayed sources
// (models/base/recorded_source.h) that a family with a continuous record uses as they are.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>

#include "core/error.h"
#include "models/base/recorded_source.h"
#include "models/record_kind.h"

namespace fca {
namespace {

TEST(RecordKinds, EveryKindHasOneRowFoundByKindAndByName) {
  std::set<std::string> names;
  for (RecordKind kind : {RecordKind::continuous, RecordKind::expert_routing, RecordKind::token_selection, RecordKind::exit_depth}) {
    const RecordKindRow& row = record_kind_row(kind);
    EXPECT_EQ(row.kind, kind);
    EXPECT_TRUE(names.insert(row.name).second) << row.name << " names two rows";
    ASSERT_NE(record_kind_named(row.name), nullptr);
    EXPECT_EQ(record_kind_named(row.name)->kind, kind);
    EXPECT_STREQ(record_kind_name(kind), row.name);
    ASSERT_NE(row.shape_words, nullptr);
    ASSERT_NE(row.dense_view, nullptr);
    ASSERT_NE(row.probe_words, nullptr);
    // A discrete field must be validated, counted and perturbed by the probe; values alone need none.
    EXPECT_EQ(row.check != nullptr, row.discrete) << row.name;
    EXPECT_EQ(row.load != nullptr, row.discrete) << row.name;
    EXPECT_EQ(row.perturb_discrete != nullptr, row.discrete) << row.name;
  }
  EXPECT_EQ(record_kind_rows().size(), names.size());
  EXPECT_EQ(record_kind_named("expert_choice"), nullptr);
}

TEST(RecordKinds, AShapeSaysItsKind) {
  CoefficientShape s{3, 4, 1, 2};
  EXPECT_EQ(s.to_string(), "[layer 3, token 4, stream 1, source 2]");
  s.kind = RecordKind::expert_routing;
  s.slots = 2;
  s.categories = 8;
  EXPECT_EQ(s.to_string(), "[layer 3, token 4, stream 1, source 2] expert_routing (slots 2, categories 8, selected 0)");
  s = CoefficientShape{3, 4, 1, 1, RecordKind::exit_depth, 1, 0, 0, 2};
  EXPECT_EQ(s.to_string(), "[layer 3, token 4, stream 1, source 1] exit_depth (min exit 2)");
}

// A live source that writes row n's width entries as n * 10 + i, counting its calls.
class CountingSource : public ControllerSource {
 public:
  using Value = double;
  using Inputs = std::tuple<int>;
  virtual void coefficients(int layer, const BatchPosition& batch, int inputs, double* out) = 0;
};
class CountingLive : public CountingSource {
 public:
  explicit CountingLive(const int& width) : width_(width) {}
  bool evaluates_controller() const override { return true; }
  void coefficients(int layer, const BatchPosition& batch, int, double* out) override {
    ++calls;
    for (int n = 0; n < batch.batch * batch.tokens; ++n)
      for (int i = 0; i < width_; ++i) out[n * width_ + i] = layer * 1000 + n * 10 + i + 0.5;
  }
  int calls = 0;

 private:
  int width_;
};

TEST(RecordedSource, RecordsEveryRowAndReplaysItWithoutTheController) {
  const int width = 3;
  CoefficientTensor sink(4, CoefficientShape{2, 5, 1, width});
  RecordingSource<CountingLive> recording(width, sink);
  std::vector<double> live(size_t(2) * 5 * width), replayed(live.size());
  for (int layer = 0; layer < 2; ++layer) recording.coefficients(layer, BatchPosition{2, 2, 5, nullptr}, 0, live.data());
  EXPECT_EQ(recording.calls, 2);
  EXPECT_EQ(sink.at(3, 1, 4, 0, 2), float(1000 + (1 * 5 + 4) * 10 + 2 + 0.5));  // window 2 + 1, layer 1, token 4
  EXPECT_EQ(sink.at(0, 0, 0, 0, 0), 0.0f);  // windows 0 and 1 were not in the batch
  ReplayedSource<CountingSource> replay(sink);
  EXPECT_FALSE(replay.evaluates_controller());
  replay.coefficients(1, BatchPosition{2, 2, 5, nullptr}, 0, replayed.data());
  EXPECT_EQ(replayed, live);  // layer 1's rows, as the live source wrote them last
  const std::vector<double> layer1 = replayed;
  try {
    replay.coefficients(2, BatchPosition{2, 2, 5, nullptr}, 0, replayed.data());
    ADD_FAILURE() << "a layer beyond the record was replayed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("replayed coefficients: shape"), std::string::npos) << e.what();
  }
  EXPECT_THROW(recording.coefficients(0, BatchPosition{3, 2, 5, nullptr}, 0, live.data()), Error);  // windows 3..4 of 4
  // A coordinate the mask marks invalid replays as 0, whatever the tensor holds there.
  sink.set_valid(1, 0, 1, false);
  replay.coefficients(1, BatchPosition{2, 2, 5, nullptr}, 0, replayed.data());
  for (size_t n = 0; n < replayed.size() / width; ++n) {
    EXPECT_EQ(replayed[n * width + 1], 0.0) << n;
    EXPECT_EQ(replayed[n * width + 2], layer1[n * width + 2]) << n;
  }
}

}  // namespace
}  // namespace fca
