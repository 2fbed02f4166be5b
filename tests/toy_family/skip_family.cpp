// The skip family's entries in the three family tables and its AuditableModel, from the public
// pieces alone (as toy_family.cpp), plus what the toy does not declare: the block_skip record kind
// (skip_kind.cpp), the audit setting skip_gate_threshold (a ControllerSetting), the exec sweep
// skip_gate_thresholds and the counter skipped_rows, each declared in its entry so that `fca
// audit`, `fca exec`, a study, exec.json and exec.md take them up with no line of src/ naming them.
#include "toy_family/skip_family.h"

#include <algorithm>
#include <charconv>
#include <memory>

#include "core/error.h"
#include "core/sha256.h"
#include "exec/exec_family.h"
#include "families/families.h"
#include "models/capabilities.h"
#include "models/family_auditable.h"
#include "models/registry.h"
#include "toy_family/skip_kind.h"
#include "toy_family/skip_model.h"
#include "train/flat_trainable.h"
#include "train/train_family.h"

namespace fca::toy {
namespace {

// The family's one traits struct: what ByteLevelAuditable and FlatTrainable read, written once.
struct SkipTraits {
  using Model = SkipModel<float>;
  using Config = SkipConfig;
  using RunState = SkipRunState<float>;
  using Live = SkipLiveGates<float>;
  using Recording = SkipRecordingGates;
  using Replayed = SkipReplayedGates;
  static RunState run_state(const Model& m, int B, int T) { return RunState(m.config(), B, T, false); }
  static Replayed replayed(const Model& m, const CoefficientTensor& c) { return Replayed(m.config(), c); }
  static void forward(const Model& m, RunState& rs, const int32_t* x, int B, int T, SkipSource<float>& s, int first = 0) {
    skip_forward(m, rs, x, B, T, s, first);
  }
  static double loss(RunState& rs, const int32_t* y, double* window_nll) { return toy_loss(rs, y, window_nll); }
  static double loss(RunState& rs, const int32_t* y) { return toy_loss(rs, y, nullptr); }
  static double nll(RunState& rs, const int32_t* y, double* window_nll) { return toy_loss(rs, y, window_nll); }
  static void backward(const Model& m, RunState& rs, Model& grads, float scale) { skip_backward(m, rs, grads, scale); }
  static int seq_len(const Config& c) { return c.seq_len; }
  static constexpr const char* kFamily = "skip";
  static constexpr const char* kStaticProfile = "LayerRunMajority";
  static constexpr const char* kStructureRemoved = "RandomRuns";
  static CoefficientShape record_shape(const SkipConfig& c, int tokens) { return skip_record_shape(c, tokens); }
  static std::string describe(const SkipConfig& c) { return SkipSpec::describe(c); }
};

std::string number_text_exact(double v) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;  // the shortest text that reads back exactly
  return std::string(buf, end);
}

// The threshold as its controller setting (recorded in the cache), and the compute its records select.
class SkipAuditable : public ByteLevelAuditable<SkipTraits>, public ControllerSetting, public RecordDependentCompute {
 public:
  using ByteLevelAuditable::ByteLevelAuditable;
  std::string controller_setting() const override { return std::string(kSkipGateThreshold) + " " + number_text_exact(threshold_); }
  void set_controller_setting(const std::string& key, double value) override {
    if (key != kSkipGateThreshold) throw Error("skip models have no controller setting \"" + key + "\" (theirs: skip_gate_threshold)");
    if (!(value >= 0.0 && value <= 1.0)) throw Error("skip_gate_threshold must be in [0, 1], found " + number_text_exact(value));
    threshold_ = value;
  }
  void run_live(const int32_t* inputs, const int32_t* targets, int B, int T, CoefficientTensor* record, int record_first,
                double* window_nll) override {
    const PackedWeightsScope packed(&packed_);
    if (record != nullptr) {
      const CoefficientTensor expected = make_coefficients(1, T);  // the sink must be this family's record
      if (!(record->shape() == expected.shape()) || record->mask() != expected.mask())
        throw Error("recording sink: shape " + record->shape().to_string() + ", but a skip model's record for " +
                    std::to_string(T) + " tokens is " + expected.shape().to_string());
      SkipRecordingGates source(model_, threshold_, *record);
      skip_forward(model_, *rs_, inputs, B, T, source, record_first);
    } else {
      SkipLiveGates<float> source(model_, threshold_);
      skip_forward(model_, *rs_, inputs, B, T, source, 0);
    }
    toy_loss(*rs_, targets, window_nll);
  }
  RecordCompute record_compute(const CoefficientView& records, int windows) const override {
    const int L = records.shape.layers, T = records.shape.tokens;
    const int64_t N = int64_t(windows) * T;
    std::vector<uint8_t> ran(size_t(L) * size_t(N));  // [L][N] from the record's [window][layer][token]
    for (int w = 0; w < windows; ++w)
      for (int l = 0; l < L; ++l)
        for (int t = 0; t < T; ++t) ran[size_t(int64_t(l) * N + int64_t(w) * T + t)] = uint8_t(records.window_discrete(w)[int64_t(l) * T + t]);
    RecordCompute r;
    r.gemm_flops = skip_pass_figures(model_.config(), ran.data(), windows, T, false).gemm;
    r.prefix_gemm_flops = 0;  // no prefix reuse: every replay runs every block it runs
    r.tokens = N;
    for (uint8_t c : ran) r.token_blocks += c;
    return r;
  }
  std::vector<TraceTensor> trace_tensors(int B, int T, bool) const override {
    std::vector<TraceTensor> out;
    for (int l = 0; l <= model_.config().n_layer; ++l)
      out.push_back({"hidden." + std::to_string(l), {B, T, model_.config().d_model}, rs_->h(l)});
    return out;
  }

 private:
  double threshold_ = kDefaultSkipThreshold;
};

SkipConfig config_of(const ModelShape& shape, const nlohmann::json&, const std::string& where) {
  SkipConfig c = config_with_shape<SkipConfig>(shape);
  c.validate(where);
  return c;
}

// The objective in double for the conformance suite's gradient check: the mean NLL of a fixed batch
// at tau = 0.5. c = [g >= tau] is a step function of the gate, constant almost everywhere: a
// perturbation that flips a flag makes the finite difference meaningless (not the gradient wrong),
// so the objective refuses one, naming it.
GradientProbe skip_gradient_probe(const ModelShape& shape, const nlohmann::json& settings, uint64_t seed) {
  const SkipConfig c = config_of(shape, settings, "gradient probe");
  const auto s = perturbed_probe_state<SkipModel<double>, SkipRunState<double>>(c, c.seq_len, kVocab, seed);
  const int64_t flags = int64_t(c.n_layer) * s->batch.B * s->batch.T;
  const auto ran = std::make_shared<std::vector<uint8_t>>();  // of the last backward()
  auto backward = [s, ran, flags] {
    SkipLiveGates<double> live(*s->model);
    skip_forward(*s->model, s->train, s->batch.tokens.data(), s->batch.B, s->batch.T, live);
    toy_loss(s->train, s->batch.targets.data(), nullptr);
    ran->assign(s->train.ran.begin(), s->train.ran.begin() + flags);
    s->zero_gradients();
    skip_backward(*s->model, s->train, *s->grads, s->mean_scale());
  };
  auto objective = [s, ran] {
    SkipLiveGates<double> live(*s->model);
    skip_forward(*s->model, s->pass, s->batch.tokens.data(), s->batch.B, s->batch.T, live);
    if (!std::equal(ran->begin(), ran->end(), s->pass.ran.begin()))
      throw Error("skip gradient probe: a perturbation flipped a ran flag (the check sits on the threshold)");
    return toy_loss(s->pass, s->batch.targets.data(), nullptr);
  };
  return buffer_gradient_probe(s->model, s->grads, objective, backward);
}

// What a pass with these ran flags [L][N] must count (live: the controller ran).
ExpectedCounts expected_counts(const SkipConfig& c, const std::vector<uint8_t>& ran, int B, int T, bool live) {
  const SkipPassFigures f = skip_pass_figures(c, ran.data(), B, T, live);
  ExpectedCounts e;
  e.blocks = c.n_layer;
  e.gemm_flops = f.gemm;
  e.controller_flops = f.controller;
  e.mixing_flops = f.mixing;
  e.controller_evaluations = live ? c.n_layer : 0;
  e.family[kSkippedRows] = f.skipped_rows;
  return e;
}

// exec: live at tau = 0.5, replay of its record, every_block (the record's gates, every flag 1),
// skip_gate_<tau> for each tau of the sweep (--skip-gate-thresholds), and the shared Dense baseline.
nlohmann::ordered_json measure_skip(const std::string& path, const Corpus& corpus, const ExecOptions& o, TimedModes& timed) {
  const auto model = std::make_shared<const SkipModel<float>>(SkipModel<float>::load(path));
  const SkipConfig& c = model->config();
  const int T = c.seq_len, B = o.batch, L = c.n_layer;
  const auto timing = std::make_shared<const TokenWindows>(load_token_windows(corpus.split("test"), T, B));
  const TokenWindows eval = load_token_windows(corpus.split("test"), T, o.eval_windows);
  const auto rs = std::make_shared<SkipRunState<float>>(c, B, T, false);
  nlohmann::ordered_json modes = nlohmann::ordered_json::array();
  // One configuration: a pass (run once first for the ran flags its counts are expected from), and
  // its NLL on the evaluation windows.
  auto mode = [&](const std::string& name, std::shared_ptr<SkipSource<float>> source, bool live) {
    auto pass = [model, rs, source, timing, B, T] { skip_forward(*model, *rs, timing->inputs.data(), B, T, *source); };
    pass();
    const std::vector<uint8_t> ran(rs->ran.begin(), rs->ran.begin() + int64_t(L) * B * T);
    count_mode(modes, timed, name, pass, expected_counts(c, ran, B, T, live), L, B * T);
    modes.back()["nll"] = mean_window_nll(eval.count, B, [&](int w0, int n, double* out) {
      skip_forward(*model, *rs, eval.inputs.data() + int64_t(w0) * T, n, T, *source);
      toy_loss(*rs, eval.targets.data() + int64_t(w0) * T, out);
    });
  };
  mode("live", std::make_shared<SkipLiveGates<float>>(*model), true);
  const auto recorded = std::make_shared<CoefficientTensor>(B, skip_record_shape(c, T));
  SkipRecordingGates recording(*model, kDefaultSkipThreshold, *recorded);
  skip_forward(*model, *rs, timing->inputs.data(), B, T, recording);
  mode("replay", make_shared_owning<SkipReplayedGates>(recorded, c, *recorded), false);
  const auto every = std::make_shared<CoefficientTensor>(*recorded);
  std::fill(every->discrete().begin(), every->discrete().end(), 1);
  mode("every_block", make_shared_owning<SkipReplayedGates>(every, c, *every), false);
  for (double tau : exec_setting(o, exec_family_named("skip"), kSkipGateThresholds))
    mode("skip_gate_" + number_text_exact(tau), std::make_shared<SkipLiveGates<float>>(*model, tau), true);
  dense_same_shape(modes, timed, L, c.d_model, 1, T, timing, B);
  nlohmann::ordered_json m =
      exec_model_entry(path, sha256_file(path), "skip", nlohmann::json::parse(c.to_json()), int64_t(B) * T);
  m["modes"] = modes;
  return m;
}

ModelFamily skip_model_family() {
  ModelFamily family{"skip", kSkipFormat, [](const std::string&, const std::string& format) { return format == kSkipFormat; },
                     [](const std::string& path, int batch, int tokens) -> std::unique_ptr<AuditableModel> {
                       return std::make_unique<SkipAuditable>(path, batch, tokens);
                     },
                     [](const nlohmann::json&) { return std::string("skip"); }, nullptr, nullptr};
  family.audit_settings = {{kSkipGateThreshold,
                            "Skip models (the test binary's family): the gate threshold tau in [0, 1] of the live pass "
                            "and its records (default 0.5), recorded in the cache",
                            0.0, 1.0}};
  return family;
}

ExecFamily skip_exec_family() {
  ExecFamily family{"skip", measure_skip};
  family.legend =
      "Skip models (the test binary's family): every_block replays the record's gates with every ran flag 1, and "
      "skip_gate_<tau> runs the live gate at tau (--skip-gate-thresholds).";
  family.counters = {{kSkippedRows, "rows whose block the skip gate left out, summed over blocks (tests/toy_family/skip_model.h)"}};
  family.exec_settings = {{kSkipGateThresholds, "Skip models (the test binary's family): comma-separated gate thresholds tau in "
                                                "[0, 1] of the skip sweep",
                           0.0, 1.0, true, {0.3, 0.7}}};
  return family;
}

}  // namespace

void install_skip_family() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  install_block_skip_kind();
  TrainFamily train;
  train.name = "skip";
  train.description = "skip: the test binary's second family, with its own record kind, setting and counter (tests/toy_family/)";
  train.files = single_file_checkpoint;
  train.gradient_probe = skip_gradient_probe;
  set_constructors<SkipConfig>(train, config_of, [](const SkipConfig& c, const TrainableArgs& args) {
    return std::unique_ptr<Trainable>(std::make_unique<FlatTrainable<SkipTraits>>(c, args.seed, args.batch, args.adamw, args.clip));
  });
  install_family({skip_model_family(), std::move(train), skip_exec_family()});
}

}  // namespace fca::toy
