#include "models/gated/exec/measure.h"

#include <algorithm>
#include <memory>

#include "core/exec_counters.h"
#include "core/sha256.h"
#include "models/gated/exec/bench.h"
#include "models/gated/exec/flops.h"
#include "models/gated/forward.h"

namespace fca {
namespace {

// Mean NLL over windows, batch by batch, with the given source and block mask.
double mean_nll(const GatedModel<float>& model, GatedRunState<float>& rs, const TokenWindows& w, int batch, int T,
                CoefficientSource<float>& source, const std::vector<uint8_t>* executed) {
  std::vector<double> nll(static_cast<size_t>(w.count));
  for (int w0 = 0; w0 < w.count; w0 += batch) {
    const int B = std::min(batch, w.count - w0);
    gated_forward(model, rs, w.inputs.data() + int64_t(w0) * T, B, T, source, w0, executed);
    gated_loss(rs, w.targets.data() + int64_t(w0) * T, nll.data() + w0);
  }
  double s = 0;
  for (double v : nll) s += v;
  return s / w.count;
}

// One configuration of a model: counters from one instrumented pass, checked against the formulas.
// `live_controller`: the source evaluates
// the controller (its FLOPs expected).
nlohmann::ordered_json count_gated(const std::string& mode, const GatedModel<float>& model, GatedRunState<float>& rs,
                                   const int32_t* tokens, int B, int T, CoefficientSource<float>& source, bool live_controller,
                                   const std::vector<uint8_t>* executed) {
  const GatedConfig& c = model.config();
  int expected_blocks = c.n_layer;
  if (executed != nullptr) {
    expected_blocks = 0;
    for (uint8_t e : *executed) expected_blocks += e ? 1 : 0;
  }
  ExecCounters counters;
  {
    CountingScope scope(counters);
    gated_forward(model, rs, tokens, B, T, source, 0, executed);
  }
  // The counters must agree with the graph that ran: blocks, GEMM, controller and mixing FLOPs.
  const ExpectedCounts expected{expected_blocks,
                                gated_forward_flops(c, B, T, expected_blocks),
                                live_controller ? gated_controller_flops(c, B, T, expected_blocks) : 0.0,
                                gated_mixing_flops(c, B, T, expected_blocks),
                                live_controller ? gated_controller_evaluations(c, expected_blocks) : 0,
                                0};
  check_counters(mode, counters, expected);
  nlohmann::ordered_json j;
  j["mode"] = mode;
  j["total_blocks"] = c.n_layer;
  j.update(counter_fields(counters, expected, int64_t(B) * T));
  return j;
}

// A gated checkpoint: live, replay, gates_forced_to_1, and the real skip sweep when asked for.
nlohmann::ordered_json measure_gated(const std::string& path, const Corpus& corpus, const ExecOptions& o, TimedModes& timed) {
  const auto model = std::make_shared<const GatedModel<float>>(GatedModel<float>::load(path));
  const GatedConfig& c = model->config();
  const int T = c.seq_len, B = o.batch;
  const bool has_controller = c.gate == GateKind::uniform || c.gate == GateKind::layerstatic || c.gate == GateKind::featuregate;
  const auto rs = std::make_shared<GatedRunState<float>>(c, B, T, false);
  const auto timing = std::make_shared<const TokenWindows>(load_token_windows(corpus.split("test"), T, B));
  const TokenWindows eval = load_token_windows(corpus.split("test"), T, o.eval_windows);
  const int32_t* tokens = timing->inputs.data();
  // The timed pass of a source (and block mask): it shares everything it reads.
  auto pass = [&](std::shared_ptr<CoefficientSource<float>> source, std::shared_ptr<const std::vector<uint8_t>> executed) {
    return [model, rs, timing, source, executed, B, T] {
      gated_forward(*model, *rs, timing->inputs.data(), B, T, *source, 0, executed.get());
    };
  };

  nlohmann::ordered_json m = exec_model_entry(path, sha256_file(path), "gated", nlohmann::json::parse(c.to_json()), B * T);
  if (c.gate == GateKind::dense) m["dense"] = true;  // the Dense transformer: the reference of latency ratios
  nlohmann::ordered_json modes = nlohmann::ordered_json::array();

  const auto live = std::make_shared<LiveCoefficients<float>>(*model);
  auto j_live = count_gated("live", *model, *rs, tokens, B, T, *live, true, nullptr);
  j_live["nll"] = mean_nll(*model, *rs, eval, B, T, *live, nullptr);
  timed.add("modes", modes.size(), pass(live, nullptr));
  modes.push_back(j_live);

  auto recorded = std::make_shared<CoefficientTensor>(B, gated_coefficient_shape(c, T));
  RecordingCoefficients<float> recording(*model, *recorded);
  gated_forward(*model, *rs, tokens, B, T, recording);
  // The replayed source reads the recorded tensor: the pass shares both.
  const auto replayed = make_shared_owning<ReplayedCoefficients<float>>(recorded, *recorded);
  timed.add("modes", modes.size(), pass(replayed, nullptr));
  modes.push_back(count_gated("replay", *model, *rs, tokens, B, T, *replayed, false, nullptr));

  auto ones = std::make_shared<CoefficientTensor>(std::max(B, eval.count), gated_coefficient_shape(c, T));
  std::fill(ones->values().begin(), ones->values().end(), 1.0f);
  const auto forced = make_shared_owning<ReplayedCoefficients<float>>(ones, *ones);
  auto j_ones = count_gated("gates_forced_to_1", *model, *rs, tokens, B, T, *forced, false, nullptr);
  j_ones["nll"] = mean_nll(*model, *rs, eval, B, T, *forced, nullptr);
  timed.add("modes", modes.size(), pass(forced, nullptr));
  modes.push_back(j_ones);

  if (!o.skip_thresholds.empty() && has_controller) {
    // Calibrated static gates: the mean of g per layer over the calibration windows.
    const TokenWindows calib = load_token_windows(corpus.split("valid"), T, o.calib_windows);
    CoefficientTensor calib_g(calib.count, gated_coefficient_shape(c, T));
    RecordingCoefficients<float> rec(*model, calib_g);
    mean_nll(*model, *rs, calib, B, T, rec, nullptr);
    std::vector<double> static_gate(size_t(c.n_layer), 0.0);
    for (int w = 0; w < calib.count; ++w)
      for (int l = 0; l < c.n_layer; ++l)
        for (int t = 0; t < T; ++t) static_gate[size_t(l)] += calib_g.at(w, l, t) / (double(calib.count) * T);
    m["calibrated_static_gates"] = static_gate;
    auto static_coeffs = std::make_shared<CoefficientTensor>(std::max(B, eval.count), gated_coefficient_shape(c, T));
    for (int w = 0; w < static_coeffs->windows(); ++w)
      for (int l = 0; l < c.n_layer; ++l)
        for (int t = 0; t < T; ++t) static_coeffs->at(w, l, t) = float(static_gate[size_t(l)]);
    const auto static_source = make_shared_owning<ReplayedCoefficients<float>>(static_coeffs, *static_coeffs);
    nlohmann::ordered_json sweep = nlohmann::ordered_json::array();
    std::vector<double> thresholds = o.skip_thresholds;
    thresholds.insert(thresholds.begin(), 0.0);  // reference: static gates, nothing removed
    for (double tau : thresholds) {
      auto executed = std::make_shared<std::vector<uint8_t>>(size_t(c.n_layer));
      for (int l = 0; l < c.n_layer; ++l) (*executed)[size_t(l)] = static_gate[size_t(l)] >= tau ? 1 : 0;
      auto j = count_gated("static_skip", *model, *rs, tokens, B, T, *static_source, false, executed.get());
      j["threshold"] = tau;
      j["removed_blocks"] = nlohmann::ordered_json::array();
      for (int l = 0; l < c.n_layer; ++l)
        if (!(*executed)[size_t(l)]) j["removed_blocks"].push_back(l);
      j["nll"] = mean_nll(*model, *rs, eval, B, T, *static_source, executed.get());
      timed.add("skip_sweep", sweep.size(), pass(static_source, executed));
      sweep.push_back(j);
    }
    m["skip_sweep"] = sweep;
  } else if (!o.skip_thresholds.empty()) {
    m["skip_sweep_note"] = std::string("not applicable: the ") + gate_kind_name(c.gate) + " gate has no controller to calibrate";
  }
  m["modes"] = modes;
  return m;
}

// The Dense reference of every family's execution (exec's dense_same_shape): the Dense variant of
// the same shape with initialised weights. Its pass is a gated pass with g = 1: the unit gate is
// evaluated once per block and h + 1 F is counted as mixing, as in the family's own live passes.
void same_shape_dense(nlohmann::ordered_json& modes, TimedModes& timed, int L, int D, int H, int T,
                      std::shared_ptr<const TokenWindows> timing, int B) {
  GatedConfig c;
  c.n_layer = L;
  c.d_model = D;
  c.n_head = H;
  c.seq_len = T;
  c.gate = GateKind::dense;
  const auto dense = std::make_shared<const GatedModel<float>>(GatedModel<float>::initialized(c, 1));
  const auto rs = std::make_shared<GatedRunState<float>>(c, B, T, false);
  const auto live = std::make_shared<LiveCoefficients<float>>(*dense);
  count_mode(modes, timed, "dense_same_shape",
             [dense, rs, live, timing, B, T] { gated_forward(*dense, *rs, timing->inputs.data(), B, T, *live); },
             {L, gated_forward_flops(c, B, T, L), gated_controller_flops(c, B, T, L), gated_mixing_flops(c, B, T, L),
              gated_controller_evaluations(c, L), 0},
             L, B * T, {{"note", "baseline with initialised weights: latency and FLOPs only"}});
}

}  // namespace

ExecFamily gated_exec_family() {
  ExecFamily family{"gated", measure_gated,
          [](const std::string& path) {
            const GateKind g = read_gated_config(path).gate;
            return g == GateKind::uniform || g == GateKind::layerstatic || g == GateKind::featuregate;
          },
          gated_bench_forward, gated_bench_train, same_shape_dense};
  family.legend =
      "Gated models: gates_forced_to_1 sets every g = 1; skip tau runs calibrated static gates with the blocks whose "
      "static gate is below tau removed from the graph (tau = 0 removes nothing).";
  return family;
}

}  // namespace fca
