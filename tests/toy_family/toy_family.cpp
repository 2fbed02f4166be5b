// The toy family's entries in the three family tables (models/registry.h, train/train_family.h,
// exec/exec_family.h), installed with one call (families/families.h), and its AuditableModel, each written from the public pieces a family of
// fca's own would use: ByteLevelAuditable (names from traits, runs from FamilyAuditable), FlatTrainable
// (optimizer steps, validation, checkpoints), count_mode / dense_same_shape / mean_window_nll
// (exec), and the generic recording and replayed sources (models/base/recorded_source.h).
#include "toy_family/toy_family.h"

#include <memory>

#include "core/sha256.h"
#include "exec/exec_family.h"
#include "families/families.h"
#include "models/family_auditable.h"
#include "models/registry.h"
#include "toy_family/toy_model.h"
#include "train/flat_trainable.h"
#include "train/train_family.h"

namespace fca::toy {
namespace {

// The family's one traits struct: what ByteLevelAuditable (the audit interface) and FlatTrainable
// (training) read, each member written once.
struct ToyTraits {
  using Model = ToyModel<float>;
  using Config = ToyConfig;
  using RunState = ToyRunState<float>;
  using Live = ToyLiveGates<float>;
  using Recording = ToyRecordingGates<float>;
  using Replayed = ToyReplayedGates<float>;
  static RunState run_state(const Model& m, int B, int T) { return RunState(m.config(), B, T, false); }
  static Replayed replayed(const Model&, const CoefficientTensor& c) { return Replayed(c); }
  static void forward(const Model& m, RunState& rs, const int32_t* x, int B, int T, ToyGateSource<float>& s, int first = 0) {
    toy_forward(m, rs, x, B, T, s, first);
  }
  static double loss(RunState& rs, const int32_t* y, double* window_nll) { return toy_loss(rs, y, window_nll); }
  static double loss(RunState& rs, const int32_t* y) { return toy_loss(rs, y, nullptr); }
  static double nll(RunState& rs, const int32_t* y, double* window_nll) { return toy_loss(rs, y, window_nll); }
  static void backward(const Model& m, RunState& rs, Model& grads, float scale) { toy_backward(m, rs, grads, scale); }
  static int64_t add_gates(RunState& rs, int B, int T, double& sum) {
    const int64_t n = int64_t(rs.L) * B * T;
    for (int64_t i = 0; i < n; ++i) sum += double(rs.gates[size_t(i)]);
    return n;
  }
  static int seq_len(const Config& c) { return c.seq_len; }
  static constexpr const char* kFamily = "toy";
  static constexpr const char* kStaticProfile = "LayerMean";
  static constexpr const char* kStructureRemoved = "GlobalMean";
  static CoefficientShape record_shape(const ToyConfig& c, int tokens) { return toy_record_shape(c, tokens); }
  static std::string describe(const ToyConfig& c) { return ToySpec::describe(c); }
};

// A continuous record of gates: the identity is g = 1 (every block's full update), structure
// removed is one scalar (the mean of the layer means), and the gate mass is reported.
class ToyAuditable : public ByteLevelAuditable<ToyTraits> {
 public:
  using ByteLevelAuditable::ByteLevelAuditable;
  bool coefficients_are_gates() const override { return true; }
  bool batch_invariant() const override { return true; }  // every row computed from itself alone
  void identity_profile(CoefficientTensor& out) const override {
    std::fill(out.window_data(0), out.window_data(0) + out.shape().per_window(), 1.0f);
  }
  void structure_removed_profile(const CoefficientTensor& static_profile, CoefficientTensor& out) const override {
    double sum = 0;
    for (int l = 0; l < static_profile.shape().layers; ++l) sum += static_profile.at(0, l, 0);
    std::fill(out.window_data(0), out.window_data(0) + out.shape().per_window(), float(sum / static_profile.shape().layers));
  }
  std::vector<TraceTensor> trace_tensors(int B, int T, bool) const override {
    std::vector<TraceTensor> out;
    for (int l = 0; l <= model_.config().n_layer; ++l)
      out.push_back({"hidden." + std::to_string(l), {B, T, model_.config().d_model}, rs_->h(l)});
    return out;
  }
};

ToyConfig config_of(const ModelShape& shape, const nlohmann::json&, const std::string& where) {
  ToyConfig c = config_with_shape<ToyConfig>(shape);
  c.validate(where);
  return c;
}

// The objective in double for the conformance suite's gradient check: the mean NLL of a fixed
// batch, on a model away from its initialisation.
GradientProbe toy_gradient_probe(const ModelShape& shape, const nlohmann::json& settings, uint64_t seed) {
  const ToyConfig c = config_of(shape, settings, "gradient probe");
  const auto s = perturbed_probe_state<ToyModel<double>, ToyRunState<double>>(c, c.seq_len, kVocab, seed);
  auto backward = [s] {
    ToyLiveGates<double> live(*s->model);
    toy_forward(*s->model, s->train, s->batch.tokens.data(), s->batch.B, s->batch.T, live);
    toy_loss(s->train, s->batch.targets.data(), nullptr);
    s->zero_gradients();
    toy_backward(*s->model, s->train, *s->grads, s->mean_scale());
  };
  auto objective = [s] {
    ToyLiveGates<double> live(*s->model);
    toy_forward(*s->model, s->pass, s->batch.tokens.data(), s->batch.B, s->batch.T, live);
    return toy_loss(s->pass, s->batch.targets.data(), nullptr);
  };
  return buffer_gradient_probe(s->model, s->grads, objective, backward);
}

// exec: live (the controller runs), replay (recorded gates, no controller), gates_forced_to_1 (the
// identity), and the shared Dense baseline of the same shape (heads: the toy has none, so 1).
nlohmann::ordered_json measure_toy(const std::string& path, const Corpus& corpus, const ExecOptions& o, TimedModes& timed) {
  const auto model = std::make_shared<const ToyModel<float>>(ToyModel<float>::load(path));
  const ToyConfig& c = model->config();
  const int T = c.seq_len, B = o.batch, L = c.n_layer;
  const auto timing = std::make_shared<const TokenWindows>(load_token_windows(corpus.split("test"), T, B));
  const TokenWindows eval = load_token_windows(corpus.split("test"), T, o.eval_windows);
  const auto rs = std::make_shared<ToyRunState<float>>(c, B, T, false);
  const ExpectedCounts live_counts{L, toy_gemm_flops(c, B, T), toy_controller_flops(c, B, T), toy_mixing_flops(c, B, T), L, 0};
  ExpectedCounts replay_counts = live_counts;
  replay_counts.controller_flops = 0;
  replay_counts.controller_evaluations = 0;
  auto pass = [&](std::shared_ptr<ToyGateSource<float>> source) {
    return [model, rs, source, timing, B, T] { toy_forward(*model, *rs, timing->inputs.data(), B, T, *source); };
  };
  nlohmann::ordered_json modes = nlohmann::ordered_json::array();
  const auto live = std::make_shared<ToyLiveGates<float>>(*model);
  count_mode(modes, timed, "live", pass(live), live_counts, L, B * T);
  modes.back()["nll"] = mean_window_nll(eval.count, B, [&](int w0, int n, double* out) {
    toy_forward(*model, *rs, eval.inputs.data() + int64_t(w0) * T, n, T, *live);
    toy_loss(*rs, eval.targets.data() + int64_t(w0) * T, out);
  });
  const auto recorded = std::make_shared<CoefficientTensor>(B, toy_record_shape(c, T));
  ToyRecordingGates<float> recording(*model, *recorded);
  toy_forward(*model, *rs, timing->inputs.data(), B, T, recording);
  count_mode(modes, timed, "replay", pass(make_shared_owning<ToyReplayedGates<float>>(recorded, *recorded)), replay_counts, L, B * T);
  const auto ones = std::make_shared<CoefficientTensor>(B, toy_record_shape(c, T));
  std::fill(ones->values().begin(), ones->values().end(), 1.0f);
  count_mode(modes, timed, "gates_forced_to_1", pass(make_shared_owning<ToyReplayedGates<float>>(ones, *ones)), replay_counts, L,
             B * T);
  dense_same_shape(modes, timed, L, c.d_model, 1, T, timing, B);
  nlohmann::ordered_json m = exec_model_entry(path, sha256_file(path), "toy", nlohmann::json::parse(c.to_json()), int64_t(B) * T);
  m["modes"] = modes;
  return m;
}

}  // namespace

void install_toy_family() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  TrainFamily train;
  train.name = "toy";
  train.description = "toy: the test binary's family written against the public family API (tests/toy_family/)";
  train.files = single_file_checkpoint;
  train.gradient_probe = toy_gradient_probe;
  set_constructors<ToyConfig>(train, config_of, [](const ToyConfig& c, const TrainableArgs& args) {
    return std::unique_ptr<Trainable>(std::make_unique<FlatTrainable<ToyTraits>>(c, args.seed, args.batch, args.adamw, args.clip));
  });
  install_family({{"toy", kToyFormat, [](const std::string&, const std::string& format) { return format == kToyFormat; },
                   [](const std::string& path, int batch, int tokens) -> std::unique_ptr<AuditableModel> {
                     return std::make_unique<ToyAuditable>(path, batch, tokens);
                   },
                   [](const nlohmann::json&) { return std::string("toy"); }, nullptr, nullptr},
                  std::move(train),
                  {.name = "toy", .measure = measure_toy, .legend = "Toy models (the test binary's family): gates_forced_to_1 sets every g = 1."}});
}

}  // namespace fca::toy
