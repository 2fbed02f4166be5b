#include "train/evaluate.h"

#include <chrono>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "core/progress.h"
#include "models/base/stream.h"

namespace fca {

namespace {
// Mean NLL over windows and the figures derived from it.
void summarize(EvalResult& r) {
  double total = 0;
  for (double v : r.window_nll) total += v;
  r.nll = total / double(r.window_nll.size());
  r.bits_per_byte = r.nll / std::log(2.0);
  r.byte_ppl = std::exp(r.nll);
}
}  // namespace

EvalResult evaluate_auditable(AuditableModel& model, const TextSplit& split, int T, int64_t wanted, int batch,
                              bool show_progress) {
  if (T > model.max_tokens())
    throw Error("sequence length " + std::to_string(T) + " is longer than the model's " +
                std::to_string(model.max_tokens()) + " positions");
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> tokens = model.tokenize(split.name(), {split.bytes(), split.size()});
  const std::string unit = model.vocab() == kByteVocab ? "bytes" : "tokens";
  if (tokens.size() < size_t(T) + 1)
    throw Error(split.path() + ": the " + split.name() + " split has " + std::to_string(tokens.size()) + " " + unit +
                ", shorter than one window of T+1 = " + std::to_string(T + 1) + " " + unit);
  const int64_t available = int64_t((tokens.size() - 1) / size_t(T));
  EvalResult r;
  r.seq_len = T;
  r.windows = evenly_spaced_windows(available, wanted > 0 ? wanted : available, split.name());
  const int64_t W = int64_t(r.windows.size());
  r.window_nll.assign(size_t(W), 0.0);
  std::vector<int32_t> inputs(size_t(batch) * T), targets(size_t(batch) * T);
  // Gates (a record of one gate per layer and token): the gate mass is their mean, summed in a fixed
  // order (window, then layer, then token).
  const bool gates = model.coefficients_are_gates();
  std::optional<CoefficientTensor> record;
  if (gates) record.emplace(model.make_coefficients(batch, T));
  double gate_sum = 0;
  int64_t gate_count = 0;
  Progress progress("eval " + split.name(), W, "window");
  for (int64_t w0 = 0; w0 < W; w0 += batch) {
    const int B = int(std::min<int64_t>(batch, W - w0));
    for (int b = 0; b < B; ++b) {
      const int32_t* p = tokens.data() + r.windows[size_t(w0 + b)] * T;
      std::copy(p, p + T, inputs.begin() + int64_t(b) * T);
      std::copy(p + 1, p + T + 1, targets.begin() + int64_t(b) * T);
    }
    model.run_live(inputs.data(), targets.data(), B, T, gates ? &*record : nullptr, 0, r.window_nll.data() + w0);
    if (gates) {
      const int64_t per_window = record->shape().per_window();
      for (int b = 0; b < B; ++b) {
        const float* g = record->window_data(b);
        for (int64_t i = 0; i < per_window; ++i) gate_sum += g[i];
      }
      gate_count += int64_t(B) * per_window;
    }
    if (show_progress) progress.update(w0 + B);
  }
  if (show_progress) progress.finish();
  summarize(r);
  r.gate_mass = gates ? gate_sum / double(gate_count) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

nlohmann::ordered_json eval_document(const EvaluatedModel& model, const std::string& split, int seq_len, const EvalResult& r,
                                     const nlohmann::ordered_json& provenance) {
  nlohmann::ordered_json j;
  j["schema"] = "fca-eval-v1";
  j["model"] = model.path;
  j["family"] = model.family;
  j["label"] = model.label;
  j["config"] = model.config;
  j["unit"] = model.unit;
  j["split"] = split;
  j["seq_len"] = seq_len;
  j["windows"] = r.windows.size();
  j["nll"] = r.nll;
  j["bits_per_byte"] = r.bits_per_byte;
  j["byte_ppl"] = r.byte_ppl;
  j["gate_mass"] = r.gate_mass >= 0 ? nlohmann::ordered_json(r.gate_mass) : nlohmann::ordered_json(nullptr);
  j["seconds"] = r.seconds;
  j["provenance"] = provenance;
  return j;
}

}  // namespace fca
