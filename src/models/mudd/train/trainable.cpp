#include "models/mudd/train/trainable.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "models/base/stream.h"

namespace fca {

namespace {

// The config of a fresh model of this shape and these settings; errors prefixed by `where`.
MuddConfig config_of(const ModelShape& shape, const nlohmann::json&, const std::string& where) {
  // Byte-level MUDD (docs/mudd.md, "Training").
  MuddConfig m;
  m.n_layer = shape.layers;
  m.dim = shape.dim;
  m.n_head = shape.heads;
  m.head_dim = shape.heads > 0 ? shape.dim / shape.heads : 0;
  m.vocab_size = kByteVocab;
  m.block_size = shape.seq;
  m.intermediate_size = 4 * shape.dim;
  if (m.n_layer < 2) throw Error(where + ": the mudd family needs at least 2 layers, found " + std::to_string(m.n_layer));
  if (shape.dim <= 0 || shape.heads <= 0 || shape.seq <= 0 || shape.dim % shape.heads != 0)
    throw Error(where + ": the mudd family needs positive dim, heads and seq with heads dividing dim (found dim " +
                std::to_string(shape.dim) + ", heads " + std::to_string(shape.heads) + ", seq " + std::to_string(shape.seq) + ")");
  if (m.rotary_dims() % 2 != 0 || m.rotary_dims() == 0)
    throw Error(where + ": the mudd family needs a quarter of the head width (" + std::to_string(m.head_dim) +
                "/4) to be a positive even number");
  return m;
}

// The objective in double for the conformance suite's gradient check (train/gradient_probe.h): the
// mean NLL of a fixed batch, every value drawn N(0, 0.4^2) around 0 (norm scales around 1) so that
// no path is at a symmetric point (the initialisation's zero output projections would hide most).
GradientProbe mudd_gradient_probe(const ModelShape& shape, const nlohmann::json& settings, uint64_t seed) {
  const MuddConfig c = config_of(shape, settings, "gradient probe");
  using State = ProbeState<MuddModel<double>, MuddRunState<double>>;
  const auto s = std::make_shared<State>(MuddModel<double>(c), c, probe_batch(2, std::min(5, c.block_size), c.vocab_size, seed + 2));
  for (const auto& slot : s->model->layout()) {
    const bool norm_scale = slot.name.find("norm") != std::string::npos && slot.name.ends_with("weight");
    double* p = s->model->data() + slot.offset;
    std::fill(p, p + slot.numel, norm_scale ? 1.0 : 0.0);
    perturb_values(p, slot.numel, 0.4, seed + 1 + slot.offset);
  }
  auto backward = [s] {
    MuddLiveCoefficients<double> live(*s->model);
    mudd_forward(*s->model, s->train, s->batch.tokens.data(), s->batch.B, s->batch.T, live);
    mudd_loss(s->train, s->batch.targets.data(), nullptr);
    s->zero_gradients();
    mudd_backward(*s->model, s->train, *s->grads, s->mean_scale());
  };
  auto objective = [s] {
    MuddLiveCoefficients<double> live(*s->model);
    mudd_forward(*s->model, s->pass, s->batch.tokens.data(), s->batch.B, s->batch.T, live);
    return mudd_loss(s->pass, s->batch.targets.data(), nullptr);
  };
  return buffer_gradient_probe(s->model, s->grads, objective, backward);
}

}  // namespace

TrainFamily mudd_train_family() {
  TrainFamily f;
  f.name = "mudd";
  f.torch_arch = "mudd";
  f.description = "mudd: dynamic dense connections (docs/mudd.md; --out is then a folder)";
  f.checkpoint_is_folder = true;
  f.files = [](const std::string& out) {
    return CheckpointFiles{out + "/model.safetensors", out + "/train-state.safetensors", out + "/train.log.jsonl"};
  };
  f.gradient_probe = mudd_gradient_probe;
  set_constructors<MuddConfig>(f, config_of, [](const MuddConfig& c, const TrainableArgs& args) {
    return std::unique_ptr<Trainable>(std::make_unique<MuddTrainable>(c, args.seed, args.batch, args.adamw, args.clip));
  });
  return f;
}

}  // namespace fca
