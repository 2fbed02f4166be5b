// The record-kind table (models/record_kind.h): one row per kind, found by kind and by name, with
// the operations its records need; and the shared recording and replayed sources
// (models/base/recorded_source.h) that a family with a continuous record uses as they are.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "audit/audit_kind.h"
#include "core/error.h"
#include "models/base/recorded_routing.h"
#include "models/base/recorded_source.h"
#include "models/record_kind.h"

namespace fca {
namespace {

// fca's four kinds, then any a family installed (the test binary's skip family: block_skip).
TEST(RecordKinds, EveryKindHasOneRowFoundByKindAndByName) {
  std::set<std::string> names;
  for (RecordKind kind : {RecordKind::continuous, RecordKind::expert_routing, RecordKind::token_selection, RecordKind::exit_depth})
    EXPECT_EQ(record_kind_row(kind).kind, kind);
  ASSERT_NE(record_kind_named("block_skip"), nullptr) << "the skip family's kind is not installed";
  for (const RecordKindRow& installed : record_kind_rows()) {
    const RecordKind kind = installed.kind;
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

// The audit's half of the table (audit/audit_kind.h): a row for every kind of the models' half,
// each a consistent table of conditions, and every function a phase calls is there.
TEST(RecordKinds, EveryKindHasAnAuditRow) {
  ASSERT_EQ(audit_kind_rows().size(), record_kind_rows().size());
  for (const RecordKindRow& models_row : record_kind_rows()) {
    const AuditKindRow& row = audit_kind_row(models_row.kind);
    EXPECT_EQ(row.kind, models_row.kind) << models_row.name;
    ASSERT_FALSE(row.condition_names.empty()) << models_row.name;
    EXPECT_EQ(row.condition_names.front(), "correct") << models_row.name;
    EXPECT_EQ(std::set<std::string>(row.condition_names.begin(), row.condition_names.end()).size(), row.condition_names.size())
        << models_row.name << ": a condition named twice";
    for (const auto& r : row.randomized)
      EXPECT_NE(std::find(row.condition_names.begin(), row.condition_names.end(), r), row.condition_names.end())
          << models_row.name << ": " << r << " is randomised but not a condition of the row";
    EXPECT_FALSE(row.is_randomized("correct")) << models_row.name;
    EXPECT_NE(row.skipped, nullptr) << models_row.name;
    EXPECT_NE(row.prepare, nullptr) << models_row.name;
    EXPECT_EQ(row.shortened_tokens != nullptr, row.full_computation_condition != nullptr) << models_row.name;
    if (row.full_computation_condition != nullptr) {
      EXPECT_NE(std::find(row.condition_names.begin(), row.condition_names.end(), std::string(row.full_computation_condition)),
                row.condition_names.end())
          << models_row.name;
    }
  }
}

// The record kinds' branches outside src/models/ (what a line switching on a kind looks like):
// every "RecordKind::x" that is not where a row is built (".kind = RecordKind::x").
std::vector<std::string> kind_branches(const std::string& text) {
  std::vector<std::string> out;
  const std::regex use("(.{0,40})RecordKind::[a-z_]+");
  for (std::sregex_iterator it(text.begin(), text.end(), use), stop; it != stop; ++it) {
    const std::string before = (*it)[1];
    if (before.size() < 8 || before.substr(before.size() - 8) != ".kind = ") out.push_back((*it)[0]);
  }
  return out;
}

// Outside src/models/ no code switches on a record kind: the audit, exec and the report read the
// rows. A kind is named only where its row is built.
TEST(RecordKinds, NothingOutsideTheModelsSwitchesOnTheKind) {
  const std::filesystem::path root(FCA_SOURCE_DIR);
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root / "src")) {
    const std::string rel = std::filesystem::relative(entry.path(), root).generic_string();
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".h") || rel.rfind("src/models/", 0) == 0) continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    for (const auto& branch : kind_branches(text.str()))
      ADD_FAILURE() << rel << " switches on a record kind (" << branch << "); read the kind's row instead (audit/audit_kind.h)";
  }
  // The check can fail: the branches this table replaced are found, a row's construction is not.
  EXPECT_EQ(kind_branches("  if (s.manifest.shape.kind == RecordKind::exit_depth) {").size(), 1u);
  EXPECT_EQ(kind_branches("  const bool exits = kind == RecordKind::exit_depth;").size(), 1u);
  EXPECT_TRUE(kind_branches("  return {.kind = RecordKind::exit_depth,").empty());
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

// A family whose live rows hold only each layer's valid coordinates, packed (MUDD's C_l streams of
// S_l sources): declared by kPackedValidRows, the rows land on the record's valid rectangle.
class PackedSource : public ControllerSource {
 public:
  using Value = float;
  using Inputs = std::tuple<>;
  static constexpr bool kPackedValidRows = true;
  virtual void coefficients(int layer, const BatchPosition& batch, float* out) = 0;
};
// Layer 0: 2 streams of 2 sources; layer 1: 1 stream of 3 sources (record [2, T, 2, 3]).
constexpr int kPackedStreams[2] = {2, 1}, kPackedSources[2] = {2, 3};
class PackedLive : public PackedSource {
 public:
  explicit PackedLive(int) {}
  bool evaluates_controller() const override { return true; }
  void coefficients(int layer, const BatchPosition& batch, float* out) override {
    const int width = kPackedStreams[layer] * kPackedSources[layer];
    for (int n = 0; n < batch.batch * batch.tokens; ++n)
      for (int i = 0; i < width; ++i) out[n * width + i] = float(layer * 100 + n * 10 + i + 1);
  }
};

TEST(RecordedSource, PackedRowsLandOnTheValidRectangle) {
  const int T = 3;
  CoefficientTensor sink(1, CoefficientShape{2, T, 2, 3});
  for (int l = 0; l < 2; ++l)
    for (int st = 0; st < 2; ++st)
      for (int k = 0; k < 3; ++k) sink.set_valid(l, st, k, st < kPackedStreams[l] && k < kPackedSources[l]);
  RecordingSource<PackedLive> recording(0, sink);
  ReplayedSource<PackedSource> replay(sink);
  for (int l = 0; l < 2; ++l) {
    const int S = kPackedSources[l], width = kPackedStreams[l] * S;
    std::vector<float> live(size_t(T) * width), replayed(live.size(), -1.0f);
    recording.coefficients(l, BatchPosition{0, 1, T, nullptr}, live.data());
    for (int t = 0; t < T; ++t)
      for (int st = 0; st < 2; ++st)
        for (int k = 0; k < 3; ++k) {
          const bool valid = st < kPackedStreams[l] && k < S;
          EXPECT_EQ(sink.at(0, l, t, st, k), valid ? live[size_t(t * width + st * S + k)] : 0.0f) << l << " " << t << " " << st << " " << k;
        }
    replay.coefficients(l, BatchPosition{0, 1, T, nullptr}, replayed.data());
    EXPECT_EQ(replayed, live) << "layer " << l;
  }
  // A mask that is not a rectangle from (0, 0) gives no row width: refused, not read past a row.
  sink.set_valid(1, 1, 2, true);
  std::vector<float> row(size_t(T) * 3);
  EXPECT_THROW(replay.coefficients(1, BatchPosition{0, 1, T, nullptr}, row.data()), Error);
  EXPECT_THROW(recording.coefficients(1, BatchPosition{0, 1, T, nullptr}, row.data()), Error);
}

// A routing source (models/base/recorded_routing.h): the layout writes the live call's flags into
// the discrete field, shifted by the config, and replay reads them back without the router.
class FlagSource : public ControllerSource {
 public:
  using Value = float;
  using Config = int;
  using Inputs = std::tuple<int32_t*>;
  virtual void route(int layer, const BatchPosition& batch, int32_t* flags) = 0;
  static void record(const int& shift, CoefficientTensor& sink, int layer, const BatchPosition& batch, int32_t* flags) {
    for (int b = 0; b < batch.batch; ++b)
      for (int t = 0; t < batch.tokens; ++t) sink.discrete_at(batch.first_window + b, layer, t, 0) = flags[b * batch.tokens + t] + shift;
  }
  static void replay(const int& shift, const CoefficientTensor& record, int layer, const BatchPosition& batch, int32_t* flags) {
    for (int b = 0; b < batch.batch; ++b)
      for (int t = 0; t < batch.tokens; ++t) flags[b * batch.tokens + t] = record.discrete_at(batch.first_window + b, layer, t, 0) - shift;
  }
};
struct FlagModel {
  int config() const { return 7; }
};
class FlagLive : public FlagSource {
 public:
  explicit FlagLive(const FlagModel&) {}
  bool evaluates_controller() const override { return true; }
  void route(int layer, const BatchPosition& batch, int32_t* flags) override {
    ++calls;
    for (int n = 0; n < batch.batch * batch.tokens; ++n) flags[n] = layer * 100 + n;
  }
  int calls = 0;
};

TEST(RecordedRouting, RecordsTheLayoutAndReplaysItWithoutTheRouter) {
  const int T = 4;
  CoefficientShape shape{2, T, 1, 1};
  shape.kind = RecordKind::token_selection;
  shape.slots = 1;
  shape.selected = 1;
  CoefficientTensor sink(3, shape);
  RecordingRouting<FlagLive> recording(FlagModel{}, sink);
  ReplayedRouting<FlagSource> replay(7, sink);
  EXPECT_TRUE(recording.evaluates_controller());
  EXPECT_FALSE(replay.evaluates_controller());
  for (int layer = 0; layer < 2; ++layer) {
    std::vector<int32_t> live(size_t(2) * T), replayed(live.size(), -1);
    recording.route(layer, BatchPosition{1, 2, T, nullptr}, live.data());
    EXPECT_EQ(sink.discrete_at(2, layer, 3, 0), layer * 100 + 7 + 7);  // window 1 + 1, token 3: n = 7, shifted by 7
    replay.route(layer, BatchPosition{1, 2, T, nullptr}, replayed.data());
    EXPECT_EQ(replayed, live) << "layer " << layer;
  }
  EXPECT_EQ(recording.calls, 2);
}

// A routing source with a per-pass preamble (early exit's begin): recording runs the live begin and
// then record_begin; replay runs replay_begin alone, which here refuses a window the preamble did
// not mark.
class PreambleSource : public FlagSource {
 public:
  virtual void begin(const BatchPosition& batch) = 0;
  static void record_begin(const int&, CoefficientTensor& sink, const BatchPosition& batch) {
    for (int b = 0; b < batch.batch; ++b) sink.at(batch.first_window + b, 0, 0) = 1.0f;
  }
  static void replay_begin(const int&, const CoefficientTensor& record, const BatchPosition& batch) {
    for (int b = 0; b < batch.batch; ++b)
      if (record.at(batch.first_window + b, 0, 0) != 1.0f) throw Error("window " + std::to_string(batch.first_window + b) + " unmarked");
  }
};
class PreambleLive : public PreambleSource {
 public:
  explicit PreambleLive(const FlagModel&) {}
  bool evaluates_controller() const override { return true; }
  void begin(const BatchPosition&) override { ++begins; }
  void route(int, const BatchPosition& batch, int32_t* flags) override {
    for (int n = 0; n < batch.batch * batch.tokens; ++n) flags[n] = n;
  }
  int begins = 0;
};

TEST(RecordedRouting, APassPreambleRunsBeforeTheRoutes) {
  CoefficientShape shape{1, 2, 1, 1};
  shape.kind = RecordKind::token_selection;
  shape.slots = 1;
  shape.selected = 1;
  CoefficientTensor sink(2, shape);
  RecordingRouting<PreambleLive> recording(FlagModel{}, sink);
  ReplayedRouting<PreambleSource> replay(7, sink);
  EXPECT_THROW(replay.begin(BatchPosition{0, 1, 2, nullptr}), Error);  // nothing recorded yet
  recording.begin(BatchPosition{0, 1, 2, nullptr});
  EXPECT_EQ(recording.begins, 1);
  EXPECT_EQ(sink.at(0, 0, 0), 1.0f);
  EXPECT_NO_THROW(replay.begin(BatchPosition{0, 1, 2, nullptr}));
  EXPECT_THROW(replay.begin(BatchPosition{1, 1, 2, nullptr}), Error);  // window 1 was not in the pass
}

}  // namespace
}  // namespace fca
