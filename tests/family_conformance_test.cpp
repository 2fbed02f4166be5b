// What every installed family must satisfy for the audit's exact-replay check to mean what it
// says, run over model_families() so that a new family is covered without a line here:
// - the pass that records the coefficient cache (a live pass with a recording coefficient source)
//   equals the plain live pass bit for bit, logits and per-window NLL: exact replay compares the
//   replay with the recording pass where it keeps its logits (audit/recorded_live.h), so recording
//   must not change the run;
// - replaying the recorded coefficients reproduces both, with 0 controller evaluations.
// The audit also checks the first point on one batch per rank in every run (exact_replay.h); this
// suite checks it for every family and every choice-valued setting (each gate kind), with batches
// of 1 and 3 windows, so that a recording path that differs only for some configurations fails here.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/rng.h"
#include "models/registry.h"
#include "test_util.h"
#include "train/train_family.h"

namespace fca {
namespace {

struct Pass {
  std::vector<float> logits;  // [B, T, vocab]
  std::vector<double> nll;    // [B]
};

Pass take(const AuditableModel& m, int B, int T, std::vector<double> nll) {
  return {std::vector<float>(m.last_logits(), m.last_logits() + size_t(B) * T * size_t(m.vocab())), std::move(nll)};
}

// Bitwise equality (a NaN or -0 against +0 differs), and every value finite.
void expect_same_bits(const Pass& a, const Pass& b, const std::string& what) {
  ASSERT_EQ(a.logits.size(), b.logits.size()) << what;
  EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)), 0) << what << ": logits";
  EXPECT_EQ(std::memcmp(a.nll.data(), b.nll.data(), a.nll.size() * sizeof(double)), 0) << what << ": NLL";
  for (double v : a.nll) EXPECT_TRUE(std::isfinite(v)) << what;
}

// Every family with its defaults, and each further value of its choice-valued settings.
std::vector<std::pair<const TrainFamily*, nlohmann::json>> configurations() {
  std::vector<std::pair<const TrainFamily*, nlohmann::json>> out;
  for (const auto& model_family : model_families()) {
    const TrainFamily& family = train_family_named(model_family.name);
    out.emplace_back(&family, resolve_settings(family, nlohmann::json::object(), "test"));
    for (const auto& setting : family.settings)
      for (const auto& choice : setting.choices)
        if (choice != setting.default_value)
          out.emplace_back(&family, resolve_settings(family, {{setting.key, choice}}, "test"));
  }
  return out;
}

TEST(FamilyConformance, RecordingEqualsThePlainLivePassAndReplayReproducesBoth) {
  testing::TempDir dir;
  const ModelShape shape{2, 16, 2, 16};
  const int T = shape.seq;
  int n = 0;
  for (const auto& [family, settings] : configurations()) {
    const std::string what = family->name + " " + settings.dump();
    SCOPED_TRACE(what);
    const std::string path = checkpoint_path(*family, dir.file(std::to_string(n++) + "-model"));
    family->make(shape, settings, TrainableArgs{7, 2, {}, 1.0}, "test")->save(path, {});
    for (int B : {1, 3}) {
      const auto model = open_model(path, B, T);
      Rng rng(uint64_t(11 + B));
      std::vector<int32_t> x(size_t(B) * T), y(size_t(B) * T);
      for (auto& v : x) v = int32_t(rng.below(uint64_t(std::min(model->vocab(), 256))));
      for (auto& v : y) v = int32_t(rng.below(uint64_t(std::min(model->vocab(), 256))));
      std::vector<double> nll(static_cast<size_t>(B));
      CoefficientTensor recorded = model->make_coefficients(B, T);
      model->poison_logits(B, T);
      model->run_live(x.data(), y.data(), B, T, &recorded, 0, nll.data());
      const Pass recording = take(*model, B, T, nll);
      model->poison_logits(B, T);
      model->run_live(x.data(), y.data(), B, T, nullptr, 0, nll.data());
      const Pass plain = take(*model, B, T, nll);
      expect_same_bits(recording, plain, "recording pass against the plain live pass, B " + std::to_string(B));
      const int64_t before = model->replay_controller_evaluations();
      model->poison_logits(B, T);
      model->run_replay(x.data(), y.data(), B, T, recorded, nll.data());
      expect_same_bits(take(*model, B, T, nll), plain, "replay against the plain live pass, B " + std::to_string(B));
      EXPECT_EQ(model->replay_controller_evaluations(), before);
    }
  }
  EXPECT_GE(n, int(model_families().size()));
}

}  // namespace
}  // namespace fca
