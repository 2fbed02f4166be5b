#include "models/registry.h"

#include <cstdio>

#include "core/error.h"
#include "core/file_io.h"
#include "models/external/auditable.h"
#include "models/parameters.h"

namespace fca {

void AuditableModel::identity_profile(CoefficientTensor&) const {
  throw Error(family() + " models have no identity profile (their records are routing decisions)");
}

void AuditableModel::structure_removed_profile(const CoefficientTensor&, CoefficientTensor&) const {
  throw Error(family() + " models have no deterministic structure_removed profile (it is randomised for routing records)");
}

namespace {
std::vector<ModelFamily>& table() {
  static std::vector<ModelFamily> families;
  return families;
}
}  // namespace

std::vector<RunSetting> audit_run_settings() {
  std::vector<RunSetting> out;
  for (const ModelFamily& f : table()) out.insert(out.end(), f.audit_settings.begin(), f.audit_settings.end());
  return out;
}

void add_model_family(ModelFamily family) {
  for (const auto& f : table())
    if (f.name == family.name) throw Error("model family \"" + family.name + "\" is installed twice");
  table().push_back(std::move(family));
}

const std::vector<ModelFamily>& model_families() {
  if (table().empty()) throw Error("no model family is installed (call install_families() at start-up: families/families.h)");
  return table();
}

const ModelFamily& family_named(const std::string& name) {
  std::string known;
  for (const auto& f : model_families()) {
    if (f.name == name) return f;
    known += (known.empty() ? "" : ", ") + f.name;
  }
  throw Error("unknown model family \"" + name + "\" (known: " + known + ")");
}

const ModelFamily& family_of(const std::string& path) {
  const std::string format = is_directory(path) ? std::string() : read_checkpoint_format(path);
  for (const auto& f : model_families())
    if (f.recognizes(path, format)) return f;
  std::string known;
  for (const auto& f : model_families()) known += (known.empty() ? "" : ", ") + f.format;
  throw Error(path + ": not a model fca knows (format \"" + format + "\"; expected one of " + known + ")");
}

std::unique_ptr<AuditableModel> open_model(const std::string& path, int max_batch, int max_tokens) {
  return family_of(path).open(path, max_batch, max_tokens);
}

std::unique_ptr<ExternalAuditable> open_external_model(const std::string& command, double timeout_s) {
  return std::make_unique<ExternalAuditable>(command, timeout_s);
}

}  // namespace fca
