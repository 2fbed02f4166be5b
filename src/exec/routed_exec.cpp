#include "exec/routed_exec.h"

#include <functional>

#include "core/error.h"
#include "core/exec_counters.h"
#include "core/sha256.h"
#include "core/undefined_statistic.h"
#include "exec/counted_pass.h"
#include "exec/gated_flops.h"
#include "exec/timing.h"
#include "models/gated/forward.h"
#include "models/mod/forward.h"
#include "models/moe/forward.h"
#include "ops/attention.h"

namespace fca {
namespace {

// GEMM FLOPs of the attention half of one block over B windows of T tokens: qkv and proj (4 D^2 per
// row) and QK^T, PV over the pairs the blocked causal kernel executes.
double attention_half_flops(int B, int T, int D) {
  return 2.0 * double(B) * T * 4.0 * D * D + 2.0 * 2.0 * double(B) * double(attention_executed_pairs(T)) * D;
}

// One configuration: a counted pass (counters checked against `expected`), then timed passes.
nlohmann::ordered_json measure_mode(const std::string& mode, const std::function<void()>& pass, const ExpectedCounts& expected,
                                    int total_blocks, int tokens_per_pass, const ExecOptions& o) {
  ExecCounters counters;
  {
    CountingScope scope(counters);
    pass();
  }
  check_counters(mode, counters, expected);
  const TimingStats t = time_runs(pass, o.warmup, o.runs);
  nlohmann::ordered_json j{{"mode", mode}, {"total_blocks", total_blocks}, {"routed_rows_per_pass", counters.routed_rows.load()}};
  j.update(counter_fields(counters, tokens_per_pass));
  j["latency"] = t.to_json();
  j["tokens_per_s"] = tokens_per_pass / t.median;
  return j;
}

// MoE controller FLOPs per live pass: per block the router softmax (4 E per row), the top-k weights
// (k adds, and k divides when k > 1), and the auxiliary statistic (E (N + 4) + 1).
double moe_controller_flops(int L, int64_t N, int E, int k) {
  return double(L) * (double(N) * (4.0 * E + k + (k > 1 ? k : 0)) + double(E) * (double(N) + 4.0) + 1.0);
}

// The Dense gated model of the same L, D, H, T (initialised weights).
nlohmann::ordered_json dense_baseline(int L, int D, int H, int T, const std::vector<int32_t>& tokens, int B,
                                      const ExecOptions& o) {
  GatedConfig c;
  c.n_layer = L;
  c.d_model = D;
  c.n_head = H;
  c.seq_len = T;
  c.gate = GateKind::dense;
  const GatedModel<float> dense = GatedModel<float>::initialized(c, 1);
  GatedRunState<float> rs(c, B, T, false);
  LiveCoefficients<float> live(dense);
  auto j = measure_mode("dense_same_shape", [&] { gated_forward(dense, rs, tokens.data(), B, T, live); },
                        {L, gated_forward_flops(c, B, T, L), gated_controller_flops(c, B, T, L), gated_mixing_flops(c, B, T, L)},
                        L, B * T, o);
  j["note"] = "baseline with initialised weights: latency and FLOPs only";
  return j;
}

// Savings of `mode` against `reference`: claimed only where both FLOPs and latency are lower.
// Savings of `mode` against `reference`: claimed only where both FLOPs and latency are lower. A
// ratio with a zero denominator (a reference that counted no FLOPs or measured 0 s) is undefined:
// null, with the reason, and no saving is claimed.
nlohmann::ordered_json saving(const nlohmann::ordered_json& mode, const nlohmann::ordered_json& reference) {
  const nlohmann::ordered_json flops = ratio_or_null(mode["gflop_per_token"].get<double>(), reference["gflop_per_token"].get<double>());
  const nlohmann::ordered_json latency =
      ratio_or_null(mode["latency"]["median_s"].get<double>(), reference["latency"]["median_s"].get<double>());
  auto saved = [](const nlohmann::ordered_json& ratio) { return ratio.is_null() ? ratio : nlohmann::ordered_json(1.0 - ratio.get<double>()); };
  nlohmann::ordered_json s{{"mode", mode["mode"]},
                           {"against", reference["mode"]},
                           {"flop_ratio", flops},
                           {"latency_ratio", latency},
                           {"flop_saving", saved(flops)},
                           {"latency_saving", saved(latency)},
                           {"saves", !flops.is_null() && !latency.is_null() && flops.get<double>() < 1.0 && latency.get<double>() < 1.0}};
  if (flops.is_null() || latency.is_null())
    s["note"] = undefined_note(std::string("the reference ") + reference["mode"].get<std::string>() + " has " +
                               (flops.is_null() ? "no counted FLOPs" : "a median latency of 0 s") + ", so the ratio divides by 0");
  return s;
}

template <typename Pass>
double mean_nll(const TokenWindows& eval, int B, Pass pass_and_loss) {
  std::vector<double> nll(size_t(eval.count));
  for (int w0 = 0; w0 < eval.count; w0 += B) pass_and_loss(w0, std::min(B, eval.count - w0), nll.data() + w0);
  double s = 0;
  for (double v : nll) s += v;
  return s / eval.count;
}

}  // namespace

nlohmann::ordered_json measure_moe(const std::string& path, const Corpus& corpus, const ExecOptions& o) {
  const MoeModel<float> model = MoeModel<float>::load(path);
  if (o.batch < 2)
    throw Error(path + ": exec of a routed model needs --batch >= 2 (cross_input replays another window's routing), found " +
                std::to_string(o.batch));
  const MoeConfig& c = model.config();
  const int T = c.seq_len, B = o.batch, L = c.n_layer, D = c.d_model, E = c.n_expert, F = c.hidden();
  const TokenWindows timing = load_token_windows(corpus.split("test"), T, B);
  const TokenWindows eval = load_token_windows(corpus.split("test"), T, o.eval_windows);
  MoeRunState<float> rs(c, B, T, false), rs_dense(c, B, T, false, true);
  // GEMM FLOPs of one pass: attention halves, the router (live), expert rows x (fc + proj), head.
  auto formula = [&](int64_t expert_rows, bool router) {
    return L * attention_half_flops(B, T, D) + (router ? 2.0 * B * T * D * E * L : 0.0) + 2.0 * 2.0 * double(expert_rows) * D * F +
           2.0 * B * T * D * 256;
  };
  // Counts of a pass: the router's arithmetic when it runs, the weighted combination of every
  // routed row (2 D each).
  auto expected = [&](int64_t expert_rows, bool router) {
    return ExpectedCounts{L, formula(expert_rows, router), router ? moe_controller_flops(L, int64_t(B) * T, E, c.top_k) : 0.0,
                          2.0 * double(expert_rows) * D};
  };
  auto loads = [&](const MoeRunState<float>& s) {
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const auto& layer : s.layers) {
      std::vector<int64_t> per_expert;
      for (int e = 0; e < E; ++e) per_expert.push_back(layer.offsets[e + 1] - layer.offsets[e]);
      rows.push_back(per_expert);
    }
    return rows;
  };
  const int64_t grouped_rows = int64_t(L) * B * T * c.top_k, dense_rows = int64_t(L) * B * T * E;
  nlohmann::ordered_json modes = nlohmann::ordered_json::array();
  MoeLiveRouting<float> live(model);
  auto j_live = measure_mode("live", [&] { moe_forward(model, rs, timing.inputs.data(), B, T, live); },
                             expected(grouped_rows, true), L, B * T, o);
  j_live["expert_rows"] = loads(rs);
  j_live["nll"] = mean_nll(eval, B, [&](int w0, int n, double* out) {
    moe_forward(model, rs, eval.inputs.data() + int64_t(w0) * T, n, T, live);
    moe_loss(rs, eval.targets.data() + int64_t(w0) * T, out);
  });
  modes.push_back(j_live);
  CoefficientTensor recorded(B, moe_record_shape(c, T));
  MoeRecordingRouting<float> recording(model, recorded);
  moe_forward(model, rs, timing.inputs.data(), B, T, recording);
  MoeReplayedRouting<float> replayed(c, recorded);
  auto j_replay = measure_mode("replay", [&] { moe_forward(model, rs, timing.inputs.data(), B, T, replayed); },
                               expected(grouped_rows, false), L, B * T, o);
  j_replay["expert_rows"] = loads(rs);
  modes.push_back(j_replay);
  // cross_input: window b runs with the routing recorded on window (b+1) mod B (a derangement when
  // B >= 2): the expert loads change, so the latency is measured too.
  CoefficientTensor crossed(B, moe_record_shape(c, T));
  for (int b = 0; b < B; ++b) crossed.copy_window(b, recorded.view(), (b + 1) % B);
  MoeReplayedRouting<float> cross(c, crossed);
  auto j_cross = measure_mode("cross_input", [&] { moe_forward(model, rs, timing.inputs.data(), B, T, cross); },
                              expected(grouped_rows, false), L, B * T, o);
  j_cross["expert_rows"] = loads(rs);
  modes.push_back(j_cross);
  auto j_dense = measure_mode("dense_experts", [&] { moe_forward(model, rs_dense, timing.inputs.data(), B, T, live); },
                              expected(dense_rows, true), L, B * T, o);
  j_dense["nll"] = mean_nll(eval, B, [&](int w0, int n, double* out) {
    moe_forward(model, rs_dense, eval.inputs.data() + int64_t(w0) * T, n, T, live);
    moe_loss(rs_dense, eval.targets.data() + int64_t(w0) * T, out);
  });
  modes.push_back(j_dense);
  modes.push_back(dense_baseline(L, D, c.n_head, T, timing.inputs, B, o));
  {  // Dense with the MoE's total expert parameters: one expert of width E F that every token runs.
    MoeConfig wide = c;
    wide.n_expert = 1;
    wide.top_k = 1;
    wide.expert_hidden = E * F;
    const MoeModel<float> dense_wide = MoeModel<float>::initialized(wide, 1);
    MoeRunState<float> rs_wide(wide, B, T, false);
    MoeLiveRouting<float> wide_live(dense_wide);
    const double wide_formula = L * attention_half_flops(B, T, D) + 2.0 * B * T * D * 1 * L +
                                2.0 * 2.0 * double(L) * B * T * D * (E * F) + 2.0 * B * T * D * 256;
    auto j = measure_mode("dense_total_params", [&] { moe_forward(dense_wide, rs_wide, timing.inputs.data(), B, T, wide_live); },
                          {L, wide_formula, moe_controller_flops(L, int64_t(B) * T, 1, 1), 2.0 * L * double(B) * T * D}, L,
                          B * T, o);
    j["note"] = "baseline with initialised weights (an MLP of width E*F every token runs): latency and FLOPs only";
    modes.push_back(j);
  }
  nlohmann::ordered_json m;
  m["path"] = path;
  m["model_sha256"] = sha256_file(path);
  m["gate"] = "moe";
  m["family"] = "moe";
  m["config"] = nlohmann::json::parse(c.to_json());
  m["tokens_per_pass"] = B * T;
  m["modes"] = modes;
  // The experts' share: grouped MLP FLOPs per token = k/E of dense_experts by construction of the
  // rows; the savings below compare whole passes.
  m["expert_gflop_per_token"] = {{"grouped", 4.0 * D * F * c.top_k / 1e9}, {"dense_experts", 4.0 * D * F * E / 1e9}};
  m["savings"] = nlohmann::ordered_json::array({saving(modes[0], modes[3]), saving(modes[0], modes[4]), saving(modes[0], modes[5])});
  if (!o.skip_thresholds.empty()) m["skip_sweep_note"] = "not applicable: MoE blocks have no gate; routing decides the work";
  return m;
}

nlohmann::ordered_json measure_mod(const std::string& path, const Corpus& corpus, const ExecOptions& o) {
  const ModModel<float> model = ModModel<float>::load(path);
  if (o.batch < 2)
    throw Error(path + ": exec of a routed model needs --batch >= 2 (cross_input replays another window's routing), found " +
                std::to_string(o.batch));
  const ModConfig& c = model.config();
  const int T = c.seq_len, B = o.batch, L = c.n_layer, D = c.d_model, K = c.selected_tokens(T);
  const TokenWindows timing = load_token_windows(corpus.split("test"), T, B);
  const TokenWindows eval = load_token_windows(corpus.split("test"), T, o.eval_windows);
  ModRunState<float> rs(c, B, T, false);
  // Dense blocks over T tokens; routed blocks over their K tokens (the block's own attention pairs).
  double formula = 2.0 * B * T * D * 256;
  for (int l = 0; l < L; ++l) {
    const int n = c.routed(l) ? K : T;
    formula += attention_half_flops(B, n, D) + 2.0 * B * n * 8.0 * D * D;
  }
  // Routed blocks: the router's scores (2 D + 1 per token) and the selected rows' sigmoid weights
  // (4 each) when it runs; h + w F on the selected rows (2 D each).
  const double routed = c.routed_layers();
  const ExpectedCounts live_counts{L, formula, routed * (double(B) * T * (2.0 * D + 1.0) + double(B) * K * 4.0),
                                   routed * 2.0 * double(B) * K * D};
  ExpectedCounts replay_counts = live_counts;
  replay_counts.controller_flops = 0;
  nlohmann::ordered_json modes = nlohmann::ordered_json::array();
  ModLiveRouting<float> live(model);
  auto j_live = measure_mode("live", [&] { mod_forward(model, rs, timing.inputs.data(), B, T, live); }, live_counts, L, B * T, o);
  j_live["nll"] = mean_nll(eval, B, [&](int w0, int n, double* out) {
    mod_forward(model, rs, eval.inputs.data() + int64_t(w0) * T, n, T, live);
    mod_loss(rs, eval.targets.data() + int64_t(w0) * T, out);
  });
  modes.push_back(j_live);
  CoefficientTensor recorded(B, mod_record_shape(c, T));
  ModRecordingRouting<float> recording(model, recorded);
  mod_forward(model, rs, timing.inputs.data(), B, T, recording);
  ModReplayedRouting<float> replayed(c, recorded);
  modes.push_back(measure_mode("replay", [&] { mod_forward(model, rs, timing.inputs.data(), B, T, replayed); }, replay_counts, L,
                               B * T, o));
  CoefficientTensor crossed(B, mod_record_shape(c, T));
  for (int b = 0; b < B; ++b) crossed.copy_window(b, recorded.view(), (b + 1) % B);
  ModReplayedRouting<float> cross(c, crossed);
  modes.push_back(measure_mode("cross_input", [&] { mod_forward(model, rs, timing.inputs.data(), B, T, cross); }, replay_counts, L,
                               B * T, o));
  modes.push_back(dense_baseline(L, D, c.n_head, T, timing.inputs, B, o));
  nlohmann::ordered_json m;
  m["path"] = path;
  m["model_sha256"] = sha256_file(path);
  m["gate"] = "mod";
  m["family"] = "mod";
  m["config"] = nlohmann::json::parse(c.to_json());
  m["tokens_per_pass"] = B * T;
  m["selected_tokens_per_window"] = K;
  m["modes"] = modes;
  m["savings"] = nlohmann::ordered_json::array({saving(modes[0], modes[3])});
  if (!o.skip_thresholds.empty()) m["skip_sweep_note"] = "not applicable: MoD routing already skips tokens";
  return m;
}

}  // namespace fca
