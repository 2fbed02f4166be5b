// The train layer's family table (train/train_family.h): settings are completed with defaults and
// checked strictly, names are unique, and every installed family builds a trainable model of a
// small shape from its defaults.
#include <gtest/gtest.h>

#include "core/error.h"
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
  EXPECT_NE(error_of([&] { resolve_settings(moe, {{"top_k", "2x"}}, "t", SettingSource::flags); }).find("--top-k must be an integer, found \"2x\""),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_settings(moe, {{"aux_loss", "1e999"}}, "t", SettingSource::flags); }).find("must be a finite number"),
            std::string::npos);
  const TrainFamily& gated = train_family_named("gated");
  EXPECT_NE(error_of([&] { resolve_settings(gated, {{"gate", "sparse"}}, "t"); }).find("expected one of dense"), std::string::npos);
  // Values the setting's type allows but the family's config does not are the config's to refuse.
  const ModelShape shape{2, 16, 2, 16};
  EXPECT_NE(error_of([&] { moe.check(shape, resolve_settings(moe, {{"top_k", 9}}, "t"), "flags"); }).find("flags"),
            std::string::npos);
  EXPECT_NE(error_of([&] { train_family_named("gated").check({2, 15, 2, 16}, resolve_settings(gated, {}, "t"), "flags"); }), "");
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
