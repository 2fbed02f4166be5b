// The gated family's objective in double for the conformance suite's gradient check
// (train/gradient_probe.h): the mean NLL of a fixed batch. featuregate's features are constants
// for the gradient (stop-gradient), so the objective holds them at the values of the last
// backward() pass: the perturbed model's controller runs on those recorded features.
#include <algorithm>
#include <memory>
#include <vector>

#include "models/gated/train/trainable.h"

namespace fca {
namespace {

class FrozenFeatureCoefficients : public CoefficientSource<double> {
 public:
  FrozenFeatureCoefficients(const GatedModel<double>& model, const std::vector<double>& phi)
      : controller_(model.config(), model.weights()), phi_(phi) {}
  // Declared as not running the controller, so that the pass computes no features of its own.
  bool evaluates_controller() const override { return false; }
  void coefficients(int layer, const BatchPosition& batch, const double*, double* g) override {
    controller_.evaluate(layer, batch, phi_.data() + layer * int64_t(batch.batch) * batch.tokens * 4, g);
  }

 private:
  GateController<double> controller_;
  const std::vector<double>& phi_;
};

}  // namespace

GradientProbe gated_gradient_probe(const ModelShape& shape, const nlohmann::json& settings, uint64_t seed) {
  const GatedConfig c = gated_config_of(shape, settings, "gradient probe");
  const auto s = perturbed_probe_state<GatedModel<double>, GatedRunState<double>>(c, c.seq_len, kByteVocab, seed);
  const bool frozen = c.gate == GateKind::featuregate;
  const auto phi = std::make_shared<std::vector<double>>();  // featuregate: [L, N, 4] of the last backward()
  auto backward = [s, phi, frozen] {
    LiveCoefficients<double> live(*s->model);
    gated_forward(*s->model, s->train, s->batch.tokens.data(), s->batch.B, s->batch.T, live);
    gated_loss(s->train, s->batch.targets.data(), nullptr);
    const int64_t features = frozen ? int64_t(s->model->config().n_layer) * s->batch.B * s->batch.T * 4 : 0;
    phi->assign(s->train.features, s->train.features + features);
    s->zero_gradients();
    gated_backward(*s->model, s->train, *s->grads, s->mean_scale());
  };
  auto objective = [s, phi, frozen] {
    FrozenFeatureCoefficients held(*s->model, *phi);
    LiveCoefficients<double> live(*s->model);
    CoefficientSource<double>& source = frozen ? static_cast<CoefficientSource<double>&>(held) : live;
    gated_forward(*s->model, s->pass, s->batch.tokens.data(), s->batch.B, s->batch.T, source);
    return gated_loss(s->pass, s->batch.targets.data(), nullptr);
  };
  return buffer_gradient_probe(s->model, s->grads, objective, backward);
}

}  // namespace fca
