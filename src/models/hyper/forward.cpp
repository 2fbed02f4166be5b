#include "models/hyper/forward.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/exec_counters.h"
#include "core/phase_timer.h"
#include "models/base/batch_position.h"
#include "models/base/block.h"
#include "ops/embedding.h"
#include "ops/simd.h"

namespace fca {

// The read and the write are weighted sums of a token's rows: through simd::mix_streams for float
// (one pass over the sources for up to 4 outputs; the same products and additions in the same
// order as the loops of the double path, so bitwise what those give in float).
constexpr int kMixOutputs = simd::kMixStreamsMaxOutputs;

template <typename T>
void hyper_read(T* a, const T* X, const T* C, int64_t N, int n, int D) {
  const PhaseScope phase_scope(Phase::elementwise);
  count_mixing_flops(N * D * (2 * int64_t(n) - 1));  // per value: n products, n - 1 additions
  const int S = n + 1;
#pragma omp parallel
  {
    std::vector<const T*> x(static_cast<size_t>(n));  // the token's streams
#pragma omp for schedule(static)
    for (int64_t t = 0; t < N; ++t) {
      const T* Ct = C + t * S * S;
      T* out = a + t * D;
      for (int i = 0; i < n; ++i) x[size_t(i)] = X + (t * n + i) * D;
      if constexpr (std::is_same_v<T, float>) {
        simd::mix_streams(&out, 1, x.data(), n, Ct + 1, D);  // weights C[0, 1 .. n]
      } else {
        for (int d = 0; d < D; ++d) out[d] = Ct[1] * x[0][d];
        for (int i = 1; i < n; ++i)
          for (int d = 0; d < D; ++d) out[d] = out[d] + Ct[1 + i] * x[size_t(i)][d];
      }
    }
  }
}

template <typename T>
void hyper_write(T* X_next, const T* X, const T* C, const T* F, int64_t N, int n, int D) {
  const PhaseScope phase_scope(Phase::elementwise);
  count_mixing_flops(N * n * D * (2 * int64_t(n) + 1));  // per new stream and value: 1 + 2n
  const int S = n + 1;
#pragma omp parallel
  {
    std::vector<const T*> x(static_cast<size_t>(S));  // sources: the branch output, then the old streams
    std::vector<T*> y(static_cast<size_t>(n));         // the new streams
#pragma omp for schedule(static)
    for (int64_t t = 0; t < N; ++t) {
      const T* Ct = C + t * S * S;
      x[0] = F + t * D;
      for (int i = 0; i < n; ++i) x[size_t(1 + i)] = X + (t * n + i) * D;
      for (int j = 0; j < n; ++j) y[size_t(j)] = X_next + (t * n + j) * D;
      if constexpr (std::is_same_v<T, float>) {
        // Row 1 + j of the square weighs the sources of new stream j: C[1 + j, 0 .. n].
        for (int j0 = 0; j0 < n; j0 += kMixOutputs)
          simd::mix_streams(y.data() + j0, std::min(kMixOutputs, n - j0), x.data(), S, Ct + (1 + j0) * S, D);
      } else {
        for (int j = 0; j < n; ++j) {
          const T* row = Ct + (1 + j) * S;
          T* out = y[size_t(j)];
          for (int d = 0; d < D; ++d) out[d] = row[0] * x[0][d];
          for (int k = 1; k < S; ++k)
            for (int d = 0; d < D; ++d) out[d] = out[d] + row[k] * x[size_t(k)][d];
        }
      }
    }
  }
}

template <typename T>
void hyper_collapse(T* h, const T* X, int64_t N, int n, int D) {
  const PhaseScope phase_scope(Phase::elementwise);
  count_mixing_flops(N * D * (int64_t(n) - 1));  // the streams' cost at the end: n - 1 additions
#pragma omp parallel
  {
    std::vector<T> level(size_t(n) * D);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < N; ++t) {
      std::copy(X + t * n * D, X + (t + 1) * n * D, level.begin());
      int count = n;
      while (count > 1) {
        const int pairs = count / 2;
        for (int q = 0; q < pairs; ++q) {
          T* out = level.data() + int64_t(q) * D;
          const T* left = level.data() + int64_t(2 * q) * D;
          const T* right = left + D;
          for (int d = 0; d < D; ++d) out[d] = left[d] + right[d];
        }
        if (count % 2 == 1)  // the odd one carried up
          std::copy(level.begin() + int64_t(count - 1) * D, level.begin() + int64_t(count) * D,
                    level.begin() + int64_t(pairs) * D);
        count = pairs + count % 2;
      }
      std::copy(level.begin(), level.begin() + D, h + t * D);
    }
  }
}

template <typename T>
void hyper_forward(const HyperModel<T>& model, HyperRunState<T>& rs, const int32_t* tokens, int B, int Tn,
                   HyperCoefficientSource<T>& source, int first_window) {
  const HyperConfig& c = model.config();
  const BatchPosition pos = begin_pass(rs, B, Tn, c.seq_len, first_window);
  const HyperWeights<T>& w = model.weights();
  const int D = c.d_model, n = c.streams;
  const int64_t N = int64_t(B) * Tn;
  stream_embed(rs, tokens, w.wte, w.wpe, B, Tn, D);
  {
    const PhaseScope phase_scope(Phase::elementwise);
    T* X0 = rs.streams(0);
    const T* x0 = rs.hidden[0];
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < N; ++t)
      for (int i = 0; i < n; ++i) std::copy(x0 + t * D, x0 + (t + 1) * D, X0 + (t * n + i) * D);
  }
  for (int p = 0; p < c.sites(); ++p) {
    const int l = p / 2;
    T* X = rs.streams(p);
    T* C = rs.site_coefficients(p);
    source.coefficients(p, pos, X, rs.controller_scratch(p), C);
    T* a = rs.read(p);
    hyper_read(a, X, C, N, n, D);
    BlockActivations<T>& act = rs.blocks[size_t(l)];
    const T* F;
    if (p % 2 == 0) {
      if (ExecCounters* counters = exec_counters()) counters->blocks_executed.fetch_add(1, std::memory_order_relaxed);
      attention_branch_forward(act, rs.attn_scratch, w.blocks[size_t(l)], a, B, Tn, D, c.n_head,
                               static_cast<const AttentionStats<T>*>(nullptr));
      F = act.u;
    } else {
      mlp_branch_forward(act, w.blocks[size_t(l)], int(N), D);
      F = act.update;
    }
    hyper_write(rs.streams(p + 1), X, C, F, N, n, D);
  }
  hyper_collapse(rs.hidden[1], rs.streams(c.sites()), N, n, D);
  stream_head_forward(rs, w.ln_f_weight, w.ln_f_bias, w.wte, 1, N, D);
}

template <typename T>
double hyper_loss(HyperRunState<T>& rs, const int32_t* targets, double* window_nll) {
  return language_model_loss(rs.losses, rs.targets, rs.logits, targets, rs.batch, rs.tokens, kByteVocab, window_nll);
}

#define FCA_INSTANTIATE(T)                                                                                         \
  template void hyper_read<T>(T*, const T*, const T*, int64_t, int, int);                                          \
  template void hyper_write<T>(T*, const T*, const T*, const T*, int64_t, int, int);                               \
  template void hyper_collapse<T>(T*, const T*, int64_t, int, int);                                                \
  template void hyper_forward<T>(const HyperModel<T>&, HyperRunState<T>&, const int32_t*, int, int,               \
                                 HyperCoefficientSource<T>&, int);                                                 \
  template double hyper_loss<T>(HyperRunState<T>&, const int32_t*, double*);
FCA_INSTANTIATE(float)
FCA_INSTANTIATE(double)
#undef FCA_INSTANTIATE

}  // namespace fca
