#include "models/mod/train/trainable.h"

#include <algorithm>
#include <memory>

#include "core/error.h"

namespace fca {

namespace {

// The config of a fresh model of this shape and these settings; errors prefixed by `where`.
ModConfig config_of(const ModelShape& shape, const nlohmann::json& settings, const std::string& where) {
  ModConfig c = config_with_shape<ModConfig>(shape);
  c.capacity = settings.at("capacity").get<double>();
  c.routed_every = settings.at("routed_every").get<int>();
  c.validate(where);
  return c;
}

// The objective in double for the conformance suite's gradient check (train/gradient_probe.h): the
// mean NLL of a fixed batch. Top-K selection is a step function of the router's scores: a
// perturbation that changes which tokens a routed block runs makes the finite difference
// meaningless (not the gradient wrong), so the objective refuses one, naming it.
// The selected rows of every routed block in a pass.
std::vector<int32_t> selected_rows(const ModConfig& c, const ModRunState<double>& rs, int B, int T) {
  const int64_t n = int64_t(B) * c.selected_tokens(T);
  std::vector<int32_t> r;
  for (int l = 0; l < c.n_layer; ++l)
    if (c.routed(l)) r.insert(r.end(), rs.routed[size_t(l)].rows, rs.routed[size_t(l)].rows + n);
  return r;
}

GradientProbe mod_gradient_probe(const ModelShape& shape, const nlohmann::json& settings, uint64_t seed) {
  const ModConfig c = config_of(shape, settings, "gradient probe");
  const auto s = perturbed_probe_state<ModModel<double>, ModRunState<double>>(c, c.seq_len, kByteVocab, seed, 6);
  const auto selection = std::make_shared<std::vector<int32_t>>();  // of the last backward()
  auto backward = [s, selection, c] {
    ModLiveRouting<double> live(*s->model);
    mod_forward(*s->model, s->train, s->batch.tokens.data(), s->batch.B, s->batch.T, live);
    mod_loss(s->train, s->batch.targets.data(), nullptr);
    *selection = selected_rows(c, s->train, s->batch.B, s->batch.T);
    s->zero_gradients();
    mod_backward(*s->model, s->train, *s->grads, s->mean_scale());
  };
  auto objective = [s, selection, c] {
    ModLiveRouting<double> live(*s->model);
    mod_forward(*s->model, s->pass, s->batch.tokens.data(), s->batch.B, s->batch.T, live);
    if (selected_rows(c, s->pass, s->batch.B, s->batch.T) != *selection)
      throw Error("mod gradient probe: a perturbation changed the token selection (the check sits on a tie)");
    return mod_loss(s->pass, s->batch.targets.data(), nullptr);
  };
  return buffer_gradient_probe(s->model, s->grads, objective, backward);
}

}  // namespace

TrainFamily mod_train_family() {
  TrainFamily f;
  f.name = "mod";
  f.description = "mod: Mixture-of-Depths";
  f.settings = {{"capacity", "share c of each window's tokens a routed block runs, in (0, 1]", 0.125, {}, in_range(0, 1, true)},
                {"routed_every", "blocks routed_every-1, 2 routed_every-1, ... are routed", 2, {}, in_range(1, 1 << 20)}};
  f.files = single_file_checkpoint;
  f.gradient_probe = mod_gradient_probe;
  set_constructors<ModConfig>(f, config_of, [](const ModConfig& c, const TrainableArgs& args) {
    return std::unique_ptr<Trainable>(std::make_unique<FlatTrainable<ModFamily>>(c, args.seed, args.batch, args.adamw, args.clip));
  });
  return f;
}

}  // namespace fca
