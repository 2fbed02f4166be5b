#include "models/gated/exec/bench.h"

#include <memory>
#include <vector>

#include "core/rng.h"
#include "core/sha256.h"
#include "models/gated/exec/flops.h"
#include "models/gated/forward.h"
#include "models/gated/train/trainable.h"
#include "models/family_auditable.h"

namespace fca {
namespace {

std::shared_ptr<GatedModel<float>> bench_model(const BenchRequest& r) {
  return std::make_shared<GatedModel<float>>(
      r.model.empty() ? GatedModel<float>::initialized(gated_config_of(r.shape, r.settings, "flags"), r.seed)
                      : GatedModel<float>::load(r.model));
}

BenchWork work_of(const BenchRequest& r, const GatedModel<float>& model, int T) {
  const GatedConfig& c = model.config();
  BenchWork w;
  w.config = nlohmann::ordered_json::parse(c.to_json());
  w.name = std::string(gate_kind_name(c.gate)) + " L " + std::to_string(c.n_layer) + " D " + std::to_string(c.d_model) + " H " +
           std::to_string(c.n_head);
  w.model_hash = r.model.empty() ? "" : sha256_file(r.model);
  w.tokens = T;
  return w;
}

}  // namespace

BenchWork gated_bench_forward(const BenchRequest& r) {
  const auto model = bench_model(r);
  const int T = r.tokens > 0 ? r.tokens : model->config().seq_len;
  const auto rs = std::make_shared<GatedRunState<float>>(model->config(), r.batch, T, false);
  const auto tokens = std::make_shared<std::vector<int32_t>>(size_t(r.batch) * T);
  Rng rng(r.seed + 1);
  for (auto& t : *tokens) t = int32_t(rng.below(kByteVocab));
  // Replay feeds the coefficients of one recorded live pass: the controller and its inputs are skipped.
  const auto recorded = std::make_shared<CoefficientTensor>(r.batch, gated_coefficient_shape(model->config(), T));
  RecordingCoefficients<float> recording(*model, *recorded);
  gated_forward(*model, *rs, tokens->data(), r.batch, T, recording);
  std::shared_ptr<CoefficientSource<float>> source;
  if (r.replay) source = std::make_shared<ReplayedCoefficients<float>>(*recorded);
  else source = std::make_shared<LiveCoefficients<float>>(*model);
  BenchWork w = work_of(r, *model, T);
  w.flops_per_pass = gated_forward_flops(model->config(), r.batch, T, model->config().n_layer);
  w.run_state_bytes = rs->bytes();
  // The Linear weights packed once, as an audit's passes read them (declare_packable_weights).
  const auto packed = std::make_shared<PackedWeights>();
  declare_packable_weights(*packed, *model);
  const int B = r.batch;
  w.pass = [model, rs, tokens, recorded, source, packed, B, T] {
    const PackedWeightsScope scope(packed.get());
    gated_forward(*model, *rs, tokens->data(), B, T, *source);
  };
  return w;
}

BenchWork gated_bench_train(const BenchRequest& r) {
  const auto model = bench_model(r);
  const int T = r.tokens > 0 ? r.tokens : model->config().seq_len;
  const auto step = std::make_shared<GatedTrainStep>(*model, r.batch, T, AdamWOptions{}, 1.0);
  const auto inputs = std::make_shared<std::vector<int32_t>>(size_t(r.batch) * T);
  const auto targets = std::make_shared<std::vector<int32_t>>(inputs->size());
  Rng rng(r.seed + 1);
  for (size_t i = 0; i < inputs->size(); ++i) {
    (*inputs)[i] = int32_t(rng.below(kByteVocab));
    (*targets)[i] = int32_t(rng.below(kByteVocab));
  }
  BenchWork w = work_of(r, *model, T);
  w.flops_per_pass = gated_train_flops(model->config(), r.batch, T);
  w.run_state_bytes = step->run_state_bytes();
  // A fixed batch and learning rate, as in bench/compare_pytorch.py's PyTorch step.
  w.first_step = step->run(inputs->data(), targets->data(), 1, 1e-4);
  w.pass = [model, step, inputs, targets] { step->run(inputs->data(), targets->data(), 1, 1e-4); };
  return w;
}

}  // namespace fca
