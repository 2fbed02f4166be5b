#include "models/hyper/train/trainable.h"

#include <algorithm>
#include <memory>

namespace fca {

namespace {

// The config of a fresh model of this shape and these (resolved) settings; errors prefixed by `where`.
HyperConfig config_of(const ModelShape& shape, const nlohmann::json& settings, const std::string& where) {
  HyperConfig c = config_with_shape<HyperConfig>(shape);
  try {
    c.variant = parse_hyper_variant(settings.at("hc_variant").get<std::string>());
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  c.streams = settings.at("hc_streams").get<int>();
  c.tanh = settings.at("hc_tanh").get<bool>();
  c.scale_init = settings.at("hc_scale_init").get<double>();
  c.sinkhorn_iters = settings.at("hc_sinkhorn_iters").get<int>();
  c.eps = settings.at("hc_eps").get<double>();
  c.norm_eps = settings.at("hc_norm_eps").get<double>();
  c.pre_logit = settings.at("hc_pre_logit").get<double>();
  c.res_offdiag_init = settings.at("hc_res_offdiag_init").get<double>();
  c.out_init_div_sqrt_n = settings.at("hc_out_init_div_sqrt_n").get<bool>();
  c.validate(where);
  return c;
}

// The objective in double for the conformance suite's gradient check (train/gradient_probe.h): the
// mean NLL of a fixed batch, on a model away from its initialisation (every dynamic path carries
// gradient, the mixing is not I). Entry 0 of each static square is masked, never read: left out.
GradientProbe hyper_gradient_probe(const ModelShape& shape, const nlohmann::json& settings, uint64_t seed) {
  const HyperConfig c = config_of(shape, settings, "gradient probe");
  using State = ProbeState<HyperModel<double>, HyperRunState<double>>;
  const auto s = std::make_shared<State>(HyperModel<double>::initialized(c, seed), c, probe_batch(2, std::min(5, c.seq_len), kByteVocab, seed + 2));
  for (const auto& slot : s->model->layout()) {
    double* p = s->model->data() + slot.offset;
    perturb_values(p, slot.numel, slot.name.starts_with("hc.") ? 0.3 : 0.2, seed + 1 + slot.offset);
    if (slot.name.ends_with(".static")) p[0] = 0;
  }
  auto backward = [s] {
    HyperLiveCoefficients<double> live(*s->model);
    hyper_forward(*s->model, s->train, s->batch.tokens.data(), s->batch.B, s->batch.T, live);
    hyper_loss(s->train, s->batch.targets.data(), nullptr);
    s->zero_gradients();
    hyper_backward(*s->model, s->train, *s->grads, s->mean_scale());
  };
  auto objective = [s] {
    HyperLiveCoefficients<double> live(*s->model);
    hyper_forward(*s->model, s->pass, s->batch.tokens.data(), s->batch.B, s->batch.T, live);
    return hyper_loss(s->pass, s->batch.targets.data(), nullptr);
  };
  GradientProbe probe = buffer_gradient_probe(s->model, s->grads, objective, backward);
  probe.unread = [](const TensorSlot& slot, size_t i) { return slot.name.ends_with(".static") && i == 0; };
  return probe;
}

}  // namespace

TrainFamily hyper_train_family() {
  const HyperConfig d;  // the family's defaults
  TrainFamily f;
  f.name = "hyper";
  f.description = "hyper: hyper-connections (shc, dhc, mhc; n residual streams mixed at two sites per block)";
  f.settings = {
      {"hc_variant", "shc (static), dhc (dynamic, tanh) or mhc (manifold-constrained, Sinkhorn)", "dhc", {"shc", "dhc", "mhc"}},
      {"hc_streams", "residual streams n (1 .. 64)", d.streams, {}, in_range(1, 64)},
      {"hc_tanh", "dhc: tanh on the dynamic part (true or false)", d.tanh, {}},
      {"hc_scale_init", "initial s_alpha, s_beta (dhc) or alpha read, write, mix (mhc)", d.scale_init, {}},
      {"hc_sinkhorn_iters", "mhc: Sinkhorn column and row normalisations", d.sinkhorn_iters, {}, in_range(1, 1000)},
      {"hc_eps", "mhc: Sinkhorn and read eps", d.eps, {}, in_range(0, 1, true, true)},
      {"hc_norm_eps", "mhc: the RMS eps", d.norm_eps, {}, in_range(0, 1, true, true)},
      {"hc_pre_logit", "mhc: initial read logits (+ on the read stream, - elsewhere)", d.pre_logit, {}},
      {"hc_res_offdiag_init", "mhc: initial off-diagonal mixing logits", d.res_offdiag_init, {}},
      {"hc_out_init_div_sqrt_n", "[HC]'s init: attention and MLP output projections / sqrt(n) (true or false)",
       d.out_init_div_sqrt_n, {}}};
  f.files = single_file_checkpoint;
  f.gradient_probe = hyper_gradient_probe;
  set_constructors<HyperConfig>(f, config_of, [](const HyperConfig& c, const TrainableArgs& args) {
    return std::unique_ptr<Trainable>(std::make_unique<FlatTrainable<HyperFamily>>(c, args.seed, args.batch, args.adamw, args.clip));
  });
  return f;
}

}  // namespace fca
