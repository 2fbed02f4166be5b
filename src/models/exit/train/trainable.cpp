#include "models/exit/train/trainable.h"

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "train/adamw.h"

namespace fca {

ExitTrainable::ExitTrainable(const ExitConfig& config, const TrainableArgs& args)
    : model_(ExitModel<float>::initialized(config, args.seed)),
      args_(args),
      trunk_(model_, args.batch, config.seq_len, args.adamw, args.clip) {
  const auto& slots = model_.layout();
  const auto weight = std::find_if(slots.begin(), slots.end(), [](const TensorSlot& s) { return s.name == "exit.weight"; });
  if (weight == slots.end() || slots.back().name != "exit.bias")
    throw Error("exit layout: exit.weight and exit.bias must be the last tensors");
  probe_offset_ = weight->offset;
  probe_size_ = model_.buffer_size() - probe_offset_;
  for (auto it = weight; it != slots.end(); ++it) {
    TensorSlot s = *it;
    s.offset -= probe_offset_;
    probe_layout_.push_back(s);
  }
}

nlohmann::ordered_json ExitTrainable::config_json() const { return nlohmann::ordered_json::parse(model_.config().to_json()); }

size_t ExitTrainable::parameter_count() const { return layout_parameter_count(model_.layout()); }

ValidStats ExitTrainable::validate(const TextSplit& valid, int64_t windows, int batch) {
  const int T = model_.config().seq_len;
  const auto idx = evenly_spaced_windows(valid.window_count(T), windows, valid.name());
  ExitTrainState<float> rs(model_.config(), batch, T, false);
  std::vector<int32_t> inputs(size_t(batch) * T), targets(size_t(batch) * T);
  std::vector<double> nll(idx.size());
  for (size_t w0 = 0; w0 < idx.size(); w0 += size_t(batch)) {
    const int B = int(std::min<size_t>(size_t(batch), idx.size() - w0));
    for (int b = 0; b < B; ++b)
      valid.window(idx[w0 + size_t(b)], T, inputs.data() + int64_t(b) * T, targets.data() + int64_t(b) * T);
    exit_trunk_forward(model_, rs, inputs.data(), B, T);
    exit_trunk_loss(rs, targets.data(), nll.data() + w0);
  }
  double s = 0;
  for (double v : nll) s += v;
  return {s / double(nll.size()), -1.0, int64_t(nll.size())};
}

std::vector<TrainPhase> ExitTrainable::later_phases() const {
  // Phase 2 (docs/exit.md, "Training"): lr 1e-2 with cosine decay to 10%, batches from seed + 1.
  return {TrainPhase{"exit_heads", model_.config().exit_head_steps, 1e-2, 0.1, 1}};
}

StepStats ExitTrainable::phase_step(size_t phase, const int32_t* inputs, const int32_t* targets, double lr) {
  if (phase != 0) throw Error("exit models have one later phase (exit_heads), not phase " + std::to_string(phase));
  const int B = args_.batch, T = model_.config().seq_len;
  if (!probe_state_) {
    probe_state_ = std::make_unique<ExitTrainState<float>>(model_.config(), B, T, false);
    AdamWOptions options = args_.adamw;
    options.beta1 = 0.9;
    options.beta2 = 0.95;
    options.weight_decay = 0;
    probe_optimizer_ = std::make_unique<AdamW>(probe_layout_, probe_size_, options);
    probe_grads_.assign(probe_size_, 0.0f);
  }
  std::fill(probe_grads_.begin(), probe_grads_.end(), 0.0f);
  exit_trunk_forward(model_, *probe_state_, inputs, B, T);
  (void)targets;  // the labels are the full-depth predictions, not the next bytes
  const float scale = 1.0f / float(int64_t(B) * T);
  const size_t bias_offset = probe_layout_.back().offset;
  const double loss = exit_probe_loss(model_, *probe_state_, probe_grads_.data(), probe_grads_.data() + bias_offset, scale);
  StepStats stats{loss, 0};
  stats.grad_norm = clip_and_step(*probe_optimizer_, model_.data() + probe_offset_, probe_grads_.data(), probe_size_, loss,
                                  args_.clip, lr);
  return stats;
}

void ExitTrainable::load(const std::string& out) {
  const ExitModel<float> loaded = ExitModel<float>::load(out);
  if (!(loaded.config() == model_.config()))
    throw Error(out + ": the checkpoint's model config differs from the flags' (checkpoint " + loaded.config().to_json() +
                ", flags " + model_.config().to_json() + ")");
  std::copy(loaded.data(), loaded.data() + loaded.buffer_size(), model_.data());
}

namespace {

ExitConfig config_of(const ModelShape& shape, const nlohmann::json& settings, const std::string& where) {
  ExitConfig c = config_with_shape<ExitConfig>(shape);
  c.min_exit = settings.at("min_exit").get<int>();
  c.exit_threshold = settings.at("exit_threshold").get<double>();
  c.exit_head_steps = settings.at("exit_head_steps").get<int>();
  c.validate(where);
  return c;
}

// The objective in double for the conformance suite's gradient check (train/gradient_probe.h), both
// phases at once: J = J_LM (phase 1: every exit point's cross-entropy, a function of the trunk) +
// J_exit (phase 2: the classifiers' loss on the frozen trunk). Phase 2 treats the trunk's states as
// constants, so the objective holds them at the last backward()'s pass: perturbing a trunk tensor
// moves J_LM only, perturbing exit.* moves J_exit only, as the backward passes have it.
GradientProbe exit_gradient_probe(const ModelShape& shape, const nlohmann::json& settings, uint64_t seed) {
  const ExitConfig c = config_of(shape, settings, "gradient probe");
  // train: the last backward()'s pass, whose trunk states phase 2 holds constant.
  const auto s = perturbed_probe_state<ExitModel<double>, ExitTrainState<double>>(c, c.seq_len, kByteVocab, seed);
  const auto scratch = std::make_shared<ExitModel<double>>(c);  // phase 2's gradients while the objective evaluates J_exit
  auto backward = [s] {
    exit_trunk_forward(*s->model, s->train, s->batch.tokens.data(), s->batch.B, s->batch.T);
    exit_trunk_loss(s->train, s->batch.targets.data());
    s->zero_gradients();
    exit_trunk_backward(*s->model, s->train, *s->grads, s->mean_scale());
    exit_probe_loss(*s->model, s->train, s->grads->weights().exit_weight, s->grads->weights().exit_bias, s->mean_scale());
  };
  auto objective = [s, scratch] {
    exit_trunk_forward(*s->model, s->pass, s->batch.tokens.data(), s->batch.B, s->batch.T);
    const double lm = exit_trunk_loss(s->pass, s->batch.targets.data());
    return lm + exit_probe_loss(*s->model, s->train, scratch->weights().exit_weight, scratch->weights().exit_bias, s->mean_scale());
  };
  return buffer_gradient_probe(s->model, s->grads, objective, backward);
}

}  // namespace

TrainFamily exit_train_family() {
  TrainFamily f;
  f.name = "exit";
  f.description = "exit: token-level early exit (CALM-style classifiers, shared head)";
  f.settings = {{"min_exit", "the earliest depth a token may stop at, in [1, layers - 1]", 1, {}, in_range(1, 1 << 20)},
                {"exit_threshold", "lambda: a token exits when its classifier's q >= lambda (the default of eval, audit, exec)", 0.9, {},
                 in_range(0, 1)},
                {"exit_head_steps", "steps of phase 2 (the exit classifiers on the frozen trunk)", 200, {},
                 in_range(0, 1e9)}};
  f.files = single_file_checkpoint;
  f.gradient_probe = exit_gradient_probe;
  set_constructors<ExitConfig>(f, config_of, [](const ExitConfig& c, const TrainableArgs& args) {
    return std::unique_ptr<Trainable>(std::make_unique<ExitTrainable>(c, args));
  });
  return f;
}

}  // namespace fca
