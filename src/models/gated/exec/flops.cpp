#include "models/gated/exec/flops.h"

#include "models/base/dense.h"

namespace fca {

double gated_forward_flops(const GatedConfig& c, int B, int T, int layers) { return dense_forward_flops(c.d_model, B, T, layers); }

double gated_controller_flops(const GatedConfig& c, int B, int T, int layers) {
  const double N = double(B) * T, D = c.d_model, H = c.n_head, Tn = T;
  switch (c.gate) {
    case GateKind::dense:
    case GateKind::fixed:
      return 0;
    case GateKind::uniform:
    case GateKind::layerstatic:
      return 4.0 * layers;  // sigmoid: negate, exp, add, divide
    case GateKind::featuregate:
      break;
  }
  // Per head and row t (n = t + 1 keys): 4n + 4, plus 2 for t > 0 (normalised entropy), plus
  // 2n + 1 for the KL term in blocks after the first. Summed over t < T.
  const double statistics = 2.0 * Tn * (Tn + 1) + 4.0 * Tn + 2.0 * (Tn - 1);
  const double kl = Tn * (Tn + 1) + Tn;
  const double features = N * (3.0 * H + 4.0 * D + 7.0);
  const double gate = N * 12.0;  // b + w . phi (8) and the sigmoid (4)
  if (layers == 0) return 0;  // no block ran, so no controller did
  return layers * (double(B) * H * statistics + features + gate) + (layers - 1) * double(B) * H * kl;
}

int64_t gated_controller_evaluations(const GatedConfig& c, int layers) {
  return int64_t(layers) * (c.gate == GateKind::featuregate ? 2 : 1);
}

double gated_mixing_flops(const GatedConfig& c, int B, int T, int layers) { return 2.0 * layers * double(B) * T * c.d_model; }

double gated_train_flops(const GatedConfig& c, int B, int T) { return 3.0 * gated_forward_flops(c, B, T, c.n_layer); }

}  // namespace fca
