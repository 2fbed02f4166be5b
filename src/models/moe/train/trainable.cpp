#include "models/moe/train/trainable.h"

#include <algorithm>
#include <limits>
#include <memory>

#include "core/error.h"

namespace fca {

namespace {

// The config of a fresh model of this shape and these settings; errors prefixed by `where`.
MoeConfig config_of(const ModelShape& shape, const nlohmann::json& settings, const std::string& where) {
  MoeConfig c = config_with_shape<MoeConfig>(shape);
  c.n_expert = settings.at("experts").get<int>();
  c.top_k = settings.at("top_k").get<int>();
  c.expert_hidden = settings.at("expert_hidden").get<int>();
  c.aux_loss = settings.at("aux_loss").get<double>();
  c.validate(where);
  return c;
}

// The objective in double for the conformance suite's gradient check (train/gradient_probe.h): the
// mean NLL plus the load-balancing term of a fixed batch. Top-k routing is a step function of the
// router's scores: a perturbation that changes which experts a token takes makes the finite
// difference meaningless (not the gradient wrong), so the objective refuses one, naming it.
// The experts of every layer's tokens in a pass.
std::vector<int32_t> expert_routes(const MoeRunState<double>& rs, int64_t slots) {
  std::vector<int32_t> r;
  for (const auto& layer : rs.layers) r.insert(r.end(), layer.experts, layer.experts + slots);
  return r;
}

GradientProbe moe_gradient_probe(const ModelShape& shape, const nlohmann::json& settings, uint64_t seed) {
  const MoeConfig c = config_of(shape, settings, "gradient probe");
  const auto s = perturbed_probe_state<MoeModel<double>, MoeRunState<double>>(c, c.seq_len, kByteVocab, seed);
  const int64_t slots = int64_t(s->batch.B) * s->batch.T * c.top_k;
  const auto routing = std::make_shared<std::vector<int32_t>>();  // of the last backward()
  auto backward = [s, routing, slots] {
    MoeLiveRouting<double> live(*s->model);
    moe_forward(*s->model, s->train, s->batch.tokens.data(), s->batch.B, s->batch.T, live);
    moe_loss(s->train, s->batch.targets.data(), nullptr);
    *routing = expert_routes(s->train, slots);
    s->zero_gradients();
    moe_backward(*s->model, s->train, *s->grads, s->mean_scale());
  };
  auto objective = [s, routing, slots] {
    MoeLiveRouting<double> live(*s->model);
    moe_forward(*s->model, s->pass, s->batch.tokens.data(), s->batch.B, s->batch.T, live);
    const double ce = moe_loss(s->pass, s->batch.targets.data(), nullptr);
    if (expert_routes(s->pass, slots) != *routing)
      throw Error("moe gradient probe: a perturbation changed the routing (the check sits on a tie)");
    return moe_objective(s->pass, ce);
  };
  return buffer_gradient_probe(s->model, s->grads, objective, backward);
}

}  // namespace

TrainFamily moe_train_family() {
  TrainFamily f;
  f.name = "moe";
  f.description = "moe: top-k mixture of experts";
  const double unbounded = std::numeric_limits<double>::infinity();
  f.settings = {{"experts", "number of experts E", 8, {}, in_range(1, 4096)},
                {"top_k", "experts per token k (1 <= k <= E)", 2, {}, in_range(1, 4096)},
                {"expert_hidden", "expert width F (0 = 4D/k)", 0, {}, in_range(0, 1 << 20)},
                {"aux_loss", "weight alpha of the load-balancing term", 0.01, {}, in_range(0, unbounded)}};
  f.files = single_file_checkpoint;
  f.gradient_probe = moe_gradient_probe;
  set_constructors<MoeConfig>(f, config_of, [](const MoeConfig& c, const TrainableArgs& args) {
    return std::unique_ptr<Trainable>(std::make_unique<FlatTrainable<MoeFamily>>(c, args.seed, args.batch, args.adamw, args.clip));
  });
  return f;
}

}  // namespace fca
