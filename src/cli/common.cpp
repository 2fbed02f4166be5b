#include "cli/common.h"

#include "core/error.h"
#include "core/file_io.h"
#include "core/threads.h"
#include "data/corpus.h"

namespace fca::cli {

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
