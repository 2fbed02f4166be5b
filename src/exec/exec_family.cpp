#include "exec/exec_family.h"

#include "core/error.h"
#include "core/exec_counters.h"
#include "ops/attention.h"

namespace fca {
namespace {

std::vector<ExecFamily>& table() {
  static std::vector<ExecFamily> families;
  return families;
}

}  // namespace

void add_exec_family(ExecFamily family) {
  for (const auto& f : table())
    if (f.name == family.name) throw Error("exec family \"" + family.name + "\" is installed twice");
  for (const FamilyCounter& c : family.counters) add_family_counter(c);
  table().push_back(std::move(family));
}

const std::vector<ExecFamily>& exec_families() { return table(); }

std::vector<RunSetting> exec_run_settings() {
  std::vector<RunSetting> out;
  for (const ExecFamily& f : table()) out.insert(out.end(), f.exec_settings.begin(), f.exec_settings.end());
  return out;
}

std::vector<double> exec_setting(const ExecOptions& options, const ExecFamily& family, const std::string& key) {
  for (const RunSetting& s : family.exec_settings) {
    if (s.key != key) continue;
    const auto given = options.family_settings.find(key);
    return given == options.family_settings.end() ? s.default_values : given->second;
  }
  throw Error("internal error: the " + family.name + " family declares no exec setting \"" + key + "\"");
}

const ExecFamily& exec_family_named(const std::string& name) {
  std::string known;
  for (const auto& f : table()) {
    if (f.name == name) return f;
    known += (known.empty() ? "" : ", ") + f.name;
  }
  throw Error("exec cannot measure models of the " + name + " family (it measures: " + (known.empty() ? "none" : known) + ")");
}

nlohmann::ordered_json exec_model_entry(const std::string& path, const std::string& model_sha256, const std::string& family,
                                        nlohmann::ordered_json config, int64_t tokens_per_pass) {
  nlohmann::ordered_json m;
  m["path"] = path;
  m["model_sha256"] = model_sha256;
  m["family"] = family;
  m["config"] = std::move(config);
  m["tokens_per_pass"] = tokens_per_pass;
  return m;
}

void count_mode(nlohmann::ordered_json& modes, TimedModes& timed, const std::string& mode, std::function<void()> pass,
                const ExpectedCounts& expected, int total_blocks, int tokens_per_pass, nlohmann::ordered_json extra) {
  ExecCounters counters;
  {
    CountingScope scope(counters);
    pass();
  }
  check_counters(mode, counters, expected);
  nlohmann::ordered_json j{{"mode", mode}, {"total_blocks", total_blocks}};
  j.update(counter_fields(counters, expected, tokens_per_pass));
  if (extra.is_object()) j.update(extra);
  timed.add("modes", modes.size(), std::move(pass));
  modes.push_back(j);
}

const ExecFamily& dense_reference_family(const std::vector<ExecFamily>& families) {
  const ExecFamily* provider = nullptr;
  for (const auto& f : families) {
    if (!f.same_shape_dense) continue;
    if (provider != nullptr)
      throw Error("dense_same_shape: the " + provider->name + " and " + f.name + " families both provide the Dense reference");
    provider = &f;
  }
  if (provider == nullptr) throw Error("dense_same_shape: no installed family provides the Dense reference (the gated family does)");
  return *provider;
}

void dense_same_shape(nlohmann::ordered_json& modes, TimedModes& timed, int L, int D, int H, int T,
                      std::shared_ptr<const TokenWindows> timing, int B) {
  dense_reference_family(table()).same_shape_dense(modes, timed, L, D, H, T, std::move(timing), B);
}

double attention_half_flops(int B, int T, int D) {
  return 2.0 * double(B) * T * 4.0 * D * D + 2.0 * 2.0 * double(B) * double(attention_executed_pairs(T)) * D;
}

}  // namespace fca
