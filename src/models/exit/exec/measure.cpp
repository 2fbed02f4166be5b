#include "models/exit/exec/measure.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/sha256.h"
#include "models/exit/exec/flops.h"
#include "models/exit/forward.h"

namespace fca {
namespace {

// A constant record: every token runs `depth` blocks.
std::shared_ptr<CoefficientTensor> constant_record(const ExitConfig& c, int windows, int T, int depth) {
  auto r = std::make_shared<CoefficientTensor>(windows, exit_record_shape(c, T));
  for (int w = 0; w < windows; ++w)
    for (int k = 1; k <= c.exit_points(); ++k)
      for (int t = 0; t < T; ++t) {
        r->discrete_at(w, k - 1, t, 0) = depth > k ? 1 : 0;
        r->at(w, k - 1, t) = k < c.min_exit ? 0.0f : (depth > k ? 0.0f : 1.0f);
      }
  return r;
}

// d_t = 1 + sum_k c_{k,t} of every token of a record, [windows * T].
std::vector<int32_t> depths_of(const CoefficientTensor& r) {
  const int T = r.shape().tokens, P = r.shape().layers;
  std::vector<int32_t> d(size_t(r.windows()) * T, 1);
  for (int w = 0; w < r.windows(); ++w)
    for (int k = 0; k < P; ++k)
      for (int t = 0; t < T; ++t) d[size_t(w) * T + t] += r.discrete_at(w, k, t, 0);
  return d;
}

// Figures of a depth record over `windows` windows, FLOPs per token by kind.
nlohmann::ordered_json eval_figures(const ExitConfig& c, const std::vector<int32_t>& depth, int windows, int T, bool live) {
  const ExitPassFigures f = exit_pass_figures(c, depth.data(), windows, T, live);
  const double N = double(windows) * T, L = c.n_layer;
  std::vector<double> histogram(size_t(c.n_layer), 0.0), active(size_t(c.n_layer)), propagated(size_t(c.n_layer));
  double depth_sum = 0, rows = 0;
  for (int32_t d : depth) {
    histogram[size_t(d - 1)] += 1.0 / N;
    depth_sum += d;
  }
  for (int k = 0; k < c.n_layer; ++k) {
    active[size_t(k)] = double(f.active[size_t(k)]) / N;
    propagated[size_t(k)] = double(f.propagated[size_t(k)]) / N;
    rows += double(f.active[size_t(k)]);
  }
  nlohmann::ordered_json j;
  j["mean_depth"] = depth_sum / N;
  j["exit_histogram"] = histogram;
  j["active_rows"] = active;
  j["propagated_rows"] = propagated;
  j["token_block_fraction"] = rows / (L * N);
  j["eval_gflop_per_token"] = f.total() / 1e9 / N;
  j["eval_gflop_per_token_by_kind"] = {{"trunk", f.trunk / 1e9 / N},
                                       {"attention", f.attention / 1e9 / N},
                                       {"propagation", f.propagation / 1e9 / N},
                                       {"controller", f.controller / 1e9 / N},
                                       {"head", f.head / 1e9 / N}};
  j["propagation_gflop_per_token_decode"] = f.propagation_decode / 1e9 / N;
  return j;
}

// The modes of one exit checkpoint: each counted on the timing windows (its counters checked against
// the family's formulas for the depths it ran) with its NLL and depths on the evaluation windows.
class ExitModes {
 public:
  ExitModes(const std::string& path, const Corpus& corpus, const ExecOptions& o, TimedModes& timed)
      : model_(std::make_shared<const ExitModel<float>>(ExitModel<float>::load(path))),
        c_(model_->config()),
        T_(c_.seq_len),
        B_(o.batch),
        timing_(std::make_shared<const TokenWindows>(load_token_windows(corpus.split("test"), T_, B_))),
        eval_(load_token_windows(corpus.split("test"), T_, o.eval_windows)),
        rs_(std::make_shared<ExitRunState<float>>(c_, B_, T_)),
        timed_(timed) {}

  const ExitConfig& config() const { return c_; }
  int batch() const { return B_; }
  int eval_count() const { return eval_.count; }
  std::shared_ptr<const TokenWindows> timing() const { return timing_; }
  nlohmann::ordered_json& modes() { return modes_; }

  // A replayed configuration: counted on the timing windows, NLL on the evaluation windows.
  void replayed(const std::string& name, std::shared_ptr<CoefficientTensor> timing_record,
                std::shared_ptr<CoefficientTensor> eval_record, nlohmann::ordered_json extra) {
    const std::vector<int32_t> d = depths_of(*timing_record);
    const auto source = make_shared_owning<ExitReplayedDepth<float>>(timing_record, c_, *timing_record);
    extra["nll"] = evaluate([&](CoefficientTensor&) { return std::make_unique<ExitReplayedDepth<float>>(c_, *eval_record); },
                            *eval_record);
    extra.update(eval_figures(c_, depths_of(*eval_record), eval_.count, T_, false));
    count(name, source, exit_expected_counts(exit_pass_figures(c_, d.data(), B_, T_, false)), extra);
  }
  // A live configuration at threshold lambda: recorded first (its depths give the expected counts);
  // the records of the timing and the evaluation windows.
  std::pair<std::shared_ptr<CoefficientTensor>, std::shared_ptr<CoefficientTensor>> live(const std::string& name, double lambda) {
    const auto timing_record = std::make_shared<CoefficientTensor>(B_, exit_record_shape(c_, T_));
    ExitRecordingDepth<float> recording(*model_, lambda, *timing_record);
    exit_forward(*model_, *rs_, timing_->inputs.data(), B_, T_, recording);
    const std::vector<int32_t> d = depths_of(*timing_record);
    auto eval_record = std::make_shared<CoefficientTensor>(eval_.count, exit_record_shape(c_, T_));
    nlohmann::ordered_json extra{{"threshold", lambda}};
    extra["nll"] = evaluate([&](CoefficientTensor& r) { return std::make_unique<ExitRecordingDepth<float>>(*model_, lambda, r); },
                            *eval_record);
    extra.update(eval_figures(c_, depths_of(*eval_record), eval_.count, T_, true));
    count(name, std::make_shared<ExitLiveDepth<float>>(*model_, lambda), exit_expected_counts(exit_pass_figures(c_, d.data(), B_, T_, true)),
          extra);
    return {timing_record, eval_record};
  }

 private:
  // The evaluation windows' NLL and depths under a source built per batch.
  double evaluate(const std::function<std::unique_ptr<ExitDepthSource<float>>(CoefficientTensor&)>& source_for,
                  CoefficientTensor& record) {
    return mean_window_nll(eval_.count, B_, [&](int w0, int n, double* out) {
      auto source = source_for(record);
      exit_forward(*model_, *rs_, eval_.inputs.data() + int64_t(w0) * T_, n, T_, *source, w0);
      exit_loss(*rs_, eval_.targets.data() + int64_t(w0) * T_, out);
    });
  }
  void count(const std::string& name, std::shared_ptr<ExitDepthSource<float>> source, const ExpectedCounts& expected,
             const nlohmann::ordered_json& extra) {
    count_mode(modes_, timed_, name,
               [model = model_, rs = rs_, source, timing = timing_, B = B_, T = T_] {
                 exit_forward(*model, *rs, timing->inputs.data(), B, T, *source);
               },
               expected, c_.n_layer, B_ * T_, extra);
  }

  std::shared_ptr<const ExitModel<float>> model_;
  const ExitConfig& c_;
  const int T_, B_;
  std::shared_ptr<const TokenWindows> timing_;
  const TokenWindows eval_;
  std::shared_ptr<ExitRunState<float>> rs_;
  TimedModes& timed_;
  nlohmann::ordered_json modes_ = nlohmann::ordered_json::array();
};

// `record` with window w holding window (w + 1) mod windows's records: cross_input.
std::shared_ptr<CoefficientTensor> next_window_records(const CoefficientTensor& record, int windows, const ExitConfig& c, int T) {
  const auto crossed = std::make_shared<CoefficientTensor>(windows, exit_record_shape(c, T));
  for (int w = 0; w < windows; ++w) crossed->copy_window(w, record.view(), (w + 1) % windows);
  return crossed;
}

// Each dynamic mode's NLL minus the fixed-depth curve linearly interpolated at the same FLOPs per
// token (evaluation windows); null outside the curve's range. Its saving is against full depth.
void compare_with_fixed_depths(nlohmann::ordered_json& modes, const std::vector<size_t>& curve, const std::vector<size_t>& dynamic,
                               size_t full_depth, TimedModes& timed) {
  std::vector<std::pair<double, double>> points;
  for (size_t i : curve) points.push_back({modes[i]["eval_gflop_per_token"].get<double>(), modes[i]["nll"].get<double>()});
  std::sort(points.begin(), points.end());
  for (size_t i : dynamic) {
    const double x = modes[i]["eval_gflop_per_token"].get<double>(), nll = modes[i]["nll"].get<double>();
    nlohmann::ordered_json diff = nullptr;
    for (size_t p = 0; p + 1 < points.size(); ++p)
      if (x >= points[p].first && x <= points[p + 1].first) {
        const double span = points[p + 1].first - points[p].first;
        const double at = span > 0 ? points[p].second + (x - points[p].first) / span * (points[p + 1].second - points[p].second)
                                   : points[p].second;
        diff = nll - at;
        break;
      }
    modes[i]["nll_minus_fixed_depth_at_equal_flops"] = diff;
    timed.add_saving(i, full_depth);
  }
}

nlohmann::ordered_json measure_exit(const std::string& path, const Corpus& corpus, const ExecOptions& o, TimedModes& timed) {
  if (o.batch < 2)
    throw Error(path + ": exec of an exit model needs --batch >= 2 (cross_input replays another window's depths), found " +
                std::to_string(o.batch));
  ExitModes x(path, corpus, o, timed);
  const ExitConfig& c = x.config();
  const int T = c.seq_len, B = x.batch(), L = c.n_layer, E = x.eval_count();
  // 0 live, 1 replay, 2 full_depth, then fixed_depth_N (N = m..L-1), the sweep, cross_input, dense.
  const auto [live_timing, live_eval] = x.live("live", c.exit_threshold);
  x.replayed("replay", live_timing, live_eval, {{"threshold", c.exit_threshold}});
  x.replayed("full_depth", constant_record(c, B, T, L), constant_record(c, E, T, L), {{"fixed_depth", L}});
  const size_t full_depth = 2;
  std::vector<size_t> curve{full_depth}, dynamic{0};
  for (int N = c.min_exit; N < L; ++N) {
    curve.push_back(x.modes().size());
    x.replayed("fixed_depth_" + std::to_string(N), constant_record(c, B, T, N), constant_record(c, E, T, N), {{"fixed_depth", N}});
  }
  for (double lambda : exec_setting(o, exec_family_named("exit"), kExitThresholds)) {
    char name[48];
    std::snprintf(name, sizeof name, "exit_sweep_%g", lambda);
    dynamic.push_back(x.modes().size());
    x.live(name, lambda);
  }
  x.replayed("cross_input", next_window_records(*live_timing, B, c, T), next_window_records(*live_eval, E, c, T),
             {{"threshold", c.exit_threshold}, {"note", "each window replays the next window's live depths"}});
  dense_same_shape(x.modes(), timed, L, c.d_model, c.n_head, T, x.timing(), B);
  compare_with_fixed_depths(x.modes(), curve, dynamic, full_depth, timed);
  nlohmann::ordered_json m = exec_model_entry(path, sha256_file(path), "exit", nlohmann::json::parse(c.to_json()), B * T);
  m["modes"] = x.modes();
  m["latency_note"] = "window-pass (prefill-like) latency; decode latency is not measured";
  if (!o.skip_thresholds.empty()) m["skip_sweep_note"] = "not applicable: exit models skip blocks per token already";
  return m;
}

}  // namespace

ExecFamily exit_exec_family() {
  ExecFamily family{"exit", measure_exit, nullptr, nullptr, nullptr};
  family.exec_settings = {{kExitThresholds, "Early-exit models: comma-separated thresholds lambda in [0, 1] of the exit sweep",
                           0.0, 1.0, true, {0.5, 0.7, 0.8, 0.9, 0.95, 0.99}}};
  family.counters = {{kPropagatedRows, "K/V rows projected for tokens that exited earlier, so that later tokens attend to "
                                       "them (docs/exit.md)"}};
  family.legend =
      "Early-exit models: live runs the exit classifiers at the checkpoint's threshold and exit_sweep_<lambda> at lambda; "
      "replay and cross_input replay recorded depths (cross_input: the next window's); full_depth and fixed_depth_N replay "
      "constant depths, the static truncation curve of the same weights (their mean depth, depth histogram, FLOPs by kind "
      "and NLL minus the curve at equal FLOPs are in exec.json).";
  return family;
}

}  // namespace fca
