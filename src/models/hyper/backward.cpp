// Backward pass of the hyper model (docs/hyper.md, "Backward"). Walks the sites in reverse, following
// forward.cpp: the write, the branch, the read, then the controller, whose gradient reaches the
// streams it read (dhc: through LN0; mhc: through Phi and 1/r) and its parameters. Per-token work is
// parallel; every sum over tokens runs in token order or through a GEMM, so results are
// deterministic for a thread count.
#include <omp.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/phase_timer.h"
#include "models/base/block.h"
#include "models/hyper/forward.h"
#include "ops/embedding.h"
#include "ops/fast_math.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/simd.h"

namespace fca {
namespace {

// Dot products over the width: 16 fixed lanes (ops/fast_math.h), so that they vectorise and stay
// reproducible.
template <typename T>
T dot(const T* x, const T* y, int D) {
  return lane_dot(x, y, D);
}

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + fast_exp(-x));
}

// The write's transposes for one token: df = sum_j C[j+1, 0] g_j and dx[i] = sum_j C[j+1, i+1] g_j
// (g_j = dX'[j] [D], j ascending), with S = n + 1 and C the token's square. For float through
// simd::mix_streams (weights gathered into `weights` [n + 1][n], the sources' pointers into
// `sources` [n]), which starts each sum at its first product: the same values as a sum started
// at 0, up to the sign of a zero.
template <typename T>
void mix_transposed(T* df, T* dx, const T* g, const T* C, int n, int D, std::vector<T>& weights,
                    std::vector<const T*>& sources) {
  const int S = n + 1;
  if constexpr (std::is_same_v<T, float>) {
    for (int j = 0; j < n; ++j) {  // row 0: the writes; row 1 + i: column i + 1 of the mixing
      weights[size_t(j)] = C[(1 + j) * S];
      for (int i = 0; i < n; ++i) weights[size_t((1 + i) * n + j)] = C[(1 + j) * S + 1 + i];
    }
    for (int j = 0; j < n; ++j) sources[size_t(j)] = g + int64_t(j) * D;
    constexpr int kOutputs = simd::kMixStreamsMaxOutputs;
    float* out[kOutputs];
    out[0] = df;
    simd::mix_streams(out, 1, sources.data(), n, weights.data(), D);
    for (int i0 = 0; i0 < n; i0 += kOutputs) {
      const int m = std::min(kOutputs, n - i0);
      for (int q = 0; q < m; ++q) out[q] = dx + int64_t(i0 + q) * D;
      simd::mix_streams(out, m, sources.data(), n, weights.data() + (1 + i0) * n, D);
    }
  } else {
    for (int d = 0; d < D; ++d) df[d] = 0;
    for (int j = 0; j < n; ++j)
      for (int d = 0; d < D; ++d) df[d] += C[(1 + j) * S] * g[int64_t(j) * D + d];
    for (int i = 0; i < n; ++i) {
      T* out = dx + int64_t(i) * D;
      for (int d = 0; d < D; ++d) out[d] = 0;
      for (int j = 0; j < n; ++j)
        for (int d = 0; d < D; ++d) out[d] += C[(1 + j) * S + 1 + i] * g[int64_t(j) * D + d];
    }
  }
}

// The controller's gradient at one site from dC [N, S*S]: parameters into dw, streams into dX.
template <typename T>
void controller_backward(const HyperConfig& c, const HyperSiteWeights<T>& w, HyperSiteWeights<T>& dw,
                         const HyperControllerScratch<T>& k, const T* X, const T* dC, T* dX, HyperRunState<T>& rs,
                         int64_t N) {
  const PhaseScope phase_scope(Phase::controller);
  const int n = c.streams, S = c.square(), D = c.d_model;
  // The static part is added to every coefficient (shc, dhc) or logit (mhc); for shc and dhc its
  // gradient is dC summed over tokens, in token order.
  if (c.variant != HyperVariant::mhc)
    for (int64_t t = 0; t < N; ++t)
      for (int e = 1; e < S * S; ++e) dw.static_part[e] += dC[t * S * S + e];
  if (c.variant == HyperVariant::shc) return;
  if (c.variant == HyperVariant::dhc) {
    const int W = n + 2;
    const T s_alpha = w.dyn_scale[0], s_beta = w.dyn_scale[1];
    T* dz = rs.d_z;
    // tau from the saved z; d tau from dC; the scales' gradients summed in token order.
    T d_alpha = 0, d_beta = 0;
    for (int64_t t = 0; t < N; ++t) {
      const T* Ct = dC + t * S * S;
      for (int i = 0; i < n; ++i) {
        const T* z = k.z + (t * n + i) * W;
        T* g = dz + (t * n + i) * W;
        for (int q = 0; q < W; ++q) {
          const T tau = c.tanh ? fast_tanh(z[q]) : z[q];
          const T d_tau = q == 0 ? Ct[1 + i] : q <= n ? Ct[q * S + 1 + i] : Ct[(1 + i) * S];
          if (q <= n) d_alpha += d_tau * tau;
          else d_beta += d_tau * tau;
          const T scaled = (q <= n ? s_alpha : s_beta) * d_tau;
          g[q] = c.tanh ? scaled * (T(1) - tau * tau) : scaled;
        }
      }
    }
    dw.dyn_scale[0] += d_alpha;
    dw.dyn_scale[1] += d_beta;
    // z = LN0(X) W^T: dW += dz^T LN0(X); d LN0(X) = dz W; then LN0's backward into the streams.
    gemm<T>(true, false, W, D, int(N * n), T(1), dz, W, k.normed, D, T(1), dw.dyn_weight, D);
    gemm<T>(false, false, int(N * n), D, W, T(1), dz, W, w.dyn_weight, D, T(0), rs.d_normed, D);
    layernorm_backward(dX, rs.d_discard, rs.d_discard + D, rs.d_normed, X, k.ln_mean, k.ln_rstd, k.ones, N * n, D);
    return;
  }
  // mhc: z_e = alpha_g (Phi v)_e / r + b_e; C = sigma + eps (read), 2 sigma (write), Sinkhorn (mix).
  const int E = c.valid_entries();
  const int64_t nD = int64_t(n) * D;
  const T eps = T(c.eps);
  std::vector<T> d_logits(size_t(N) * E);  // dz_e per token, for the parameter sums in token order
  // Blocks of kSinkhornLanes tokens: the Sinkhorn backward runs across the block's tokens at once
  // (bitwise the one-matrix backward per token).
  constexpr int L = kSinkhornLanes;
  const int nn = n * n;
#pragma omp parallel
  {
    std::vector<T> Z(size_t(nn) * L), dM(size_t(nn) * L), dZ(size_t(nn) * L), work(size_t(2 * c.sinkhorn_iters + 3) * nn * L);
#pragma omp for schedule(static)
    for (int64_t t0 = 0; t0 < N; t0 += L) {
      const int m = int(std::min<int64_t>(L, N - t0));
      std::fill(Z.begin(), Z.end(), T(0));  // unused lanes: any finite value
      std::fill(dM.begin(), dM.end(), T(0));
      for (int q = 0; q < m; ++q) {
        const int64_t t = t0 + q;
        const T r = k.rms[t];
        const T* g = k.z + t * E;
        const T* Ct = dC + t * S * S;
        T* dz = d_logits.data() + t * E;
        auto logit = [&](int s, int col) {
          const int e = hyper_entry(n, s, col);
          const T alpha = w.dyn_scale[s == 0 ? 0 : col == 0 ? 1 : 2];
          return alpha * (g[e] / r) + w.static_part[s * S + col];
        };
        for (int col = 1; col <= n; ++col) {
          const T sg = sigmoid(logit(0, col));
          dz[hyper_entry(n, 0, col)] = Ct[col] * sg * (T(1) - sg);
        }
        for (int s = 1; s <= n; ++s) {
          const T sg = sigmoid(logit(s, 0));
          dz[hyper_entry(n, s, 0)] = Ct[s * S] * T(2) * sg * (T(1) - sg);
        }
        for (int s = 1; s <= n; ++s)
          for (int col = 1; col <= n; ++col) {
            Z[size_t((s - 1) * n + col - 1) * L + q] = logit(s, col);
            dM[size_t((s - 1) * n + col - 1) * L + q] = Ct[s * S + col];
          }
      }
      hyper_sinkhorn_backward_lanes(Z.data(), n, c.sinkhorn_iters, eps, dM.data(), dZ.data(), work.data());
      for (int q = 0; q < m; ++q) {
        const int64_t t = t0 + q;
        const T r = k.rms[t];
        const T* g = k.z + t * E;
        T* dz = d_logits.data() + t * E;
        for (int s = 1; s <= n; ++s)
          for (int col = 1; col <= n; ++col) dz[hyper_entry(n, s, col)] = dZ[size_t((s - 1) * n + col - 1) * L + q];
        // u = g / r: du = alpha dz; dg = du / r (into rs.d_z for the GEMMs); the 1/r path into v.
        T u_du = 0;
        T* dg = rs.d_z + t * E;
        for (int e = 0; e < E; ++e) {
          const int group = e < n ? 0 : (e - n) % (n + 1) == 0 ? 1 : 2;
          const T du = w.dyn_scale[group] * dz[e];
          u_du += (g[e] / r) * du;
          dg[e] = du / r;
        }
        const T coefficient = -u_du / (r * r * T(nD));
        const T* v = X + t * nD;
        T* dv = dX + t * nD;
        for (int64_t i = 0; i < nD; ++i) dv[i] += coefficient * v[i];
      }
    }
  }
  // The logits' parameters, summed in token order.
  for (int64_t t = 0; t < N; ++t) {
    const T r = k.rms[t];
    const T* g = k.z + t * E;
    const T* dz = d_logits.data() + t * E;
    for (int s = 0; s <= n; ++s)
      for (int col = 0; col <= n; ++col) {
        if (s == 0 && col == 0) continue;
        const int e = hyper_entry(n, s, col), group = s == 0 ? 0 : col == 0 ? 1 : 2;
        dw.static_part[s * S + col] += dz[e];
        dw.dyn_scale[group] += dz[e] * (g[e] / r);
      }
  }
  // g = Phi v: dPhi += dg^T V; dV += dg Phi.
  gemm<T>(true, false, E, int(nD), int(N), T(1), rs.d_z, E, X, int(nD), T(1), dw.dyn_weight, int(nD));
  gemm<T>(false, false, int(N), int(nD), E, T(1), rs.d_z, E, w.dyn_weight, int(nD), T(1), dX, int(nD));
}

}  // namespace

template <typename T>
void hyper_backward(const HyperModel<T>& model, HyperRunState<T>& rs, HyperModel<T>& grads, T loss_scale) {
  if (!rs.keep_all_layers) throw Error("backward needs a run state that keeps every layer's activations");
  if (omp_get_max_threads() > rs.scratch_threads)
    throw Error("backward: run state was sized for " + std::to_string(rs.scratch_threads) + " threads, now " +
                std::to_string(omp_get_max_threads()));
  const HyperConfig& c = model.config();
  const int D = c.d_model, H = c.n_head, n = c.streams, S = c.square(), B = rs.batch, Tn = rs.tokens;
  const int64_t N = int64_t(B) * Tn;
  const auto& w = model.weights();
  auto& dw = grads.weights();

  stream_head_backward(rs, dw.wte, dw.ln_f_weight, dw.ln_f_bias, w.ln_f_weight, w.wte, loss_scale, 1, N, D);
  // h = the sum of the streams: every stream gets dh.
  int cur = 0;
  {
    T* dXn = rs.d_streams[cur];
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < N; ++t)
      for (int i = 0; i < n; ++i) std::copy(rs.d_hidden + t * D, rs.d_hidden + (t + 1) * D, dXn + (t * n + i) * D);
  }
  const BlockGradScratch<T> scratch{rs.d_u, rs.d_ln2_in, rs.d_small, rs.d_wide, rs.d_qkv, rs.attn_scratch};
  for (int p = c.sites() - 1; p >= 0; --p) {
    const int l = p / 2;
    const T* dXn = rs.d_streams[cur];
    T* dX = rs.d_streams[1 - cur];
    const T* X = rs.streams(p);
    const T* C = rs.site_coefficients(p);
    const BlockActivations<T>& act = rs.blocks[size_t(l)];
    const T* F = p % 2 == 0 ? act.u : act.update;
    T* dF = p % 2 == 0 ? rs.d_u : rs.d_update;
    T* dC = rs.d_coefficients;
    // The write X'[j] = C[j+1, 0] F + sum_i C[j+1, i+1] X[i].
#pragma omp parallel
    {
    std::vector<T> weights(size_t(S) * n);           // mix_transposed's buffers
    std::vector<const T*> sources(static_cast<size_t>(n));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < N; ++t) {
      const T* Ct = C + t * S * S;
      T* dCt = dC + t * S * S;
      const T* x = X + t * n * D;
      const T* dxn = dXn + t * n * D;
      const T* f = F + t * D;
      T* df = dF + t * D;
      T* dx = dX + t * n * D;
      dCt[0] = 0;
      for (int j = 0; j < n; ++j) {
        dCt[(1 + j) * S] = dot(dxn + int64_t(j) * D, f, D);
        for (int i = 0; i < n; ++i) dCt[(1 + j) * S + 1 + i] = dot(dxn + int64_t(j) * D, x + int64_t(i) * D, D);
      }
      // dF = sum_j C[j+1, 0] dX'[j], dX[i] = sum_j C[j+1, i+1] dX'[j], j ascending: the
      // transposes of the write's weighted sums, through the forward's kernel for float.
      mix_transposed(df, dx, dxn, Ct, n, D, weights, sources);
    }
    }
    // The branch, into d a.
    T* da = rs.d_read;
    std::fill(da, da + N * D, T(0));
    if (p % 2 == 0)
      attention_branch_backward(da, dw.blocks[size_t(l)], scratch, act, w.blocks[size_t(l)], rs.read(p), B, Tn, D, H);
    else
      mlp_branch_backward(da, dw.blocks[size_t(l)], scratch, act, w.blocks[size_t(l)], dF, int(N), D);
    // The read a = sum_i C[0, i+1] X[i].
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < N; ++t) {
      const T* Ct = C + t * S * S;
      T* dCt = dC + t * S * S;
      const T* x = X + t * n * D;
      const T* dat = da + t * D;
      T* dx = dX + t * n * D;
      for (int i = 0; i < n; ++i) {
        dCt[1 + i] = dot(dat, x + int64_t(i) * D, D);
        if constexpr (std::is_same_v<T, float>) {
          simd::axpy(dx + int64_t(i) * D, dat, Ct[1 + i], D);
        } else {
          for (int d = 0; d < D; ++d) dx[int64_t(i) * D + d] += Ct[1 + i] * dat[d];
        }
      }
    }
    controller_backward(c, w.sites[size_t(p)], dw.sites[size_t(p)], rs.controller_scratch(p), X, dC, dX, rs, N);
    cur = 1 - cur;
  }
  // The streams start as copies of x_0.
  {
    const T* dX0 = rs.d_streams[cur];
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < N; ++t)
      for (int d = 0; d < D; ++d) {
        T s = 0;
        for (int i = 0; i < n; ++i) s += dX0[(t * n + i) * D + d];
        rs.d_hidden[t * D + d] = s;
      }
  }
  embedding_backward(dw.wte, dw.wpe, rs.d_hidden, rs.tokens_in, B, Tn, D);
}

template void hyper_backward<float>(const HyperModel<float>&, HyperRunState<float>&, HyperModel<float>&, float);
template void hyper_backward<double>(const HyperModel<double>&, HyperRunState<double>&, HyperModel<double>&, double);

}  // namespace fca
