// Backward pass of the gated model. Walks the blocks in reverse, following the forward pass in
// forward.cpp line by line; the residual-stream gradient d_hidden accumulates across blocks.
#include <omp.h>

#include <string>

#include "core/error.h"
#include "models/base/block.h"
#include "models/gated/forward.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"

namespace fca {
namespace {

// Gradients of the gate parameters from dL/dg [N] of layer l. g = sigmoid(z): dz = dg g (1 - g).
// Sums run over rows in index order (deterministic).
template <typename T>
void gate_parameters_backward(GatedWeights<T>& dw, GateKind kind, int layer, const T* d_gate, const T* g,
                              const T* phi, int64_t N) {
  if (kind == GateKind::dense || kind == GateKind::fixed) return;
  T dz_sum = 0;
  T dz_phi[4] = {0, 0, 0, 0};
  for (int64_t n = 0; n < N; ++n) {
    const T dz = d_gate[n] * g[n] * (T(1) - g[n]);
    dz_sum += dz;
    if (kind == GateKind::featuregate)
      for (int i = 0; i < 4; ++i) dz_phi[i] += dz * phi[n * 4 + i];
  }
  if (kind == GateKind::uniform) dw.gate_logit[0] += dz_sum;
  if (kind == GateKind::layerstatic) dw.gate_logit[layer] += dz_sum;
  if (kind == GateKind::featuregate) {
    dw.gate_bias[layer] += dz_sum;
    for (int i = 0; i < 4; ++i) dw.gate_weight[layer * 4 + i] += dz_phi[i];
  }
}

}  // namespace

template <typename T>
void gated_backward(const GatedModel<T>& model, GatedRunState<T>& rs, GatedModel<T>& grads, T loss_scale) {
  if (!rs.keep_all_layers) throw Error("backward needs a run state that keeps every layer's activations");
  if (omp_get_max_threads() > rs.scratch_threads)
    throw Error("backward: run state was sized for " + std::to_string(rs.scratch_threads) + " threads, now " +
                std::to_string(omp_get_max_threads()));
  const GatedConfig& c = model.config();
  const int D = c.d_model, H = c.n_head, L = c.n_layer, B = rs.batch, Tn = rs.tokens;
  const int N = B * Tn;
  const auto& w = model.weights();
  auto& dw = grads.weights();

  stream_head_backward(rs, dw.wte, dw.ln_f_weight, dw.ln_f_bias, w.ln_f_weight, w.wte, loss_scale, L, N, D);

  for (int l = L - 1; l >= 0; --l) {
    const auto& p = w.blocks[l];
    auto& dp = dw.blocks[l];
    const auto& a = rs.blocks[l];
    const T* h = rs.hidden[l];
    const T* g = rs.gates + int64_t(l) * N;
    // h_{l+1} = h_l + g F_l: dF = g dh; dg = <dh, F>; dh_l keeps dh (identity path).
    const bool gate_has_parameters = c.gate != GateKind::dense && c.gate != GateKind::fixed;
    gated_residual_backward(rs.d_update, gate_has_parameters ? rs.d_gate : nullptr, rs.d_hidden, g, a.update, N, D);
    if (gate_has_parameters)
      gate_parameters_backward(dw, c.gate, l, rs.d_gate, g, rs.features + int64_t(l) * N * 4, N);
    const BlockGradScratch<T> scratch{rs.d_u, rs.d_ln2_in, rs.d_small, rs.d_wide, rs.d_qkv, rs.attn_scratch};
    dense_mlp_backward(dp, scratch, a, p, rs.d_update, N, D);
    attention_half_backward(rs.d_hidden, dp, scratch, a, p, h, rs.d_update, B, Tn, D, H);
  }
  embedding_backward(dw.wte, dw.wpe, rs.d_hidden, rs.tokens_in, B, Tn, D);
}

template void gated_backward<float>(const GatedModel<float>&, GatedRunState<float>&, GatedModel<float>&, float);
template void gated_backward<double>(const GatedModel<double>&, GatedRunState<double>&, GatedModel<double>&, double);

}  // namespace fca
