#include "cli/common.h"

#include <charconv>
#include <cmath>

#include "core/error.h"
#include "core/file_io.h"
#include "core/threads.h"
#include "data/corpus.h"

namespace fca::cli {
namespace {

// The value as a double, or an error message; the whole text must be one number.
std::string parse_number(const std::string& text, double& v) {
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec == std::errc::result_out_of_range) return "'" + text + "' is outside the range of a double";
  if (ec != std::errc() || p != end) return "'" + text + "' is not a number";
  if (!std::isfinite(v)) return "'" + text + "' is not a finite number";
  return {};
}

}  // namespace

const CLI::Validator positive_number(
    [](std::string& text) {
      double v = 0;
      std::string error = parse_number(text, v);
      if (error.empty() && !(v > 0)) error = "must be positive, found " + text;
      return error;
    },
    "POSITIVE");

const CLI::Validator non_negative_number(
    [](std::string& text) {
      double v = 0;
      std::string error = parse_number(text, v);
      if (error.empty() && v < 0) error = "must not be negative, found " + text;
      return error;
    },
    "NONNEGATIVE");

const CLI::Validator unsigned_integer(
    [](std::string& text) {
      uint64_t v = 0;
      const char* end = text.data() + text.size();
      const auto [p, ec] = std::from_chars(text.data(), end, v);
      if (text.empty() || ec != std::errc() || p != end)
        return "'" + text + "' is not an integer in 0 .. 18446744073709551615";
      return std::string();
    },
    "UINT");


void ModelShapeFlags::add_to(CLI::App& app) {
  app.add_option("--gate", gate, "Gate kind: dense, fixed, uniform, layerstatic or featuregate")
      ->check(CLI::IsMember({"dense", "fixed", "uniform", "layerstatic", "featuregate"}))
      ->capture_default_str();
  app.add_option("--gate-value", gate_value, "Gate value of the fixed gate, in [0, 1]")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--layers", layers, "Number of blocks L (FixedDepth-N is --gate dense --layers N)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--dim", dim, "Model width D")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--heads", heads, "Attention heads H (D % H == 0)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seq", seq, "Sequence length T (window length and number of positions)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

GatedConfig ModelShapeFlags::config() const {
  GatedConfig c;
  c.gate = parse_gate_kind(gate);
  c.gate_value = gate_value;
  c.n_layer = layers;
  c.d_model = dim;
  c.n_head = heads;
  c.seq_len = seq;
  c.validate("flags (--layers/--dim/--heads/--seq)");
  return c;
}

void add_threads_flag(CLI::App& app, int& threads) {
  app.add_option("--threads", threads, "Threads for kernels and GEMM (0 = all cores)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

void apply_threads(int threads) { set_threads(threads); }

std::string resolve_data_dir(const std::string& flag_value) {
  return flag_value.empty() ? default_corpus_dir() : flag_value;
}

void write_json_file(const std::string& path, const nlohmann::ordered_json& j) {
  write_file_atomically(path, [&](std::ostream& out) { out << j.dump(2) << "\n"; });
}

}  // namespace fca::cli
