// The train layer's part of the family table (models/registry.h has the opening part): what `fca
// train`, `fca study` and `fca bench train` need to build a trainable model of a family from the
// shape every family shares and the family's own settings, and where its checkpoint files go.
// Each family supplies its entry from src/models/<family>/train/; families/families.cpp installs
// them. Nothing outside a family's folder switches on its name.
#pragma once
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "train/adamw.h"
#include "train/gradient_probe.h"
#include "train/trainable.h"

namespace fca {

// The shape flags every family takes (--layers, --dim, --heads, --seq; study keys of the same names).
struct ModelShape {
  int layers = 6;  // L
  int dim = 256;   // D
  int heads = 4;   // H, D % H == 0
  int seq = 256;   // T, window length and number of positions
};

// A numeric setting's own range, checked where the value is given (a flag or a study key), so that
// the error names the flag or key and the range in words. Limits that depend on other settings
// (top_k <= experts, min_exit < layers) stay with the family's config check.
struct SettingRange {
  double low = -std::numeric_limits<double>::infinity(), high = std::numeric_limits<double>::infinity();
  bool low_open = false, high_open = false;  // (low, ...: low itself excluded
  bool contains(double v) const;
  // "a whole number in 1 .. 64", "a whole number >= 0", "a number in (0, 1]", "a number >= 0".
  std::string words(bool integer) const;
};
// A range helper for the families' tables: [low, high] (either may be infinite).
inline SettingRange in_range(double low, double high, bool low_open = false, bool high_open = false) {
  return {low, high, low_open, high_open};
}

// A family's own training setting: the flag --<key, '_' as '-'> of `fca train` and the key <key> of
// a study variant. The default's JSON type is the setting's type (a string, an integer or a number).
struct FamilySetting {
  std::string key;                   // "gate", "top_k", "capacity"
  std::string help;                  // one line for --help
  nlohmann::json default_value;      // "featuregate", 2, 0.125, true (its type is the setting's)
  std::vector<std::string> choices;  // strings only: the allowed values (empty: any)
  SettingRange range{};              // numbers only: the values the setting takes alone (default: any finite)
};

// The files of a checkpoint written to `out`: the weights (whose hash the training state records),
// the optimizer state and the default training log.
struct CheckpointFiles {
  std::string weights, state, log;
};

// What a trainable model is built with besides its config.
struct TrainableArgs {
  uint64_t seed = 0;
  int batch = 8;  // windows per micro-batch
  AdamWOptions adamw;
  double clip = 1.0;
};

// The paper's Uniform-Matched, a study variant's "gate_value_from" (docs/report.md): a setting whose
// value a study takes from another variant's gate mass, measured on its checkpoint of the same seed.
// The family supplies what the study checks before any training.
struct GateMassMatching {
  std::string setting;  // the setting (and config field) that takes the value: "gate_value"
  // Throws Error, after `where`, unless a variant of these settings can take the value (gated:
  // gate "fixed").
  std::function<void(const nlohmann::json& settings, const std::string& where)> check_target;
  std::string learned_gates;  // which settings give learned gates, in words: "featuregate, layerstatic or uniform"
  // "" when a model of these settings has learned gates whose mass evaluation measures, else what it
  // has instead ("gate \"dense\"").
  std::function<std::string(const nlohmann::json& settings)> unlearned;
};

struct TrainFamily {
  std::string name;         // the registry's name, --arch
  std::string description;  // one line for --arch's help
  std::vector<FamilySetting> settings;
  bool checkpoint_is_folder = false;  // `out` is a folder (created if missing), else a .safetensors file
  std::function<CheckpointFiles(const std::string& out)> files;
  // Throws what `make` would throw for this shape and these settings, without building anything
  // (so that flags are checked before the data is looked for).
  std::function<void(const ModelShape& shape, const nlohmann::json& settings, const std::string& where)> check;
  // A freshly initialised model; `settings` holds every key of `settings` (resolve_settings). Errors
  // name the setting or shape field, prefixed by `where` ("flags", a study variant).
  std::function<std::unique_ptr<Trainable>(const ModelShape& shape, const nlohmann::json& settings,
                                           const TrainableArgs& args, const std::string& where)>
      make;
  // Whether a study may match one of its settings to a gate mass, and how (empty: it may not).
  std::optional<GateMassMatching> gate_mass_matching;
  // The family's training objective in double on a model of this shape and these settings from
  // `seed` (train/gradient_probe.h): the conformance suite checks its backward pass with it.
  std::function<GradientProbe(const ModelShape& shape, const nlohmann::json& settings, uint64_t seed)> gradient_probe = nullptr;
  // The family's model in fca's PyTorch engine (python/fca_torch, docs/torch-engine.md): its --arch
  // there, where it takes this family's settings as the same flags and writes the same checkpoints.
  // Empty: the engine does not implement the family (a study trains it natively).
  std::string torch_arch;
};

// Installs a family's entry (families/families.cpp, once at start-up); refuses a name used twice.
void add_train_family(TrainFamily family);
const std::vector<TrainFamily>& train_families();
// The family of this name; throws Error naming the trainable families.
const TrainFamily& train_family_named(const std::string& name);

// `given` (keys of the family's settings) completed with the defaults. From JSON (a study config)
// each value must have the setting's type; from flags every value is text, parsed as that type.
// Unknown keys, wrong types, malformed numbers and values outside the choices are errors naming
// `where` and the setting: its key ("top_k"), or its flag (--top-k) for flags.
enum class SettingSource { json, flags };
nlohmann::json resolve_settings(const TrainFamily& family, const nlohmann::json& given, const std::string& where,
                                SettingSource source = SettingSource::json);
// The flag of a setting key: "--" + key with '_' as '-'.
std::string setting_flag(const std::string& key);

// The configurations that cover a family's settings: its defaults, then each further value of each
// choice-valued setting on its own (gated: featuregate, dense, fixed, uniform, layerstatic). The
// conformance suite and scripts/compare_builds.sh (through `fca families --json`) run each.
std::vector<nlohmann::json> family_configurations(const TrainFamily& family);

// The out path of a checkpoint named `stem`: the stem itself for folder checkpoints, else
// stem + ".safetensors".
std::string checkpoint_path(const TrainFamily& family, const std::string& stem);

// The files of a single-file checkpoint: the weights at `out`, the state at <out without
// .safetensors>.train-state.safetensors, the log at <out>.log.jsonl.
CheckpointFiles single_file_checkpoint(const std::string& out);

// A config with the shape fields of the pre-norm families (n_layer, d_model, n_head, seq_len) set
// from `shape`; the family sets its own fields and validates.
template <typename Config>
Config config_with_shape(const ModelShape& shape) {
  Config c;
  c.n_layer = shape.layers;
  c.d_model = shape.dim;
  c.n_head = shape.heads;
  c.seq_len = shape.seq;
  return c;
}

// A family's check and make from its two pieces: config_of (the validated config of a fresh model
// of this shape and these settings; errors prefixed by `where`) and build (its Trainable).
template <typename Config>
void set_constructors(TrainFamily& family, Config (*config_of)(const ModelShape&, const nlohmann::json&, const std::string&),
                      std::unique_ptr<Trainable> (*build)(const Config&, const TrainableArgs&)) {
  family.check = [config_of](const ModelShape& shape, const nlohmann::json& settings, const std::string& where) {
    config_of(shape, settings, where);
  };
  family.make = [config_of, build](const ModelShape& shape, const nlohmann::json& settings, const TrainableArgs& args,
                                   const std::string& where) { return build(config_of(shape, settings, where), args); };
}

}  // namespace fca
