// fca families: the installed model families, read from the registry (families/families.cpp), so
// that scripts covering "every family" (scripts/compare_builds.sh) take their list from fca itself
// and a new family is never silently left out.
#include <cstdio>
#include <memory>

#include "cli/common.h"
#include "models/registry.h"
#include "train/train_family.h"

namespace fca::cli {
namespace {

// One trainable family as JSON: its settings, where a checkpoint named STEM puts its files, and the
// configurations that cover its settings (family_configurations), each with the `fca train` flags
// that select it (--arch and the settings that differ from the defaults).
nlohmann::ordered_json train_family_json(const TrainFamily& family) {
  nlohmann::ordered_json j;
  j["name"] = family.name;
  j["description"] = family.description;
  nlohmann::ordered_json settings = nlohmann::ordered_json::array();
  for (const FamilySetting& s : family.settings) {
    nlohmann::ordered_json e;
    e["key"] = s.key;
    e["flag"] = setting_flag(s.key);
    e["default"] = s.default_value;
    if (!s.choices.empty()) e["choices"] = s.choices;
    settings.push_back(e);
  }
  j["settings"] = settings;
  const std::string out = checkpoint_path(family, "STEM");
  const CheckpointFiles files = family.files(out);
  j["checkpoint"] = {{"out", out}, {"weights", files.weights}, {"state", files.state}, {"log", files.log}};
  const std::vector<nlohmann::json> configurations = family_configurations(family);
  nlohmann::ordered_json listed = nlohmann::ordered_json::array();
  for (const nlohmann::json& settings_of : configurations) {
    // Named by the family and the value of each choice-valued setting ("gated-featuregate").
    std::vector<std::string> flags{"--arch", family.name};
    std::string name = family.name;
    for (const FamilySetting& s : family.settings) {
      const nlohmann::json& value = settings_of.at(s.key);
      const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
      if (!s.choices.empty()) name += "-" + text;
      if (value == configurations.front().at(s.key)) continue;
      flags.push_back(setting_flag(s.key));
      flags.push_back(text);
    }
    listed.push_back({{"name", name}, {"settings", settings_of}, {"train_flags", flags}});
  }
  j["configurations"] = listed;
  return j;
}

}  // namespace

void add_families_command(CLI::App& app) {
  auto as_json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("families", "List the installed model families, their settings and configurations");
  cmd->add_flag("--json", *as_json,
                "One JSON document: per family its settings, checkpoint files (for the stem STEM) and the configurations "
                "that cover its settings, with the `fca train` flags of each");
  cmd->callback([as_json] {
    // Every model family is trainable (TrainFamily.EveryModelFamilyIsTrainableAndBuildsFromItsDefaults).
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    for (const TrainFamily& family : train_families()) {
      all.push_back(train_family_json(family));
      all.back()["format"] = family_named(family.name).format;
    }
    if (*as_json) {
      std::printf("%s\n", nlohmann::ordered_json{{"schema", "fca-families-v1"}, {"families", all}}.dump(2).c_str());
      return;
    }
    for (const auto& f : all) {
      std::printf("%-9s %s\n", f["name"].get<std::string>().c_str(), f["description"].get<std::string>().c_str());
      for (const auto& c : f["configurations"]) {
        std::string flags;
        for (const auto& x : c["train_flags"]) flags.append(" ").append(x.get<std::string>());
        std::printf("          %-22s fca train%s\n", c["name"].get<std::string>().c_str(), flags.c_str());
      }
    }
  });
}

}  // namespace fca::cli
