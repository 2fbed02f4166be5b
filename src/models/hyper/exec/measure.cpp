#include "models/hyper/exec/measure.h"

#include <memory>

#include "core/error.h"
#include "core/sha256.h"
#include "models/hyper/forward.h"
#include "models/base/stream.h"

namespace fca {

double hyper_gemm_flops(const HyperConfig& c, int B, int T) {
  const double N = double(B) * T, D = c.d_model;
  // Per block: the attention half (qkv, proj, the executed QK^T and PV pairs) and the MLP (fc and
  // proj, 8 D^2 multiply-adds per row); the tied head over the 256 bytes.
  return c.n_layer * (attention_half_flops(B, T, c.d_model) + 2.0 * N * 8.0 * D * D) + 2.0 * N * D * kByteVocab;
}

double hyper_mixing_flops(const HyperConfig& c, int B, int T) {
  const double N = double(B) * T, D = c.d_model, n = c.streams;
  // Per site and token: the read D (2n - 1), the write and mix n D (2n + 1); the collapse D (n - 1).
  return c.sites() * N * D * (2 * n * n + 3 * n - 1) + N * D * (n - 1);
}

double hyper_controller_flops(const HyperConfig& c, int B, int T) {
  const double N = double(B) * T, D = c.d_model, n = c.streams;
  switch (c.variant) {
    case HyperVariant::shc:
      return 0;  // a copy of the static square
    case HyperVariant::dhc:
      // z = W LN0(X_i): n rows of D x (n + 2) per token.
      return c.sites() * N * (2.0 * n * D * (n + 2) + double(hyper_dhc_controller_flops_per_token(c)));
    case HyperVariant::mhc:
      // z = Phi vec(X): one row of n D x (n^2 + 2n) per token.
      return c.sites() * N * (2.0 * n * D * c.valid_entries() + double(hyper_mhc_controller_flops_per_token(c)));
  }
  return 0;
}

namespace {

nlohmann::ordered_json measure_hyper(const std::string& path, const Corpus& corpus, const ExecOptions& o, TimedModes& timed) {
  const auto model = std::make_shared<const HyperModel<float>>(load_hyper_model(path));
  if (o.batch < 2)
    throw Error(path + ": exec of a hyper-connection model needs --batch >= 2 (cross_input replays another window's "
                       "coefficients), found " + std::to_string(o.batch));
  const HyperConfig& c = model->config();
  const int T = c.seq_len, B = o.batch, L = c.n_layer;
  const auto timing = std::make_shared<const TokenWindows>(load_token_windows(corpus.split("test"), T, B));
  const TokenWindows eval = load_token_windows(corpus.split("test"), T, o.eval_windows);
  const auto rs = std::make_shared<HyperRunState<float>>(c, B, T, false);
  const ExpectedCounts live_counts{L, hyper_gemm_flops(c, B, T), hyper_controller_flops(c, B, T), hyper_mixing_flops(c, B, T),
                                   int64_t(c.sites()), 0};
  ExpectedCounts replay_counts = live_counts;
  replay_counts.controller_flops = 0;
  replay_counts.controller_evaluations = 0;
  auto pass = [&](std::shared_ptr<HyperCoefficientSource<float>> source) {
    return [model, rs, source, timing, B, T] { hyper_forward(*model, *rs, timing->inputs.data(), B, T, *source); };
  };
  auto nll_of = [&](HyperCoefficientSource<float>& source) {
    return mean_window_nll(eval.count, B, [&](int w0, int n, double* out) {
      hyper_forward(*model, *rs, eval.inputs.data() + int64_t(w0) * T, n, T, source, w0);
      hyper_loss(*rs, eval.targets.data() + int64_t(w0) * T, out);
    });
  };
  nlohmann::ordered_json modes = nlohmann::ordered_json::array();
  const auto live = std::make_shared<HyperLiveCoefficients<float>>(*model);
  count_mode(modes, timed, "live", pass(live), live_counts, L, B * T);
  modes.back()["nll"] = nll_of(*live);
  const auto recorded = std::make_shared<CoefficientTensor>(hyper_coefficient_tensor(c, B, T));
  HyperRecordingCoefficients<float> recording(*model, *recorded);
  hyper_forward(*model, *rs, timing->inputs.data(), B, T, recording);
  count_mode(modes, timed, "replay", pass(make_shared_owning<HyperReplayedCoefficients<float>>(recorded, *recorded)), replay_counts,
             L, B * T);
  const auto crossed = std::make_shared<CoefficientTensor>(hyper_coefficient_tensor(c, B, T));
  for (int b = 0; b < B; ++b) crossed->copy_window(b, recorded->view(), (b + 1) % B);
  count_mode(modes, timed, "cross_input", pass(make_shared_owning<HyperReplayedCoefficients<float>>(crossed, *crossed)),
             replay_counts, L, B * T);
  // The identity squares for every evaluation window (replay indexes windows by their position).
  const auto identity = std::make_shared<CoefficientTensor>(hyper_coefficient_tensor(c, std::max(B, eval.count), T));
  for (int w = 0; w < identity->windows(); ++w) fill_hyper_identity(c, *identity, w);
  const auto identity_source = make_shared_owning<HyperReplayedCoefficients<float>>(identity, *identity);
  count_mode(modes, timed, "identity_mixing", pass(identity_source), replay_counts, L, B * T);
  modes.back()["nll"] = nll_of(*identity_source);
  dense_same_shape(modes, timed, L, c.d_model, c.n_head, T, timing, B);
  nlohmann::ordered_json m = exec_model_entry(path, sha256_file(path), "hyper", nlohmann::json::parse(c.to_json()), B * T);
  m["modes"] = modes;
  timed.add_saving(0, 4);  // live against dense_same_shape: what the streams and the controller cost
  if (!o.skip_thresholds.empty()) m["skip_sweep_note"] = "not applicable: every sub-block of a hyper-connection model runs";
  return m;
}

}  // namespace

ExecFamily hyper_exec_family() {
  ExecFamily family{"hyper", measure_hyper, nullptr, nullptr, nullptr};
  family.legend =
      "Hyper-connection models: identity_mixing makes every square the identity of its initialisation (plain Pre-Norm; "
      "the mixing still runs).";
  return family;
}

}  // namespace fca
