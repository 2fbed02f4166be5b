// The train layer's family table (train/train_family.h): settings are completed with defaults and
// checked strictly, names are unique, and every installed family builds a trainable model of a
// small shape from its defaults.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/parse.h"
#include "models/registry.h"
#include "train/train_family.h"

namespace fca {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TrainFamily, EveryModelFamilyIsTrainableAndBuildsFromItsDefaults) {
  ASSERT_FALSE(train_families().empty());
  for (const auto& model_family : model_families()) {
    const TrainFamily& family = train_family_named(model_family.name);
    const nlohmann::json settings = resolve_settings(family, nlohmann::json::object(), "test");
    for (const auto& s : family.settings) EXPECT_EQ(settings.at(s.key), s.default_value) << family.name << " " << s.key;
    const ModelShape shape{2, 16, 2, 16};
    EXPECT_NO_THROW(family.check(shape, settings, "test")) << family.name;
    const auto model = family.make(shape, settings, TrainableArgs{1, 2, {}, 1.0}, "test");
    EXPECT_EQ(model->seq_len(), 16) << family.name;
    EXPECT_GT(model->parameter_count(), 0u) << family.name;
    // The checkpoint's files are the family's: a folder's lie inside it, a file's beside it.
    const CheckpointFiles files = family.files(checkpoint_path(family, "/tmp/x"));
    EXPECT_EQ(files.weights.rfind("/tmp/x", 0), 0u) << family.name;
    EXPECT_NE(files.weights, files.state) << family.name;
    EXPECT_NE(files.state, files.log) << family.name;
  }
}

TEST(TrainFamily, SettingsAreCheckedStrictly) {
  const TrainFamily& moe = train_family_named("moe");
  EXPECT_EQ(resolve_settings(moe, {{"top_k", 1}}, "t").at("top_k"), 1);
  EXPECT_EQ(resolve_settings(moe, {{"top_k", "3"}}, "t", SettingSource::flags).at("top_k"), 3);
  EXPECT_NE(error_of([&] { resolve_settings(moe, {{"gate", "dense"}}, "t"); }).find("\"gate\" is not a setting of the moe family"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_settings(moe, {{"top_k", 1.5}}, "t"); }).find("must be an integer"), std::string::npos);
  EXPECT_NE(error_of([&] { resolve_settings(moe, {{"top_k", "2"}}, "t"); }).find("must be an integer"), std::string::npos);
  EXPECT_NE(error_of([&] { resolve_settings(moe, {{"top_k", "2x"}}, "t", SettingSource::flags); })
                .find("--top-k: '2x' is not a whole number in 1 .. 4096"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_settings(moe, {{"aux_loss", "1e999"}}, "t", SettingSource::flags); })
                .find("--aux-loss: '1e999' is not a number >= 0"),
            std::string::npos);
  // Out of the setting's own range: the flag (or the study key) and the range in words.
  EXPECT_NE(error_of([&] { resolve_settings(train_family_named("hyper"), {{"hc_streams", "0"}}, "t", SettingSource::flags); })
                .find("--hc-streams: 0 is not a whole number in 1 .. 64"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_settings(train_family_named("mod"), {{"capacity", 0.0}}, "variants[1]"); })
                .find("variants[1]: mod setting \"capacity\": 0 is not a number in (0, 1]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_settings(train_family_named("gated"), {{"gate_value", "-1e-9"}}, "t", SettingSource::flags); })
                .find("--gate-value: -1e-09 is not a number in [0, 1]"),
            std::string::npos);
  const TrainFamily& gated = train_family_named("gated");
  EXPECT_NE(error_of([&] { resolve_settings(gated, {{"gate", "sparse"}}, "t"); }).find("expected one of dense"), std::string::npos);
  // Values the setting's type allows but the family's config does not are the config's to refuse.
  const ModelShape shape{2, 16, 2, 16};
  EXPECT_NE(error_of([&] { moe.check(shape, resolve_settings(moe, {{"top_k", 9}}, "t"), "flags"); }).find("flags"),
            std::string::npos);
  EXPECT_NE(error_of([&] { train_family_named("gated").check({2, 15, 2, 16}, resolve_settings(gated, {}, "t"), "flags"); }), "");
}

// Every numeric setting of every family with a range, given a value just outside it (as a flag and
// as a study key), is refused naming the flag or key, the value and the range in words.
TEST(TrainFamily, EveryRangedSettingRefusesValuesOutsideItsRangeNamingItself) {
  int checked = 0;
  for (const auto& family : train_families())
    for (const auto& s : family.settings) {
      if (!s.default_value.is_number()) continue;
      const bool integer = s.default_value.is_number_integer();
      const double step = integer ? 1.0 : 1e-3;
      std::vector<double> outside;
      if (std::isfinite(s.range.low)) outside.push_back(s.range.low_open ? s.range.low : s.range.low - step);
      if (std::isfinite(s.range.high)) outside.push_back(s.range.high_open ? s.range.high : s.range.high + step);
      for (double v : outside) {
        const nlohmann::json value = integer ? nlohmann::json(int64_t(v)) : nlohmann::json(v);
        const std::string shown = integer ? value.dump() : number_text(v);
        const std::string flag = setting_flag(s.key), words = s.range.words(integer);
        EXPECT_NE(error_of([&] { resolve_settings(family, {{s.key, shown}}, "t", SettingSource::flags); })
                      .find(flag + ": " + shown + " is not " + words),
                  std::string::npos)
            << family.name << " " << flag << " " << shown;
        EXPECT_NE(error_of([&] { resolve_settings(family, {{s.key, value}}, "v"); }).find("\"" + s.key + "\": " + shown + " is not " + words),
                  std::string::npos)
            << family.name << " " << s.key << " " << shown;
        ++checked;
      }
      // The default itself is in range.
      EXPECT_TRUE(s.range.contains(s.default_value.get<double>())) << family.name << " " << s.key;
    }
  EXPECT_GE(checked, 15);  // gate_value, experts, top_k, ..., hc_norm_eps: each bound of each ranged setting
}

TEST(TrainFamily, NamesAreUnique) {
  EXPECT_NE(error_of([] { train_family_named("nonesuch"); }).find("trainable families: gated"), std::string::npos);
  TrainFamily twice;
  twice.name = train_families().front().name;
  EXPECT_NE(error_of([&] { add_train_family(twice); }).find("installed twice"), std::string::npos);
  ModelFamily model_twice = model_families().front();
  EXPECT_NE(error_of([&] { add_model_family(model_twice); }).find("installed twice"), std::string::npos);
}

}  // namespace
}  // namespace fca
