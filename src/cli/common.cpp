#include "cli/common.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "core/memory.h"
#include "core/threads.h"
#include "core/parse.h"
#include "data/corpus.h"
#include "ops/onednn_matmul.h"

namespace fca::cli {
namespace {

// A validator of numbers in the range `words` describes ("a number > 0"), `in_range` its test.
// The whole text must be one finite double.
CLI::Validator real_number(const std::string& words, std::function<bool(double)> in_range, const std::string& type) {
  return CLI::Validator(
      [words, in_range](std::string& text) {
        double v = 0;
        const char* end = text.data() + text.size();
        const auto [p, ec] = std::from_chars(text.data(), end, v);
        if (ec == std::errc::result_out_of_range) return text + " is not " + words + " (it is outside the range of a double)";
        if (text.empty() || ec != std::errc() || p != end || !std::isfinite(v)) return "'" + text + "' is not " + words;
        if (!in_range(v)) return text + " is not " + words;
        return std::string();
      },
      type);
}

std::string format_bound(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

const CLI::Validator positive_number = real_number("a number > 0", [](double v) { return v > 0; }, "POSITIVE");
const CLI::Validator non_negative_number = real_number("a number >= 0", [](double v) { return v >= 0; }, "NONNEGATIVE");

CLI::Validator number_in(double low, double high) {
  return real_number("a number in [" + format_bound(low) + ", " + format_bound(high) + "]",
                     [low, high](double v) { return v >= low && v <= high; }, "NUMBER");
}

CLI::Validator whole_number(int64_t low, const std::string& meaning, int64_t high) {
  // An int flag's ceiling is not part of what the flag means: said only when it is exceeded.
  const bool int_ceiling = high == std::numeric_limits<int>::max();
  const std::string words = "a whole number " + (int_ceiling ? ">= " + std::to_string(low) : "in " + std::to_string(low) + " .. " + std::to_string(high)) +
                            (meaning.empty() ? "" : " (" + meaning + ")");
  return CLI::Validator(
      [words, low, high, int_ceiling](std::string& text) {
        int64_t v = 0;
        const char* end = text.data() + text.size();
        const auto [p, ec] = std::from_chars(text.data(), end, v);
        const bool out_of_int64 = ec == std::errc::result_out_of_range;
        if (text.empty() || (ec != std::errc() && !out_of_int64) || p != end) return "'" + text + "' is not " + words;
        if (out_of_int64 ? text[0] == '-' : v < low) return text + " is not " + words;
        if (out_of_int64 || v > high)
          return text + " is not " + words + (int_ceiling ? ": the largest allowed is " + std::to_string(high) : "");
        return std::string();
      },
      "INT");
}

const CLI::Validator unsigned_integer(
    [](std::string& text) {
      uint64_t v = 0;
      const char* end = text.data() + text.size();
      const auto [p, ec] = std::from_chars(text.data(), end, v);
      if (text.empty() || ec != std::errc() || p != end)
        return "'" + text + "' is not a whole number in 0 .. 18446744073709551615";
      return std::string();
    },
    "UINT");

void RunSettingFlags::add_to(CLI::App& app, const std::vector<RunSetting>& declared) {
  for (const RunSetting& setting : declared) {
    if (settings_.count(setting.key) != 0) continue;
    settings_[setting.key] = setting;
    std::string defaults;
    for (double v : setting.default_values) defaults += (defaults.empty() ? "" : ",") + format_bound(v);
    auto* option = app.add_option(run_setting_flag(setting.key), text_[setting.key], setting.help);
    option->type_name(setting.list ? "LIST" : "NUMBER");
    if (!defaults.empty()) option->default_str(defaults);
    if (!setting.list) option->check(number_in(setting.low, setting.high));
  }
}

std::map<std::string, std::vector<double>> RunSettingFlags::values() const {
  std::map<std::string, std::vector<double>> out;
  for (const auto& [key, text] : text_) {
    if (text.empty()) continue;
    const RunSetting& setting = settings_.at(key);
    const std::string flag = run_setting_flag(key);
    std::vector<double>& values = out[key];
    std::stringstream items(text);
    for (std::string item; std::getline(items, item, ',');)
      values.push_back(parse_number(item, flag + (setting.list ? ": an entry" : ""), setting.low, setting.high));
    if (values.empty()) throw Error(flag + ": no value given");
    if (!setting.list && values.size() > 1) throw Error(flag + " takes one number, found \"" + text + "\"");
  }
  return out;
}

std::string RunSettingFlags::given_flags() const {
  std::string flags;
  for (const auto& [key, text] : text_)
    if (!text.empty()) flags += (flags.empty() ? "" : ", ") + run_setting_flag(key);
  return flags;
}

void FamilyFlags::add_to(CLI::App& app, const std::string& arch_help) {
  arch = train_families().front().name;
  std::vector<std::string> arches;
  std::string help = arch_help + ":";
  for (const auto& family : train_families()) {
    arches.push_back(family.name);
    help += " " + family.description + ";";
  }
  help.back() = '.';
  app.add_option("--arch", arch, help)->check(CLI::IsMember(arches))->capture_default_str();
  app.add_option("--layers", shape.layers, "Number of blocks L (FixedDepth-N is --gate dense --layers N)")
      ->check(whole_number(1))
      ->capture_default_str();
  app.add_option("--dim", shape.dim, "Model width D")->check(whole_number(1))->capture_default_str();
  app.add_option("--heads", shape.heads, "Attention heads H (D % H == 0)")->check(whole_number(1))->capture_default_str();
  app.add_option("--seq", shape.seq, "Sequence length T (window length and number of positions)")
      ->check(whole_number(1))
      ->capture_default_str();
  for (const auto& family : train_families())
    for (const auto& s : family.settings) {
      if (families_[s.key].empty()) {
        const std::string text = s.default_value.is_string() ? s.default_value.get<std::string>() : s.default_value.dump();
        const std::string type = s.default_value.is_string()           ? "TEXT"
                                 : s.default_value.is_boolean()        ? "BOOL"
                                 : s.default_value.is_number_integer() ? "INT"
                                                                       : "FLOAT";
        app.add_option(setting_flag(s.key), given_[s.key], family.name + ": " + s.help)->default_str(text)->type_name(type);
      }
      families_[s.key].push_back(family.name);
    }
}

nlohmann::json FamilyFlags::settings(const CLI::App& app) const {
  nlohmann::json given = nlohmann::json::object();
  for (const auto& [key, families] : families_) {
    const std::string flag = setting_flag(key);
    if (app.count(flag) == 0) continue;
    if (std::find(families.begin(), families.end(), arch) == families.end()) {
      std::string which;
      for (const auto& name : families) which += (which.empty() ? "" : " or ") + name;
      throw Error(flag + " applies to --arch " + which + " only");
    }
    given[key] = given_.at(key);
  }
  const TrainFamily& family = train_family_named(arch);
  nlohmann::json resolved = resolve_settings(family, given, "flags", SettingSource::flags);
  family.check(shape, resolved, "flags");
  return resolved;
}

void add_threads_flag(CLI::App& app, int& threads) {
  app.add_option("--threads", threads, "Threads for kernels and GEMM (0 = all cores)")
      ->check(whole_number(0, "0 = all cores"))
      ->capture_default_str();
}

void apply_threads(int threads) { set_threads(threads); }

void add_precision_flag(CLI::App& app, std::string& precision) {
  app.add_option("--precision", precision,
                 "Matrix products in fp32, or in bf16 with fp32 accumulation (oneDNN: AMX or AVX512-BF16 where the CPU "
                 "has them); norms, softmax, the loss and every statistic stay fp32 (docs/precision.md)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
}

void apply_precision(const std::string& precision) { set_matmul_precision(parse_matmul_precision(precision, "--precision")); }

void add_engine_flags(CLI::App& app, StudyEngine& engine) {
  app.add_option("--engine", engine.name,
                 "Engine that trains and audits the gated and MUDD variants: native (fca's own) or torch (fca_torch under "
                 "torchrun, audited through its hooked adapter on the model's device; docs/torch-engine.md)")
      ->check(CLI::IsMember({"native", "torch"}))
      ->capture_default_str();
  app.add_option("--gpus", engine.gpus, "--engine torch: processes under torchrun, one per GPU (0 = one process, no torchrun)")
      ->check(whole_number(0, "0 = one process"))
      ->capture_default_str();
  app.add_option("--torch-python", engine.python,
                 "--engine torch: the Python that imports torch and fca_torch (pip install ./python, or PYTHONPATH=python)")
      ->capture_default_str();
}

std::function<void()> naming_batch(const int& batch, std::function<void()> body) {
  return [&batch, body = std::move(body)] {
    try {
      body();
    } catch (const OutOfMemory& e) {
      throw Error("--batch " + std::to_string(batch) + ": " + e.advice("--batch"));
    }
  };
}

std::string resolve_data_dir(const std::string& flag_value) {
  return flag_value.empty() ? default_corpus_dir() : flag_value;
}

void write_json_file(const std::string& path, const nlohmann::ordered_json& j) {
  write_file_atomically(path, [&](std::ostream& out) { out << j.dump(2) << "\n"; });
}

}  // namespace fca::cli
