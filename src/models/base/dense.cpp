#include "models/base/dense.h"

#include "models/base/stream.h"
#include "ops/attention.h"

namespace fca {

double dense_forward_flops(int d_model, int B, int T, int layers) {
  const double N = double(B) * T, D = d_model;
  const double linear = 2.0 * N * 12.0 * D * D;  // qkv 3D^2, proj D^2, fc 4D^2, mlp proj 4D^2
  // QK^T and PV over all heads, for the (query, key) pairs the blocked causal kernel executes.
  const double attention = 2.0 * 2.0 * double(B) * double(attention_executed_pairs(T)) * D;
  const double head = 2.0 * N * D * kByteVocab;  // tied output head
  return layers * (linear + attention) + head;
}

}  // namespace fca
