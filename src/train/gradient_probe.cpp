#include "train/gradient_probe.h"

namespace fca {

ProbeBatch probe_batch(int B, int T, int vocab, uint64_t seed) {
  ProbeBatch b;
  b.B = B;
  b.T = T;
  Rng rng(seed);
  for (int i = 0; i < B * T; ++i) {
    b.tokens.push_back(int32_t(rng.below(uint64_t(vocab))));
    b.targets.push_back(int32_t(rng.below(uint64_t(vocab))));
  }
  if (T >= 4) b.tokens[1] = b.tokens[2] = b.tokens[3];  // repeated bytes: peaky attention in window 0
  return b;
}

void perturb_values(double* values, size_t n, double scale, uint64_t seed) {
  Rng rng(seed);
  for (size_t i = 0; i < n; ++i) values[i] += scale * rng.normal();
}

}  // namespace fca
