#include "models/exit/auditable.h"

#include <charconv>
#include <cstdio>

#include "core/error.h"
#include "core/parse.h"
#include "models/exit/figures.h"

namespace fca {

std::string ExitAuditTraits::describe(const ExitConfig& c) {
  char threshold[32];
  std::snprintf(threshold, sizeof threshold, "%g", c.exit_threshold);
  return std::string("exit m ") + std::to_string(c.min_exit) + " threshold " + threshold + " L " +
         std::to_string(c.n_layer) + ", D " + std::to_string(c.d_model) + ", H " + std::to_string(c.n_head) + ", T " +
         std::to_string(c.seq_len);
}

std::string ExitAuditable::controller_setting() const {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, threshold_).ptr;  // the shortest text that reads back exactly
  return "exit_threshold " + std::string(buf, end);
}

void ExitAuditable::set_controller_setting(const std::string& key, double value) {
  if (key != kExitThreshold) throw Error("exit models have no controller setting \"" + key + "\" (theirs: exit_threshold)");
  if (!(value >= 0.0 && value <= 1.0)) throw Error("exit_threshold must be in [0, 1], found " + number_text(value));
  threshold_ = value;
}

void ExitAuditable::run_live(const int32_t* inputs, const int32_t* targets, int B, int T, CoefficientTensor* record,
                             int record_first, double* window_nll) {
  const PackedWeightsScope packed(&packed_);
  if (record != nullptr) {
    ExitRecordingDepth<float> source(model_, threshold_, *record);
    exit_forward(model_, *rs_, inputs, B, T, source, record_first);
  } else {
    ExitLiveDepth<float> source(model_, threshold_);
    exit_forward(model_, *rs_, inputs, B, T, source, 0);
  }
  exit_loss(*rs_, targets, window_nll);
}

RecordCompute ExitAuditable::record_compute(const CoefficientView& records, int windows) const {
  const int T = records.shape.tokens, P = records.shape.layers;
  std::vector<int32_t> depth(size_t(windows) * T, 1);
  for (int w = 0; w < windows; ++w) {
    const int32_t* c = records.window_discrete(w);
    for (int k = 0; k < P; ++k)
      for (int t = 0; t < T; ++t) depth[size_t(w) * T + t] += c[int64_t(k) * T + t];
  }
  const ExitPassFigures f = exit_pass_figures(model_.config(), depth.data(), windows, T, false);
  RecordCompute r;
  r.gemm_flops = f.gemm();
  r.prefix_gemm_flops = f.prefix_gemm;
  r.tokens = int64_t(windows) * T;
  for (int32_t d : depth) r.token_blocks += d;
  return r;
}

ModelFamily exit_model_family() {
  ModelFamily family{"exit", kExitFormat,
          [](const std::string&, const std::string& format) { return format == kExitFormat; },
          [](const std::string& path, int batch, int tokens) -> std::unique_ptr<AuditableModel> {
            return std::make_unique<ExitAuditable>(path, batch, tokens);
          },
          [](const nlohmann::json& c) {
            char buf[48];
            std::snprintf(buf, sizeof buf, "exit m%d t%g", c.at("min_exit").get<int>(), c.at("exit_threshold").get<double>());
            return std::string(buf);
          },
          nullptr, nullptr};
  family.audit_settings = {{kExitThreshold,
                            "Early-exit models: the threshold lambda in [0, 1] the live pass and its records use (default: "
                            "the checkpoint's); one audit per threshold, recorded in the cache",
                            0.0, 1.0}};
  return family;
}

}  // namespace fca
