#include "models/mudd/exec/flops.h"

#include "ops/attention.h"

namespace fca {

double mudd_gemm_flops(const MuddConfig& c, int B, int T, bool generator) {
  const double N = double(B) * T, D = c.dim;
  double flops = 2.0 * N * D * c.vocab_size;
  for (int i = 0; i < c.n_layer; ++i) {
    flops += 8.0 * N * D * D + 4.0 * double(B) * double(attention_executed_pairs(T)) * D + 4.0 * N * D * c.ffn_width(i);
    if (generator) {
      const double hidden = c.da_hidden(i), width = double(c.streams(i)) * c.sources(i);
      flops += 2.0 * N * D * hidden + 2.0 * N * hidden * width;
    }
  }
  return flops;
}

double mudd_controller_flops(const MuddConfig& c, int B, int T) {
  const double N = double(B) * T, D = c.dim;
  double flops = 0;
  for (int i = 0; i < c.n_layer; ++i)
    flops += N * (3.0 * D + 4.0 + 5.0 * c.da_hidden(i) + double(c.streams(i)) * c.sources(i));
  return flops;
}

int64_t mudd_controller_evaluations(const MuddConfig& c) { return c.n_layer; }

double mudd_mixing_flops(const MuddConfig& c, int B, int T) {
  const double N = double(B) * T, D = c.dim;
  double flops = 0;
  for (int i = 0; i < c.n_layer; ++i) flops += N * c.streams(i) * D * (2.0 * c.sources(i) - 1.0);
  return flops;
}

}  // namespace fca
