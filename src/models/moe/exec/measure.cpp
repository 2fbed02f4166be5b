#include "models/moe/exec/measure.h"

#include <functional>
#include <memory>

#include "core/error.h"
#include "core/exec_counters.h"
#include "core/sha256.h"
#include "models/moe/forward.h"
#include "models/base/stream.h"

namespace fca {
namespace {

// MoE controller FLOPs per live pass: per block the router softmax (4 E per row), the top-k weights
// (k adds, and k divides when k > 1), and the auxiliary statistic (E (N + 4) + 1).
double moe_controller_flops(int L, int64_t N, int E, int k) {
  return double(L) * (double(N) * (4.0 * E + k + (k > 1 ? k : 0)) + double(E) * (double(N) + 4.0) + 1.0);
}

// Expert rows per layer and expert of the pass that ran last in a run state.
nlohmann::ordered_json expert_rows(const MoeRunState<float>& s, int E) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& layer : s.layers) {
    std::vector<int64_t> per_expert;
    for (int e = 0; e < E; ++e) per_expert.push_back(layer.offsets[e + 1] - layer.offsets[e]);
    rows.push_back(per_expert);
  }
  return rows;
}

// dense_total_params: the Dense model with the MoE's total expert parameters, one expert of width
// E F that every token runs (initialised weights: latency and FLOPs only).
void count_dense_total_params(nlohmann::ordered_json& modes, TimedModes& timed, const MoeConfig& c,
                              std::shared_ptr<const TokenWindows> timing, int B) {
  const int T = c.seq_len, L = c.n_layer, D = c.d_model, E = c.n_expert, F = c.hidden();
  MoeConfig wide = c;
  wide.n_expert = 1;
  wide.top_k = 1;
  wide.expert_hidden = E * F;
  const auto dense_wide = std::make_shared<const MoeModel<float>>(MoeModel<float>::initialized(wide, 1));
  const auto rs_wide = std::make_shared<MoeRunState<float>>(wide, B, T, false);
  const auto wide_live = std::make_shared<MoeLiveRouting<float>>(*dense_wide);
  const double wide_formula = L * attention_half_flops(B, T, D) + 2.0 * B * T * D * 1 * L +
                              2.0 * 2.0 * double(L) * B * T * D * (E * F) + 2.0 * B * T * D * kByteVocab;
  count_mode(modes, timed, "dense_total_params",
             [dense_wide, rs_wide, wide_live, timing, B, T] { moe_forward(*dense_wide, *rs_wide, timing->inputs.data(), B, T, *wide_live); },
             {L, wide_formula, moe_controller_flops(L, int64_t(B) * T, 1, 1), 2.0 * L * double(B) * T * D, L, int64_t(L) * B * T},
             L, B * T, {{"note", "baseline with initialised weights (an MLP of width E*F every token runs): latency and FLOPs only"}});
}

nlohmann::ordered_json measure_moe(const std::string& path, const Corpus& corpus, const ExecOptions& o, TimedModes& timed) {
  const auto model = std::make_shared<const MoeModel<float>>(MoeModel<float>::load(path));
  if (o.batch < 2)
    throw Error(path + ": exec of a routed model needs --batch >= 2 (cross_input replays another window's routing), found " +
                std::to_string(o.batch));
  const MoeConfig& c = model->config();
  const int T = c.seq_len, B = o.batch, L = c.n_layer, D = c.d_model, E = c.n_expert, F = c.hidden();
  const auto timing = std::make_shared<const TokenWindows>(load_token_windows(corpus.split("test"), T, B));
  const TokenWindows eval = load_token_windows(corpus.split("test"), T, o.eval_windows);
  const auto rs = std::make_shared<MoeRunState<float>>(c, B, T, false);
  const auto rs_dense = std::make_shared<MoeRunState<float>>(c, B, T, false, true);
  // GEMM FLOPs of one pass: attention halves, the router (live), expert rows x (fc + proj), head.
  auto formula = [&](int64_t expert_rows, bool router) {
    return L * attention_half_flops(B, T, D) + (router ? 2.0 * B * T * D * E * L : 0.0) + 2.0 * 2.0 * double(expert_rows) * D * F +
           2.0 * B * T * D * kByteVocab;
  };
  // Counts of a pass: the router's arithmetic and one router evaluation per block when it runs, the
  // weighted combination of every routed row (2 D each), and the rows themselves.
  auto expected = [&](int64_t expert_rows, bool router) {
    return ExpectedCounts{L, formula(expert_rows, router), router ? moe_controller_flops(L, int64_t(B) * T, E, c.top_k) : 0.0,
                          2.0 * double(expert_rows) * D, router ? L : 0, expert_rows};
  };
  auto loads = [E](const MoeRunState<float>& s) { return expert_rows(s, E); };
  // The timed pass of a routing source on a run state.
  auto pass = [&](std::shared_ptr<MoeRoutingSource<float>> source, std::shared_ptr<MoeRunState<float>> state) {
    return [model, state, source, timing, B, T] { moe_forward(*model, *state, timing->inputs.data(), B, T, *source); };
  };
  const int64_t grouped_rows = int64_t(L) * B * T * c.top_k, dense_rows = int64_t(L) * B * T * E;
  nlohmann::ordered_json modes = nlohmann::ordered_json::array();
  const auto live = std::make_shared<MoeLiveRouting<float>>(*model);
  count_mode(modes, timed, "live", pass(live, rs), expected(grouped_rows, true), L, B * T);
  modes.back()["expert_rows"] = loads(*rs);
  modes.back()["nll"] = mean_window_nll(eval.count, B, [&](int w0, int n, double* out) {
    moe_forward(*model, *rs, eval.inputs.data() + int64_t(w0) * T, n, T, *live);
    moe_loss(*rs, eval.targets.data() + int64_t(w0) * T, out);
  });
  const auto recorded = std::make_shared<CoefficientTensor>(B, moe_record_shape(c, T));
  MoeRecordingRouting<float> recording(*model, *recorded);
  moe_forward(*model, *rs, timing->inputs.data(), B, T, recording);
  count_mode(modes, timed, "replay", pass(make_shared_owning<MoeReplayedRouting<float>>(recorded, c, *recorded), rs),
             expected(grouped_rows, false), L, B * T);
  modes.back()["expert_rows"] = loads(*rs);
  // cross_input: window b runs with the routing recorded on window (b+1) mod B (a derangement when
  // B >= 2): the expert loads change, so the latency is measured too.
  const auto crossed = std::make_shared<CoefficientTensor>(B, moe_record_shape(c, T));
  for (int b = 0; b < B; ++b) crossed->copy_window(b, recorded->view(), (b + 1) % B);
  count_mode(modes, timed, "cross_input", pass(make_shared_owning<MoeReplayedRouting<float>>(crossed, c, *crossed), rs),
             expected(grouped_rows, false), L, B * T);
  modes.back()["expert_rows"] = loads(*rs);
  count_mode(modes, timed, "dense_experts", pass(live, rs_dense), expected(dense_rows, true), L, B * T);
  modes.back()["nll"] = mean_window_nll(eval.count, B, [&](int w0, int n, double* out) {
    moe_forward(*model, *rs_dense, eval.inputs.data() + int64_t(w0) * T, n, T, *live);
    moe_loss(*rs_dense, eval.targets.data() + int64_t(w0) * T, out);
  });
  dense_same_shape(modes, timed, L, D, c.n_head, T, timing, B);
  count_dense_total_params(modes, timed, c, timing, B);
  nlohmann::ordered_json m = exec_model_entry(path, sha256_file(path), "moe", nlohmann::json::parse(c.to_json()), B * T);
  m["modes"] = modes;
  // The experts' share: grouped MLP FLOPs per token = k/E of dense_experts by construction of the
  // rows; the savings (written after timing) compare whole passes.
  m["expert_gflop_per_token"] = {{"grouped", 4.0 * D * F * c.top_k / 1e9}, {"dense_experts", 4.0 * D * F * E / 1e9}};
  for (size_t against : {3, 4, 5}) timed.add_saving(0, against);
  if (!o.skip_thresholds.empty()) m["skip_sweep_note"] = "not applicable: MoE blocks have no gate; routing decides the work";
  return m;
}


}  // namespace

ExecFamily moe_exec_family() {
  ExecFamily family{"moe", measure_moe, nullptr, nullptr, nullptr};
  family.legend =
      "MoE models: replay and cross_input supply recorded routing (cross_input: another window's), dense_experts runs "
      "every expert on every token and zeroes the unselected, and dense_total_params is the Dense model whose MLP has the "
      "MoE's expert parameters (initialised weights: latency and FLOPs only).";
  return family;
}

}  // namespace fca
