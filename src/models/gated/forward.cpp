#include "models/gated/forward.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/phase_timer.h"
#include "core/exec_counters.h"
#include "models/base/block.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/fast_math.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"

namespace fca {
namespace {

// phi[n, 0..2] = mean over heads of the attention statistics; phi[n, 3] = ||F_n|| / (||h_n|| + 1e-6).
template <typename T>
void featuregate_features(T* phi, const T* head_features, const T* update, const T* h, int B, int Tn, int H, int D) {
  const PhaseScope phase_scope(Phase::controller);
  // Per row: the head sums 3H and means 3, two sums of squares 4D, two square roots, an add, a divide.
  count_controller_flops(int64_t(B) * Tn * (3 * int64_t(H) + 4 * int64_t(D) + 7));
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < int64_t(B) * Tn; ++n) {
    const int64_t b = n / Tn, t = n % Tn;
    T acc[3] = {0, 0, 0};
    for (int hh = 0; hh < H; ++hh) {
      const T* f = head_features + ((b * H + hh) * Tn + t) * 3;
      for (int i = 0; i < 3; ++i) acc[i] += f[i];
    }
    const T update_sq = lane_dot(update + n * D, update + n * D, D), hidden_sq = lane_dot(h + n * D, h + n * D, D);
    T* out = phi + n * 4;
    for (int i = 0; i < 3; ++i) out[i] = acc[i] / T(H);
    out[3] = std::sqrt(update_sq) / (std::sqrt(hidden_sq) + T(1e-6));
  }
}

}  // namespace

template <typename T>
void gated_forward(const GatedModel<T>& model, GatedRunState<T>& rs, const int32_t* tokens, int B, int Tn,
                   CoefficientSource<T>& source, int first_window, const std::vector<uint8_t>* executed_blocks) {
  const GatedConfig& c = model.config();
  const BatchPosition position = begin_pass(rs, B, Tn, c.seq_len, first_window);
  const int D = c.d_model, H = c.n_head, L = c.n_layer;
  const int N = B * Tn;
  const auto& w = model.weights();
  // The controller's inputs (the featuregate statistics phi) are computed only for a source that
  // runs the controller, and only for the gate that reads them.
  const bool controller_inputs = source.evaluates_controller() && model.config().gate == GateKind::featuregate;
  // h_0 and block 0's update F_0 depend on the tokens alone (prefix_reuse.h); a replay of the
  // windows of the last pass starts at block 0's gate.
  const bool reuse_block0 = !controller_inputs && executed_blocks == nullptr && rs.prefix.reusable(tokens, B, Tn, rs.tokens_in);
  if (executed_blocks != nullptr) {
    if (int(executed_blocks->size()) != c.n_layer)
      throw Error("block mask has " + std::to_string(executed_blocks->size()) + " entries for " +
                  std::to_string(c.n_layer) + " layers");
    for (uint8_t run : *executed_blocks)
      if (!run && controller_inputs)
        throw Error("a live featuregate controller cannot run with removed blocks; supply its coefficients");
  }
  ExecCounters* counters = exec_counters();

  if (reuse_block0) {
    ++rs.prefix.reused_passes;
  } else {
    rs.prefix.invalidate();
    stream_embed(rs, tokens, w.wte, w.wpe, B, Tn, D);
  }
  for (int l = 0; l < L; ++l) {
    const auto& p = w.blocks[l];
    auto& a = rs.blocks[l];
    const T* h = rs.hidden[l];
    if (executed_blocks != nullptr && !(*executed_blocks)[size_t(l)]) {
      std::copy(h, h + int64_t(N) * D, rs.hidden[l + 1]);
      std::fill(rs.gates + int64_t(l) * N, rs.gates + int64_t(l + 1) * N, T(0));
      continue;
    }
    T* phi = controller_inputs ? rs.features + int64_t(l) * N * 4 : nullptr;
    if (l > 0 || !reuse_block0) {  // reused: F_0 = rs.blocks[0].update from the last pass over these windows
      if (counters != nullptr) counters->blocks_executed.fetch_add(1, std::memory_order_relaxed);
      AttentionStats<T> stats{rs.logp[l % 2], l > 0 ? rs.logp[(l + 1) % 2] : nullptr, rs.head_features};
      attention_half_forward(a, rs.attn_scratch, p, h, B, Tn, D, H, controller_inputs ? &stats : nullptr);
      dense_mlp_forward(a, p, N, D);
      if (l == 0) rs.prefix.computed(B, Tn);
      if (controller_inputs) {  // the controller's first stage: its features (and the attention statistics above)
        featuregate_features(phi, rs.head_features, a.update, h, B, Tn, H, D);
        count_controller_evaluation(position);
      }
    }
    T* g = rs.gates + int64_t(l) * N;
    source.coefficients(l, position, phi, g);
    gated_residual_forward(rs.hidden[l + 1], h, g, a.update, N, D);
    count_mixing_flops(2 * int64_t(N) * D);  // h + g F: a multiply and an add per element
  }
  stream_head_forward(rs, w.ln_f_weight, w.ln_f_bias, w.wte, L, N, D);
}

template <typename T>
double gated_loss(GatedRunState<T>& rs, const int32_t* targets, double* window_nll) {
  return language_model_loss(rs.losses, rs.targets, rs.logits, targets, rs.batch, rs.tokens, kByteVocab, window_nll);
}

template void gated_forward<float>(const GatedModel<float>&, GatedRunState<float>&, const int32_t*, int, int,
                                   CoefficientSource<float>&, int, const std::vector<uint8_t>*);
template void gated_forward<double>(const GatedModel<double>&, GatedRunState<double>&, const int32_t*, int, int,
                                    CoefficientSource<double>&, int, const std::vector<uint8_t>*);
template double gated_loss<float>(GatedRunState<float>&, const int32_t*, double*);
template double gated_loss<double>(GatedRunState<double>&, const int32_t*, double*);

}  // namespace fca
