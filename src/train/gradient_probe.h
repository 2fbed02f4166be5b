// A family's training objective in double precision, the conformance suite's handle for checking
// every family's backward pass against central finite differences
// (tests/family_conformance_test.cpp, GradientsMatchFiniteDifferences): a model of the shape and
// settings drawn from a seed, its values moved off their initialisation so that no gradient term
// vanishes by symmetry, and one fixed batch. Each family supplies it from its train/ folder
// (TrainFamily::gradient_probe), so a new family is checked with no line in the test.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "models/base/tensor_slot.h"

namespace fca {

struct GradientProbe {
  std::vector<TensorSlot> layout;
  std::function<double*(const TensorSlot&)> parameter;        // the values the objective reads
  std::function<const double*(const TensorSlot&)> gradient;   // of objective(), by the last backward()
  std::function<double()> objective;                          // at the current values
  std::function<void()> backward;                             // the gradient at the current values
  // Elements the objective never reads (hyper's masked static entry), left out of the check.
  std::function<bool(const TensorSlot&, size_t)> unread = nullptr;
};

// The probe's fixed batch: B windows of T tokens below `vocab` and their targets.
struct ProbeBatch {
  int B = 2, T = 5;
  std::vector<int32_t> tokens, targets;  // [B, T]
};
ProbeBatch probe_batch(int B, int T, int vocab, uint64_t seed);

// Adds scale * N(0, 1) to each of the n values (from `seed`): off the initialisation.
void perturb_values(double* values, size_t n, double scale, uint64_t seed);

// What most probes hold: the model (its values moved off the initialisation by the family), its
// gradients, the batch, and two run states: `train`, the pass backward() differentiates (what the
// family's backward reads), and `pass`, the objective's passes. Shared by the probe's functions.
template <typename Model, typename RunState>
struct ProbeState {
  template <typename Config>
  ProbeState(Model initial, const Config& config, ProbeBatch b)
      : model(std::make_shared<Model>(std::move(initial))),
        grads(std::make_shared<Model>(config)),
        batch(std::move(b)),
        train(config, batch.B, batch.T, true),
        pass(config, batch.B, batch.T, false) {}
  std::shared_ptr<Model> model, grads;
  ProbeBatch batch;
  RunState train, pass;
  // Clears the gradients before a backward pass (the families' backward passes accumulate).
  void zero_gradients() { std::fill(grads->data(), grads->data() + grads->buffer_size(), 0.0); }
  // The families' loss_scale for the mean over the batch's tokens.
  double mean_scale() const { return 1.0 / (double(batch.B) * batch.T); }
};

// The usual start of a probe: the model drawn from `seed` (Model::initialized), every value moved
// by N(0, 0.3^2) (seed + 1) so that no term vanishes by symmetry (LayerNorm weights off 1, biases
// and gates off 0), and 2 windows of min(tokens, positions) tokens below `vocab` (seed + 2).
template <typename Model, typename RunState, typename Config>
std::shared_ptr<ProbeState<Model, RunState>> perturbed_probe_state(const Config& config, int positions, int vocab, uint64_t seed,
                                                                   int tokens = 5) {
  auto s = std::make_shared<ProbeState<Model, RunState>>(Model::initialized(config, seed), config,
                                                         probe_batch(2, std::min(tokens, positions), vocab, seed + 2));
  perturb_values(s->model->data(), s->model->buffer_size(), 0.3, seed + 1);
  return s;
}

// A probe over a model whose values and gradients lie at the layout's offsets of two models'
// buffers (FlatModel, MuddModel: data()), both kept alive by the probe.
template <typename Model>
GradientProbe buffer_gradient_probe(std::shared_ptr<Model> model, std::shared_ptr<Model> grads, std::function<double()> objective,
                                    std::function<void()> backward) {
  GradientProbe p;
  p.layout = model->layout();
  p.parameter = [model](const TensorSlot& s) { return model->data() + s.offset; };
  p.gradient = [model, grads](const TensorSlot& s) -> const double* { return grads->data() + s.offset; };
  p.objective = std::move(objective);
  p.backward = std::move(backward);
  return p;
}

}  // namespace fca
