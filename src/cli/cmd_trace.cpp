// fca trace: runs a model on given token ids or text and writes an activation cache: logits,
// per-window NLL, the coefficient tensor and the hidden states under stable names (docs/cli.md).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/common.h"
#include "core/error.h"
#include "core/exec_counters.h"
#include "ops/provenance.h"
#include "core/safetensors.h"
#include "core/file_io.h"
#include "models/registry.h"
#include "models/routing_record.h"
#include "models/capabilities.h"

namespace fca::cli {
namespace {

// A JSON array of equal-length arrays of token ids < vocab.
std::vector<std::vector<int32_t>> read_ids(const std::string& path, int vocab) {
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
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab)
        throw Error(path + ": row " + std::to_string(r) + " holds " + v.dump() + ", expected a token id in [0, " +
                    std::to_string(vocab) + ")");
      row.push_back(v.get<int32_t>());
    }
    if (!rows.empty() && row.size() != rows[0].size())
      throw Error(path + ": row " + std::to_string(r) + " has " + std::to_string(row.size()) + " ids, row 0 has " +
                  std::to_string(rows[0].size()) + " (rows must have equal length)");
    rows.push_back(std::move(row));
  }
  return rows;
}

struct TraceFlags {
  std::string model, ids, text, out, replay;
  int threads = 0;
};

// The input must fit the model's positions; the error names the flag it came from.
void check_fits(const TraceFlags& f, int tokens, int positions) {
  if (tokens > positions)
    throw Error((f.ids.empty() ? std::string("--text") : "--ids " + f.ids) + ": " + std::to_string(tokens) +
                " tokens are longer than the model's " + std::to_string(positions) + " positions");
}

// Targets for NLL: each row's next token (the last position has none and is excluded).
void next_token_targets(const std::vector<std::vector<int32_t>>& rows, std::vector<int32_t>& tokens,
                        std::vector<int32_t>& targets) {
  const int n = int(rows[0].size());
  for (const auto& r : rows) {
    tokens.insert(tokens.end(), r.begin(), r.end());
    for (int t = 0; t < n; ++t) targets.push_back(t + 1 < n ? r[size_t(t + 1)] : 0);
  }
}

std::vector<float> window_nll_excluding_last(const float* losses, int B, int n) {
  std::vector<float> out(static_cast<size_t>(B), 0.0f);
  for (int b = 0; b < B && n > 1; ++b) {
    double s = 0;
    for (int t = 0; t + 1 < n; ++t) s += losses[int64_t(b) * n + t];
    out[size_t(b)] = float(s / (n - 1));
  }
  return out;
}

void write_trace(const TraceFlags& f, std::vector<TensorToWrite> tensors, const std::string& model_hash,
                 int64_t controller_evaluations, int B, int n) {
  auto prov = provenance_base();
  prov["model_sha256"] = model_hash;
  write_safetensors(f.out, tensors,
                    {{"format", "fca-trace-v1"},
                     {"model", f.model},
                     {"coefficient_source", f.replay.empty() ? "live" : "replayed"},
                     {"controller_evaluations", std::to_string(controller_evaluations)},
                     {"provenance", prov.dump()}});
  std::printf("trace of %d x %d tokens written to %s (controller evaluations: %ld)\n", B, n, f.out.c_str(),
              long(controller_evaluations));
}

// Any model, through the audit interface: tokens, logits, window_nll, coefficients (the record's
// values [B, L, n, streams, sources]), for routing records also routing (the discrete field [B, L,
// n, slots] I32: expert indices or selection flags), and the family's named intermediates
// (AuditableModel::trace_tensors: hidden states, ...). --replay reads the record back and feeds it
// instead of the controller.
void trace_model(const TraceFlags& f) {
  const auto model = open_model(f.model, 1, 1 << 20);
  std::vector<std::vector<int32_t>> rows;
  if (!f.ids.empty()) rows = read_ids(f.ids, model->vocab());
  else rows.push_back(model->tokenize("trace", {reinterpret_cast<const unsigned char*>(f.text.data()), f.text.size()}));
  if (rows[0].empty()) throw Error("trace: the text has no tokens");
  const int B = int(rows.size()), n = int(rows[0].size()), V = model->vocab();
  check_fits(f, n, model->max_tokens());
  if (B > 1 << 10) throw Error("trace: at most 1024 rows, found " + std::to_string(B));
  Traceable* traceable = capability<Traceable>(*model);  // null: no intermediates, losses from the logits
  if (traceable != nullptr) traceable->set_keep_intermediates(true);
  model->set_max_batch(B);
  std::vector<int32_t> tokens, targets;
  next_token_targets(rows, tokens, targets);
  CoefficientTensor record = model->make_coefficients(B, n);
  const CoefficientShape& s = record.shape();
  const std::vector<int64_t> values_shape{B, s.layers, n, s.streams, s.sources}, routing_shape{B, s.layers, n, s.slots};
  std::vector<double> window(static_cast<size_t>(B));
  const int64_t before = model->replay_controller_evaluations();
  ExecCounters live_counters;  // the controller's evaluations, counted where they happen
  if (!f.replay.empty()) {
    SafetensorsReader in(f.replay);
    in.read_into<float>("coefficients", values_shape, record.values().data());
    if (s.slots > 0) {
      const TensorInfo& r = in.get("routing");
      if (r.dtype != DType::I32 || r.shape != routing_shape)
        throw Error(f.replay + ": tensor 'routing' is " + dtype_name(r.dtype) + " " + shape_string(r.shape) + ", expected I32 " +
                    shape_string(routing_shape));
      std::memcpy(record.discrete().data(), r.data, r.nbytes);
      check_routing_records(record.view(), f.replay);
    }
    model->run_replay(tokens.data(), targets.data(), B, n, record, window.data());
  } else {
    CountingScope scope(live_counters);
    model->run_live(tokens.data(), targets.data(), B, n, &record, 0, window.data());
  }
  const int64_t evaluations =
      f.replay.empty() ? live_counters.controller_evaluations.load() : model->replay_controller_evaluations() - before;
  // Per-position cross-entropy (the model's own, or from the logits), so that each row's last
  // position (no target) is left out.
  const float* logits = model->last_logits();
  std::vector<float> computed;
  const float* losses = traceable != nullptr ? traceable->last_position_losses() : nullptr;
  if (losses == nullptr) {
    computed.resize(size_t(B) * n);
    for (size_t i = 0; i < computed.size(); ++i) {
      const float* z = logits + i * size_t(V);
      double mx = z[0], sum = 0;
      for (int v = 1; v < V; ++v) mx = std::max(mx, double(z[v]));
      for (int v = 0; v < V; ++v) sum += std::exp(double(z[v]) - mx);
      computed[i] = float(std::log(sum) + mx - z[targets[i]]);
    }
    losses = computed.data();
  }
  const std::vector<float> nll = window_nll_excluding_last(losses, B, n);
  const std::vector<float> token_values(tokens.begin(), tokens.end());
  std::vector<TensorToWrite> tensors{{"tokens", {B, n}, token_values.data()},
                                     {"logits", {B, n, V}, logits},
                                     {"window_nll", {B}, nll.data()},
                                     {"coefficients", values_shape, record.values().data()}};
  if (s.slots > 0) tensors.push_back({"routing", routing_shape, record.discrete().data(), DType::I32});
  if (traceable != nullptr)
    for (const TraceTensor& t : traceable->trace_tensors(B, n, f.replay.empty())) tensors.push_back({t.name, t.shape, t.data});
  write_trace(f, tensors, model->content_hash(), evaluations, B, n);
}

}  // namespace

void add_trace_command(CLI::App& app) {
  auto f = std::make_shared<TraceFlags>();
  CLI::App* cmd = app.add_subcommand("trace", "Run a model on given ids or text and write logits, NLL, coefficients "
                                              "and hidden states");
  cmd->add_option("--model", f->model, "Checkpoint of any installed family (`fca families`): a .safetensors file or a model folder")->required();
  auto* ids = cmd->add_option("--ids", f->ids, "JSON file: an array of equal-length arrays of token ids");
  auto* text = cmd->add_option("--text", f->text, "Text forming one window, tokenized as the model's audit tokenizes text");
  ids->excludes(text);
  cmd->add_option("--out", f->out, "Trace file to write (.safetensors)")->required();
  cmd->add_option("--replay", f->replay, "Coefficients to feed instead of the controller (a trace's 'coefficients')");
  add_threads_flag(*cmd, f->threads);
  cmd->callback([f] {
    apply_threads(f->threads);
    if (f->ids.empty() && f->text.empty()) throw Error("trace needs --ids FILE or --text STRING");
    ensure_file_destination(f->out, "--out");
    trace_model(*f);
  });
}

}  // namespace fca::cli
