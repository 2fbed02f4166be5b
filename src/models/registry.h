// The model registry: the models layer's part of the family table (the train layer's part is
// train/train_family.h). Every command opens a model through open_model(), which recognises the
// family from the checkpoint itself (a file by its safetensors "format", a folder by the family
// that claims folders). Each family supplies its entry from src/models/<family>/;
// families/families.cpp installs them, the one registration (docs/adding-a-family.md).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"
#include "models/auditable.h"
#include "models/external/auditable.h"
#include "models/run_setting.h"

namespace fca {

struct ModelFamily {
  std::string name;    // "gated", "mudd", ...: `fca families` lists the installed ones
  std::string format;  // what a checkpoint of the family is ("fca-gated-v1", ..., "a Hugging Face folder")
  // path: the checkpoint; format: its safetensors "format" metadata ("" for folders or none).
  std::function<bool(const std::string& path, const std::string& format)> recognizes;
  std::function<std::unique_ptr<AuditableModel>(const std::string& path, int max_batch, int max_tokens)> open;
  // The short name of a model of the family in tables and figures, from its config: the gate kind
  // ("featuregate"), "mudd", "moe E8 k2", "mod c0.125". Result documents (training logs, eval) carry
  // it, so that the report reads it instead of guessing the family from a config.
  std::function<std::string(const nlohmann::json& config)> label;
  // What `fca info` prints about a checkpoint (validating it fully): "key: value" lines. Null: the
  // lines every model has (family, description, config, parameters, hash).
  std::function<std::string(const std::string& path)> info;
  // `fca convert`: writes the checkpoint at `path` to the folder `out` with F32 weights that
  // inference can use in place, and returns a one-line summary. Null: the family's checkpoints
  // need no conversion.
  std::function<std::string(const std::string& path, const std::string& out)> convert;
  // The family's own audit settings (models/run_setting.h): `fca audit` flags and study "audit" keys,
  // each handed to the opened model through its ControllerSetting capability (models/capabilities.h)
  // under its key. Empty: none.
  std::vector<RunSetting> audit_settings = {};
};

// Installs a family's entry (families/families.cpp, once at start-up); refuses a name used twice.
void add_model_family(ModelFamily family);
// The installed families; throws Error if none is installed.
const std::vector<ModelFamily>& model_families();
// Every installed family's audit settings, in installation order (a key two families declare
// appears twice): what `fca audit` builds its flags from and a study's "audit" section accepts.
std::vector<RunSetting> audit_run_settings();
// The family of this name ("gated", "hyper", ...); throws Error naming the installed ones.
const ModelFamily& family_named(const std::string& name);
// The family of a checkpoint; throws Error naming the file, its format and the known formats.
const ModelFamily& family_of(const std::string& path);
// Opens any checkpoint behind the audit interface, sized for batches of max_batch windows of at
// most max_tokens tokens.
std::unique_ptr<AuditableModel> open_model(const std::string& path, int max_batch, int max_tokens);
// A model fca does not implement, behind an adapter process started with `command` that speaks the
// external protocol (models/external/protocol.h); timeout_s bounds the wait for each answer.
std::unique_ptr<ExternalAuditable> open_external_model(const std::string& command, double timeout_s);

}  // namespace fca
