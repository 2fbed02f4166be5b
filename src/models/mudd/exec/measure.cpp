#include "models/mudd/exec/measure.h"

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "core/exec_counters.h"
#include "models/mudd/exec/flops.h"
#include "models/mudd/forward.h"

namespace fca {
namespace {

// A MUDD folder: every block and DA module always runs. Modes: live (the DA generators compute alpha),
// replay (recorded alpha supplied), identity (one-hot newest source: a plain residual stream, with
// the mixing still executed). FLOPs and blocks from the counters.
nlohmann::ordered_json measure_mudd(const std::string& path, const Corpus& corpus, const ExecOptions& o, TimedModes& timed) {
  const auto model = std::make_shared<const MuddModel<float>>(MuddModel<float>::load(path, /*in_place=*/true));
  const MuddConfig& c = model->config();
  if (c.vocab_size != 256) throw Error(path + ": exec measures byte-level MUDD models (vocab 256) on text windows");
  const int T = c.block_size, B = o.batch;
  const auto rs = std::make_shared<MuddRunState<float>>(c, B, T);
  const auto timing = std::make_shared<const TokenWindows>(load_token_windows(corpus.split("test"), T, B));
  const TokenWindows eval = load_token_windows(corpus.split("test"), T, o.eval_windows);
  nlohmann::ordered_json m =
      exec_model_entry(path, model->content_hash(), "mudd",
                       {{"n_layer", c.n_layer}, {"d_model", c.dim}, {"n_head", c.n_head}, {"seq_len", c.block_size}}, B * T);
  if (!o.skip_thresholds.empty()) m["skip_sweep_note"] = "not applicable: MUDD mixes every source; no block has a gate";
  auto nll_of = [&](MuddCoefficientSource<float>& source) {
    std::vector<double> nll(static_cast<size_t>(eval.count));
    for (int w0 = 0; w0 < eval.count; w0 += B) {
      const int n = std::min(B, eval.count - w0);
      mudd_forward(*model, *rs, eval.inputs.data() + int64_t(w0) * T, n, T, source, w0);
      mudd_loss(*rs, eval.targets.data() + int64_t(w0) * T, nll.data() + w0);
    }
    double s = 0;
    for (double v : nll) s += v;
    return s / eval.count;
  };
  nlohmann::ordered_json modes = nlohmann::ordered_json::array();
  auto one = [&](const std::string& mode, std::shared_ptr<MuddCoefficientSource<float>> source, bool live_generator, bool with_nll) {
    ExecCounters counters;
    {
      CountingScope scope(counters);
      mudd_forward(*model, *rs, timing->inputs.data(), B, T, *source);
    }
    const ExpectedCounts expected{c.n_layer,
                                  mudd_gemm_flops(c, B, T, live_generator),
                                  live_generator ? mudd_controller_flops(c, B, T) : 0.0,
                                  mudd_mixing_flops(c, B, T),
                                  live_generator ? mudd_controller_evaluations(c) : 0,
                                  0};
    check_counters(mode, counters, expected);
    nlohmann::ordered_json j{{"mode", mode}, {"total_blocks", c.n_layer}};
    j.update(counter_fields(counters, expected, int64_t(B) * T));
    if (with_nll) j["nll"] = nll_of(*source);
    timed.add("modes", modes.size(), [model, rs, timing, source, B, T] { mudd_forward(*model, *rs, timing->inputs.data(), B, T, *source); });
    modes.push_back(j);
  };
  one("live", std::make_shared<MuddLiveCoefficients<float>>(*model), true, true);
  auto recorded = std::make_shared<CoefficientTensor>(make_mudd_coefficients(c, B, T));
  MuddRecordingCoefficients<float> recording(*model, *recorded);
  mudd_forward(*model, *rs, timing->inputs.data(), B, T, recording);
  one("replay", make_shared_owning<MuddReplayedCoefficients<float>>(recorded, *recorded), false, false);
  auto identity = std::make_shared<CoefficientTensor>(make_mudd_coefficients(c, std::max(B, eval.count), T));
  for (int w = 0; w < identity->windows(); ++w)
    for (int l = 0; l < c.n_layer; ++l)
      for (int t = 0; t < T; ++t)
        for (int st = 0; st < c.streams(l); ++st) identity->at(w, l, t, st, l + 1) = 1.0f;
  one("identity_mixing", make_shared_owning<MuddReplayedCoefficients<float>>(identity, *identity), false, true);
  m["modes"] = modes;
  return m;
}

}  // namespace

ExecFamily mudd_exec_family() {
  ExecFamily family{"mudd", measure_mudd, nullptr, nullptr, nullptr};
  family.legend =
      "MUDD models: identity_mixing lets every stream take only the newest source (the mixing still runs).";
  return family;
}

}  // namespace fca
