#include "models/registry.h"

#include <cstdio>

#include "core/error.h"
#include "core/file_io.h"
#include "models/external/auditable.h"
#include "models/gated/auditable.h"
#include "models/gated/config.h"
#include "models/mod/auditable.h"
#include "models/moe/auditable.h"
#include "models/mudd/auditable.h"
#include "models/parameters.h"

namespace fca {

void AuditableModel::identity_profile(CoefficientTensor&) const {
  throw Error(family() + " models have no identity profile (their records are routing decisions)");
}

void AuditableModel::structure_removed_profile(const CoefficientTensor&, CoefficientTensor&) const {
  throw Error(family() + " models have no deterministic structure_removed profile (it is randomised for routing records)");
}

namespace {

template <typename Auditable>
std::function<std::unique_ptr<AuditableModel>(const std::string&, int, int)> opener() {
  return [](const std::string& path, int batch, int tokens) { return std::make_unique<Auditable>(path, batch, tokens); };
}

std::function<bool(const std::string&, const std::string&)> has_format(const std::string& wanted) {
  return [wanted](const std::string&, const std::string& format) { return format == wanted; };
}

std::string gated_label(const nlohmann::json& c) { return c.at("gate").get<std::string>(); }
std::string mudd_label(const nlohmann::json&) { return "mudd"; }
std::string moe_label(const nlohmann::json& c) {
  return "moe E" + std::to_string(c.at("n_expert").get<int>()) + " k" + std::to_string(c.at("top_k").get<int>());
}
std::string mod_label(const nlohmann::json& c) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "mod c%g", c.at("capacity").get<double>());
  return buf;
}

}  // namespace

const std::vector<ModelFamily>& model_families() {
  static const std::vector<ModelFamily> families{
      {"gated", kGatedFormat, has_format(kGatedFormat), opener<GatedAuditable>(), gated_label},
      {"mudd", "a Hugging Face folder (config.json + model.safetensors)",
       [](const std::string& path, const std::string&) { return is_directory(path); }, opener<MuddAuditable>(), mudd_label},
      {"moe", kMoeFormat, has_format(kMoeFormat), opener<MoeAuditable>(), moe_label},
      {"mod", kModFormat, has_format(kModFormat), opener<ModAuditable>(), mod_label},
  };
  return families;
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

std::unique_ptr<AuditableModel> open_external_model(const std::string& command, double timeout_s) {
  return std::make_unique<ExternalAuditable>(command, timeout_s);
}

}  // namespace fca
