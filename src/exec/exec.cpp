#include "exec/exec.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "core/exec_counters.h"
#include "core/file_io.h"
#include "core/progress.h"
#include "core/provenance.h"
#include "core/undefined_statistic.h"
#include "core/sha256.h"
#include "exec/counted_pass.h"
#include "exec/gated_flops.h"
#include "exec/mudd_flops.h"
#include "exec/routed_exec.h"
#include "models/registry.h"
#include "exec/timing.h"
#include "models/gated/forward.h"
#include "models/mudd/forward.h"

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

// One configuration of a model: counters from one instrumented pass, checked against the formulas,
// then timed passes. `live_controller`: the source evaluates the controller (its FLOPs expected).
nlohmann::ordered_json measure(const std::string& mode, const GatedModel<float>& model, GatedRunState<float>& rs,
                               const int32_t* tokens, int B, int T, CoefficientSource<float>& source, bool live_controller,
                               const std::vector<uint8_t>* executed, const ExecOptions& o) {
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
  check_counters(mode, counters,
                 {expected_blocks, gated_forward_flops(c, B, T, expected_blocks),
                  live_controller ? gated_controller_flops(c, B, T, expected_blocks) : 0.0,
                  gated_mixing_flops(c, B, T, expected_blocks)});
  const TimingStats t = time_runs([&] { gated_forward(model, rs, tokens, B, T, source, 0, executed); }, o.warmup, o.runs);
  nlohmann::ordered_json j;
  j["mode"] = mode;
  j["total_blocks"] = c.n_layer;
  j.update(counter_fields(counters, int64_t(B) * T));
  j["latency"] = t.to_json();
  j["tokens_per_s"] = double(B) * T / t.median;
  return j;
}

// A MUDD folder: every block and DA module always runs. Modes: live (the DA generators compute alpha),
// replay (recorded alpha supplied), identity (one-hot newest source: a plain residual stream, with
// the mixing still executed). FLOPs and blocks from the counters.
nlohmann::ordered_json measure_mudd(const std::string& path, const Corpus& corpus, const ExecOptions& o) {
  const MuddModel<float> model = MuddModel<float>::load(path, /*in_place=*/true);
  const MuddConfig& c = model.config();
  if (c.vocab_size != 256) throw Error(path + ": exec measures byte-level MUDD models (vocab 256) on text windows");
  const int T = c.block_size, B = o.batch;
  MuddRunState<float> rs(c, B, T);
  const TokenWindows timing = load_token_windows(corpus.split("test"), T, B);
  const TokenWindows eval = load_token_windows(corpus.split("test"), T, o.eval_windows);
  nlohmann::ordered_json m;
  m["path"] = path;
  m["model_sha256"] = model.content_hash();
  m["gate"] = "mudd";
  m["config"] = {{"n_layer", c.n_layer}, {"d_model", c.dim}, {"n_head", c.n_head}, {"seq_len", c.block_size}};
  m["tokens_per_pass"] = B * T;
  if (!o.skip_thresholds.empty()) m["skip_sweep_note"] = "not applicable: MUDD mixes every source; no block has a gate";
  auto nll_of = [&](MuddCoefficientSource<float>& source) {
    std::vector<double> nll(static_cast<size_t>(eval.count));
    for (int w0 = 0; w0 < eval.count; w0 += B) {
      const int n = std::min(B, eval.count - w0);
      mudd_forward(model, rs, eval.inputs.data() + int64_t(w0) * T, n, T, source, w0);
      mudd_loss(rs, eval.targets.data() + int64_t(w0) * T, nll.data() + w0);
    }
    double s = 0;
    for (double v : nll) s += v;
    return s / eval.count;
  };
  auto one = [&](const std::string& mode, MuddCoefficientSource<float>& source, bool live_generator, bool with_nll) {
    ExecCounters counters;
    {
      CountingScope scope(counters);
      mudd_forward(model, rs, timing.inputs.data(), B, T, source);
    }
    check_counters(mode, counters,
                   {c.n_layer, mudd_gemm_flops(c, B, T, live_generator), live_generator ? mudd_controller_flops(c, B, T) : 0.0,
                    mudd_mixing_flops(c, B, T)});
    const TimingStats t = time_runs([&] { mudd_forward(model, rs, timing.inputs.data(), B, T, source); }, o.warmup, o.runs);
    nlohmann::ordered_json j{{"mode", mode}, {"total_blocks", c.n_layer}};
    j.update(counter_fields(counters, int64_t(B) * T));
    j["latency"] = t.to_json();
    j["tokens_per_s"] = double(B) * T / t.median;
    if (with_nll) j["nll"] = nll_of(source);
    return j;
  };
  nlohmann::ordered_json modes = nlohmann::ordered_json::array();
  MuddLiveCoefficients<float> live(model);
  modes.push_back(one("live", live, true, true));
  CoefficientTensor recorded = make_mudd_coefficients(c, B, T);
  MuddRecordingCoefficients<float> recording(model, recorded);
  mudd_forward(model, rs, timing.inputs.data(), B, T, recording);
  MuddReplayedCoefficients<float> replayed(c, recorded);
  modes.push_back(one("replay", replayed, false, false));
  CoefficientTensor identity = make_mudd_coefficients(c, std::max(B, eval.count), T);
  for (int w = 0; w < identity.windows(); ++w)
    for (int l = 0; l < c.n_layer; ++l)
      for (int t = 0; t < T; ++t)
        for (int st = 0; st < c.streams(l); ++st) identity.at(w, l, t, st, l + 1) = 1.0f;
  MuddReplayedCoefficients<float> plain(c, identity);
  modes.push_back(one("identity_mixing", plain, false, true));
  m["modes"] = modes;
  return m;
}

}  // namespace

TokenWindows load_token_windows(const TextSplit& split, int T, int wanted) {
  TokenWindows w;
  const auto idx = evenly_spaced_windows(split.window_count(T), wanted, split.name());
  w.count = int(idx.size());
  w.inputs.resize(idx.size() * size_t(T));
  w.targets.resize(idx.size() * size_t(T));
  for (size_t i = 0; i < idx.size(); ++i) split.window(idx[i], T, w.inputs.data() + i * T, w.targets.data() + i * T);
  return w;
}

nlohmann::ordered_json run_exec(const Corpus& corpus, const ExecOptions& o) {
  if (!o.out_dir.empty()) ensure_folder(o.out_dir, "--out");  // before the measurements, not after
  if (o.models.empty()) throw Error("exec needs at least one --model");
  if (o.runs < 1 || o.warmup < 0 || o.batch < 1) throw Error("exec: --runs and --batch must be positive");
  for (double t : o.skip_thresholds)
    if (!(t >= 0.0 && t <= 1.0)) throw Error("--skip-threshold " + std::to_string(t) + " is outside [0, 1]");
  if (!o.skip_thresholds.empty()) {
    bool any = false;
    for (const auto& path : o.models) {
      if (family_of(path).name != "gated") continue;  // only the gated family has gates to calibrate
      const GateKind g = read_gated_config(path).gate;
      any = any || g == GateKind::uniform || g == GateKind::layerstatic || g == GateKind::featuregate;
    }
    if (!any)
      throw Error("--skip-threshold needs a model with calibratable gates (uniform, layerstatic or featuregate); " +
                  std::string(o.models.size() == 1 ? o.models[0] + " has gate " + gate_kind_name(read_gated_config(o.models[0]).gate)
                                                   : "none of the models has one"));
  }
  for (const auto& path : o.models) (void)family_of(path);  // a wrong --model fails before the peak probe's seconds
  const double peak = measure_sgemm_peak_gflops();
  nlohmann::ordered_json out;
  out["schema"] = kExecSchema;
  out["settings"] = {{"batch", o.batch}, {"runs", o.runs}, {"warmup", o.warmup}, {"skip_thresholds", o.skip_thresholds},
                     {"calib_windows", o.calib_windows}, {"eval_windows", o.eval_windows}};
  out["flop_convention"] = kFlopConvention;
  out["sgemm_peak_gflops"] = peak;
  out["models"] = nlohmann::ordered_json::array();
  Progress bar("exec", int64_t(o.models.size()), "model");
  for (size_t mi = 0; mi < o.models.size(); ++mi) {
    const std::string& path = o.models[mi];
    const std::string family = family_of(path).name;
    if (family != "gated") {
      out["models"].push_back(family == "mudd" ? measure_mudd(path, corpus, o)
                              : family == "moe" ? measure_moe(path, corpus, o)
                                                : measure_mod(path, corpus, o));
      if (o.progress) bar.update(int64_t(mi + 1));
      continue;
    }
    const GatedModel<float> model = GatedModel<float>::load(path);
    const GatedConfig& c = model.config();
    const int T = c.seq_len, B = o.batch;
    const bool has_controller = c.gate == GateKind::uniform || c.gate == GateKind::layerstatic || c.gate == GateKind::featuregate;
    GatedRunState<float> rs(c, B, T, false);
    const TokenWindows timing = load_token_windows(corpus.split("test"), T, B);
    const TokenWindows eval = load_token_windows(corpus.split("test"), T, o.eval_windows);

    nlohmann::ordered_json m;
    m["path"] = path;
    m["model_sha256"] = sha256_file(path);
    m["gate"] = gate_kind_name(c.gate);
    m["config"] = nlohmann::json::parse(c.to_json());
    m["tokens_per_pass"] = B * T;
    nlohmann::ordered_json modes = nlohmann::ordered_json::array();

    LiveCoefficients<float> live(model);
    auto j_live = measure("live", model, rs, timing.inputs.data(), B, T, live, true, nullptr, o);
    j_live["nll"] = mean_nll(model, rs, eval, B, T, live, nullptr);
    modes.push_back(j_live);

    CoefficientTensor recorded(B, gated_coefficient_shape(c, T));
    RecordingCoefficients<float> recording(model, recorded);
    gated_forward(model, rs, timing.inputs.data(), B, T, recording);
    ReplayedCoefficients<float> replayed(recorded);
    modes.push_back(measure("replay", model, rs, timing.inputs.data(), B, T, replayed, false, nullptr, o));

    CoefficientTensor ones(std::max(B, eval.count), gated_coefficient_shape(c, T));
    std::fill(ones.values().begin(), ones.values().end(), 1.0f);
    ReplayedCoefficients<float> forced(ones);
    auto j_ones = measure("gates_forced_to_1", model, rs, timing.inputs.data(), B, T, forced, false, nullptr, o);
    j_ones["nll"] = mean_nll(model, rs, eval, B, T, forced, nullptr);
    modes.push_back(j_ones);

    if (!o.skip_thresholds.empty() && has_controller) {
      // Calibrated static gates: the mean of g per layer over the calibration windows.
      const TokenWindows calib = load_token_windows(corpus.split("valid"), T, o.calib_windows);
      CoefficientTensor calib_g(calib.count, gated_coefficient_shape(c, T));
      RecordingCoefficients<float> rec(model, calib_g);
      mean_nll(model, rs, calib, B, T, rec, nullptr);
      std::vector<double> static_gate(size_t(c.n_layer), 0.0);
      for (int w = 0; w < calib.count; ++w)
        for (int l = 0; l < c.n_layer; ++l)
          for (int t = 0; t < T; ++t) static_gate[size_t(l)] += calib_g.at(w, l, t) / (double(calib.count) * T);
      m["calibrated_static_gates"] = static_gate;
      CoefficientTensor static_coeffs(std::max(B, eval.count), gated_coefficient_shape(c, T));
      for (int w = 0; w < static_coeffs.windows(); ++w)
        for (int l = 0; l < c.n_layer; ++l)
          for (int t = 0; t < T; ++t) static_coeffs.at(w, l, t) = float(static_gate[size_t(l)]);
      ReplayedCoefficients<float> static_source(static_coeffs);
      nlohmann::ordered_json sweep = nlohmann::ordered_json::array();
      std::vector<double> thresholds = o.skip_thresholds;
      thresholds.insert(thresholds.begin(), 0.0);  // reference: static gates, nothing removed
      for (double tau : thresholds) {
        std::vector<uint8_t> executed(size_t(c.n_layer));
        for (int l = 0; l < c.n_layer; ++l) executed[size_t(l)] = static_gate[size_t(l)] >= tau ? 1 : 0;
        auto j = measure("static_skip", model, rs, timing.inputs.data(), B, T, static_source, false, &executed, o);
        j["threshold"] = tau;
        j["removed_blocks"] = nlohmann::ordered_json::array();
        for (int l = 0; l < c.n_layer; ++l)
          if (!executed[size_t(l)]) j["removed_blocks"].push_back(l);
        j["nll"] = mean_nll(model, rs, eval, B, T, static_source, &executed);
        sweep.push_back(j);
      }
      m["skip_sweep"] = sweep;
    } else if (!o.skip_thresholds.empty()) {
      m["skip_sweep_note"] = std::string("not applicable: the ") + gate_kind_name(c.gate) + " gate has no controller to calibrate";
    }
    m["modes"] = modes;
    out["models"].push_back(m);
    if (o.progress) bar.update(int64_t(mi + 1));
  }
  if (o.progress) bar.finish();
  // Ratio to Dense: latency relative to the live dense model with the most blocks, when given.
  double dense_latency = 0;
  int dense_layers = -1;
  for (const auto& m : out["models"])
    if (m["gate"] == "dense" && m["config"]["n_layer"].get<int>() > dense_layers) {
      dense_layers = m["config"]["n_layer"];
      dense_latency = m["modes"][0]["latency"]["median_s"];
    }
  out["dense_reference_latency_s"] = dense_layers >= 0 ? nlohmann::ordered_json(dense_latency) : nlohmann::ordered_json(nullptr);
  // Null where there is no Dense model, or its median is 0 (a ratio with a zero denominator).
  auto ratio_to_dense = [&](nlohmann::ordered_json& mode) {
    mode["latency_ratio_to_dense"] =
        dense_layers >= 0 ? ratio_or_null(mode["latency"]["median_s"].get<double>(), dense_latency) : nlohmann::ordered_json(nullptr);
  };
  for (auto& m : out["models"]) {
    for (auto& mode : m["modes"]) ratio_to_dense(mode);
    if (m.contains("skip_sweep"))
      for (auto& mode : m["skip_sweep"]) ratio_to_dense(mode);
  }
  auto prov = provenance_base();
  prov["data"] = {{"dir", corpus.dir()}, {"test_sha256", corpus.split("test").content_hash()}};
  out["provenance"] = prov;
  if (!o.out_dir.empty()) {
    ensure_folder(o.out_dir, "--out");
    write_file_atomically(o.out_dir + "/exec.json", [&](std::ostream& s) { s << out.dump(2) << "\n"; });
    write_file_atomically(o.out_dir + "/exec.md", [&](std::ostream& s) { s << exec_markdown(out); });
  }
  return out;
}

std::string exec_markdown(const nlohmann::ordered_json& e) {
  std::ostringstream md;
  char buf[512];
  md << "# Actual execution\n\nBatch " << e["settings"]["batch"] << ", " << e["settings"]["runs"] << " timed runs after "
     << e["settings"]["warmup"] << " warm-up runs, " << e["provenance"]["threads"] << " threads; SGEMM peak "
     << std::to_string(int(e["sgemm_peak_gflops"].get<double>())) << " GFLOP/s. FLOPs: " << e["flop_convention"].get<std::string>() << ".\n\n";
  md << "| model | mode | executed blocks | GFLOP/token | of which controller, MFLOP/token | latency median [p10, p90] ms | "
        "tokens/s | ratio to Dense | NLL |\n"
        "|---|---|---:|---:|---:|---|---:|---:|---:|\n";
  auto row = [&](const nlohmann::ordered_json& m, const nlohmann::ordered_json& r, const std::string& mode) {
    const auto& c = m["config"];
    std::string name = m["gate"].get<std::string>() + " L" + std::to_string(c["n_layer"].get<int>()) + " D" +
                       std::to_string(c["d_model"].get<int>());
    std::string ratio = r["latency_ratio_to_dense"].is_null() ? "–" : std::to_string(r["latency_ratio_to_dense"].get<double>()).substr(0, 5);
    std::string nll = r.contains("nll") ? std::to_string(r["nll"].get<double>()).substr(0, 6) : "–";
    char controller[32];
    std::snprintf(controller, sizeof controller, "%.4g",
                  1e3 * r["gflop_per_pass_by_kind"]["controller"].get<double>() / m["tokens_per_pass"].get<double>());
    std::snprintf(buf, sizeof buf, "| %s | %s | %d / %d | %.4g | %s | %.2f [%.2f, %.2f] | %.0f | %s | %s |\n", name.c_str(),
                  mode.c_str(), r["executed_blocks"].get<int>(), r["total_blocks"].get<int>(), r["gflop_per_token"].get<double>(),
                  controller,
                  1e3 * r["latency"]["median_s"].get<double>(), 1e3 * r["latency"]["p10_s"].get<double>(),
                  1e3 * r["latency"]["p90_s"].get<double>(), r["tokens_per_s"].get<double>(), ratio.c_str(), nll.c_str());
    md << buf;
  };
  for (const auto& m : e["models"]) {
    for (const auto& r : m["modes"]) row(m, r, r["mode"]);
    if (m.contains("skip_sweep"))
      for (const auto& r : m["skip_sweep"]) {
        std::snprintf(buf, sizeof buf, "skip tau=%.3g", r["threshold"].get<double>());
        row(m, r, buf);
      }
  }
  for (const auto& m : e["models"]) {
    if (!m.contains("savings")) continue;
    md << "\n" << m["gate"].get<std::string>() << " (" << m["path"].get<std::string>() << "), live routing against:\n";
    for (const auto& s : m["savings"]) {
      if (s["flop_ratio"].is_null() || s["latency_ratio"].is_null()) {
        md << "- " << s["against"].get<std::string>() << ": " << s["note"].get<std::string>() << "; no saving claimed\n";
        continue;
      }
      std::snprintf(buf, sizeof buf, "- %s: FLOPs x%.3f, latency x%.3f: %s\n", s["against"].get<std::string>().c_str(),
                    s["flop_ratio"].get<double>(), s["latency_ratio"].get<double>(),
                    s["saves"].get<bool>() ? "saves compute (both lower)" : "no saving claimed (not both lower)");
      md << buf;
    }
    if (m["modes"][0].contains("expert_rows")) {
      md << "- expert rows per layer (live):";
      for (const auto& layer : m["modes"][0]["expert_rows"]) md << " " << layer.dump();
      md << "\n";
    }
  }
  md << "\nlive: the controller computes the gates; replay: recorded gates supplied, controller off; gates_forced_to_1: "
        "every g = 1; skip tau: calibrated static gates, blocks whose static gate is below tau removed from the graph "
        "(tau = 0 removes nothing); MUDD identity_mixing: every stream takes only the newest source (the mixing still "
        "runs). Routed models (moe, mod): replay and cross_input supply recorded routing (cross_input: the routing of "
        "another window), dense_experts runs every expert on every token and zeroes the unselected, dense_same_shape is "
        "the Dense model of the same L, D, H and dense_total_params the Dense model whose MLP has the MoE's expert "
        "parameters (both with initialised weights: latency and FLOPs only). NLL in nats/byte on the evaluation windows.\n";
  return md.str();
}

}  // namespace fca
