#include "models/mod/exec/measure.h"

#include <functional>
#include <memory>

#include "core/error.h"
#include "core/exec_counters.h"
#include "core/sha256.h"
#include "models/mod/forward.h"
#include "models/base/stream.h"

namespace fca {
namespace {

nlohmann::ordered_json measure_mod(const std::string& path, const Corpus& corpus, const ExecOptions& o, TimedModes& timed) {
  const auto model = std::make_shared<const ModModel<float>>(ModModel<float>::load(path));
  if (o.batch < 2)
    throw Error(path + ": exec of a routed model needs --batch >= 2 (cross_input replays another window's routing), found " +
                std::to_string(o.batch));
  const ModConfig& c = model->config();
  const int T = c.seq_len, B = o.batch, L = c.n_layer, D = c.d_model, K = c.selected_tokens(T);
  const auto timing = std::make_shared<const TokenWindows>(load_token_windows(corpus.split("test"), T, B));
  const TokenWindows eval = load_token_windows(corpus.split("test"), T, o.eval_windows);
  const auto rs = std::make_shared<ModRunState<float>>(c, B, T, false);
  // Dense blocks over T tokens; routed blocks over their K tokens (the block's own attention pairs).
  double formula = 2.0 * B * T * D * kByteVocab;
  for (int l = 0; l < L; ++l) {
    const int n = c.routed(l) ? K : T;
    formula += attention_half_flops(B, n, D) + 2.0 * B * n * 8.0 * D * D;
  }
  // Routed blocks: the router's scores (2 D + 1 per token) and the selected rows' sigmoid weights
  // (4 each) and one router evaluation when it runs; h + w F on the selected rows (2 D each), K rows
  // per window.
  const double routed = c.routed_layers();
  const ExpectedCounts live_counts{L,
                                   formula,
                                   routed * (double(B) * T * (2.0 * D + 1.0) + double(B) * K * 4.0),
                                   routed * 2.0 * double(B) * K * D,
                                   int64_t(c.routed_layers()),
                                   int64_t(c.routed_layers()) * B * K};
  ExpectedCounts replay_counts = live_counts;
  replay_counts.controller_flops = 0;
  replay_counts.controller_evaluations = 0;
  auto pass = [&](std::shared_ptr<ModRoutingSource<float>> source) {
    return [model, rs, source, timing, B, T] { mod_forward(*model, *rs, timing->inputs.data(), B, T, *source); };
  };
  nlohmann::ordered_json modes = nlohmann::ordered_json::array();
  const auto live = std::make_shared<ModLiveRouting<float>>(*model);
  count_mode(modes, timed, "live", pass(live), live_counts, L, B * T);
  modes.back()["nll"] = mean_window_nll(eval.count, B, [&](int w0, int n, double* out) {
    mod_forward(*model, *rs, eval.inputs.data() + int64_t(w0) * T, n, T, *live);
    mod_loss(*rs, eval.targets.data() + int64_t(w0) * T, out);
  });
  const auto recorded = std::make_shared<CoefficientTensor>(B, mod_record_shape(c, T));
  ModRecordingRouting<float> recording(*model, *recorded);
  mod_forward(*model, *rs, timing->inputs.data(), B, T, recording);
  count_mode(modes, timed, "replay", pass(make_shared_owning<ModReplayedRouting<float>>(recorded, c, *recorded)), replay_counts, L, B * T);
  const auto crossed = std::make_shared<CoefficientTensor>(B, mod_record_shape(c, T));
  for (int b = 0; b < B; ++b) crossed->copy_window(b, recorded->view(), (b + 1) % B);
  count_mode(modes, timed, "cross_input", pass(make_shared_owning<ModReplayedRouting<float>>(crossed, c, *crossed)), replay_counts, L,
             B * T);
  dense_same_shape(modes, timed, L, D, c.n_head, T, timing, B);
  nlohmann::ordered_json m = exec_model_entry(path, sha256_file(path), "mod", nlohmann::json::parse(c.to_json()), B * T);
  m["selected_tokens_per_window"] = K;
  m["modes"] = modes;
  timed.add_saving(0, 3);
  if (!o.skip_thresholds.empty()) m["skip_sweep_note"] = "not applicable: MoD routing already skips tokens";
  return m;
}


}  // namespace

ExecFamily mod_exec_family() {
  ExecFamily family{"mod", measure_mod, nullptr, nullptr, nullptr};
  family.legend =
      "MoD models: replay and cross_input supply a recorded token selection (cross_input: another window's).";
  return family;
}

}  // namespace fca
