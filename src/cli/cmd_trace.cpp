// fca trace: runs a model on given token ids or text and writes an activation cache: logits,
// per-window NLL, the coefficient tensor and the hidden states under stable names (docs/cli.md).
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/common.h"
#include "core/error.h"
#include "core/provenance.h"
#include "core/safetensors.h"
#include "core/sha256.h"
#include "models/gated/forward.h"

namespace fca::cli {
namespace {

// A JSON array of equal-length arrays of byte ids.
std::vector<std::vector<int32_t>> read_ids(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open the ids file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_array() || j.empty()) throw Error(path + ": expected a non-empty JSON array of arrays of token ids");
  std::vector<std::vector<int32_t>> rows;
  for (size_t r = 0; r < j.size(); ++r) {
    if (!j[r].is_array() || j[r].empty()) throw Error(path + ": row " + std::to_string(r) + " is not a non-empty array");
    std::vector<int32_t> row;
    for (const auto& v : j[r]) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= kByteVocab)
        throw Error(path + ": row " + std::to_string(r) + " holds " + v.dump() + ", expected a byte id in [0, 256)");
      row.push_back(v.get<int32_t>());
    }
    if (!rows.empty() && row.size() != rows[0].size())
      throw Error(path + ": row " + std::to_string(r) + " has " + std::to_string(row.size()) + " ids, row 0 has " +
                  std::to_string(rows[0].size()) + " (rows must have equal length)");
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

void add_trace_command(CLI::App& app) {
  struct Flags {
    std::string model, ids, text, out, replay;
    int threads = 0;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("trace", "Run a model on given ids or text and write logits, NLL, coefficients "
                                              "and hidden states");
  cmd->add_option("--model", f->model, "Checkpoint (.safetensors)")->required();
  auto* ids = cmd->add_option("--ids", f->ids, "JSON file: an array of equal-length arrays of byte ids");
  auto* text = cmd->add_option("--text", f->text, "Text whose bytes form one window");
  ids->excludes(text);
  cmd->add_option("--out", f->out, "Trace file to write (.safetensors)")->required();
  cmd->add_option("--replay", f->replay, "Coefficients to feed instead of the controller (a trace's 'coefficients')");
  add_threads_flag(*cmd, f->threads);
  cmd->callback([f] {
    apply_threads(f->threads);
    if (f->ids.empty() && f->text.empty()) throw Error("trace needs --ids FILE or --text STRING");
    const GatedModel<float> model = GatedModel<float>::load(f->model);
    const GatedConfig& c = model.config();
    std::vector<std::vector<int32_t>> rows;
    if (!f->ids.empty()) rows = read_ids(f->ids);
    else rows.emplace_back(reinterpret_cast<const unsigned char*>(f->text.data()),
                           reinterpret_cast<const unsigned char*>(f->text.data()) + f->text.size());
    const int B = int(rows.size()), n = int(rows[0].size()), L = c.n_layer, D = c.d_model;
    if (n > c.seq_len)
      throw Error("sequence of " + std::to_string(n) + " tokens is longer than the model's " + std::to_string(c.seq_len) +
                  " positions");
    std::vector<int32_t> tokens, targets;
    for (const auto& r : rows) {
      tokens.insert(tokens.end(), r.begin(), r.end());
      for (int t = 0; t < n; ++t) targets.push_back(t + 1 < n ? r[size_t(t + 1)] : 0);
    }
    GatedRunState<float> rs(c, B, n, false);
    const CoefficientShape shape = gated_coefficient_shape(c, n);
    CoefficientTensor recorded(B, shape), supplied;
    std::unique_ptr<CoefficientSource<float>> source;
    if (!f->replay.empty()) {
      SafetensorsReader reader(f->replay);
      supplied = CoefficientTensor(B, shape);
      reader.read_into<float>("coefficients", {B, L, n, 1, 1}, supplied.values().data());
      source = std::make_unique<ReplayedCoefficients<float>>(supplied);
    } else {
      source = std::make_unique<RecordingCoefficients<float>>(model, recorded);
    }
    gated_forward(model, rs, tokens.data(), B, n, *source);
    gated_loss(rs, targets.data(), nullptr);
    // Window NLL over the n - 1 next-byte predictions (the last position has no target).
    std::vector<float> window_nll(size_t(B), 0.0f), token_values(tokens.begin(), tokens.end());
    for (int b = 0; b < B && n > 1; ++b) {
      double s = 0;
      for (int t = 0; t + 1 < n; ++t) s += rs.losses[int64_t(b) * n + t];
      window_nll[size_t(b)] = float(s / (n - 1));
    }
    std::vector<TensorToWrite> tensors{{"tokens", {B, n}, token_values.data()},
                                       {"logits", {B, n, kByteVocab}, rs.logits},
                                       {"window_nll", {B}, window_nll.data()},
                                       {"coefficients", {B, L, n, 1, 1},
                                        f->replay.empty() ? recorded.values().data() : supplied.values().data()}};
    std::vector<std::string> names;
    for (int l = 0; l <= L; ++l) names.push_back("hidden." + std::to_string(l));
    for (int l = 0; l <= L; ++l) tensors.push_back({names[size_t(l)], {B, n, D}, rs.hidden[size_t(l)]});
    // phi_l [B, n, 4]: only computed by a live featuregate controller.
    std::vector<std::string> feature_names;
    if (source->needs_controller_inputs()) {
      for (int l = 0; l < L; ++l) feature_names.push_back("blocks." + std::to_string(l) + ".features");
      for (int l = 0; l < L; ++l)
        tensors.push_back({feature_names[size_t(l)], {B, n, 4}, rs.features + int64_t(l) * B * n * 4});
    }
    auto prov = provenance_base();
    prov["model_sha256"] = sha256_file(f->model);
    write_safetensors(f->out, tensors,
                      {{"format", "fca-trace-v1"},
                       {"model", f->model},
                       {"coefficient_source", f->replay.empty() ? "live" : "replayed"},
                       {"controller_evaluations", std::to_string(source->controller_evaluations())},
                       {"provenance", prov.dump()}});
    std::printf("trace of %d x %d tokens written to %s (controller evaluations: %ld)\n", B, n, f->out.c_str(),
                long(source->controller_evaluations()));
  });
}

}  // namespace fca::cli
