#include "models/hyper/coefficients.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/exec_counters.h"
#include "core/phase_timer.h"
#include "ops/fast_math.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"

namespace fca {

namespace {

// The bodies, inlined into one clone per instruction set below: the binary's baseline is SSE2 (4
// float lanes), AVX-512 runs the 16 lanes of a call in one vector. Every clone does the same IEEE
// operations per lane (no contraction: -ffp-contract=off; lanes never mix), so the results are
// bitwise the same whichever runs (HyperSinkhorn tests, compare_builds).
template <typename T>
[[gnu::always_inline]] inline void sinkhorn_lanes(T* Z, int n, int iters, T eps) {
  // Every lane loop is `omp simd`: the lanes are independent (no reduction across them), so the
  // vector code does per lane exactly what the scalar code would.
  constexpr int W = kSinkhornLanes;
  auto line = [&](int s, int k) { return Z + (int64_t(s) * n + k) * W; };
  T a[W], b[W];
  for (int k = 0; k < n; ++k) {  // the column softmax plus eps
    #pragma omp simd
    for (int q = 0; q < W; ++q) a[q] = line(0, k)[q];
    for (int s = 1; s < n; ++s)
      #pragma omp simd
      for (int q = 0; q < W; ++q) a[q] = std::max(a[q], line(s, k)[q]);
    #pragma omp simd
    for (int q = 0; q < W; ++q) b[q] = 0;
    for (int s = 0; s < n; ++s) {
      T* z = line(s, k);
      #pragma omp simd
      for (int q = 0; q < W; ++q) b[q] += (z[q] = fast_exp(z[q] - a[q]));
    }
    for (int s = 0; s < n; ++s) {
      T* z = line(s, k);
      #pragma omp simd
      for (int q = 0; q < W; ++q) z[q] = z[q] / b[q] + eps;
    }
  }
  // Rows (column = false) or columns: the line's sum plus eps divides it.
  auto normalise = [&](bool column) {
    for (int u = 0; u < n; ++u) {
      #pragma omp simd
      for (int q = 0; q < W; ++q) b[q] = 0;
      for (int v = 0; v < n; ++v) {
        const T* z = column ? line(v, u) : line(u, v);
        #pragma omp simd
        for (int q = 0; q < W; ++q) b[q] += z[q];
      }
      #pragma omp simd
      for (int q = 0; q < W; ++q) b[q] = b[q] + eps;
      for (int v = 0; v < n; ++v) {
        T* z = column ? line(v, u) : line(u, v);
        #pragma omp simd
        for (int q = 0; q < W; ++q) z[q] /= b[q];
      }
    }
  };
  normalise(false);
  for (int it = 1; it < iters; ++it) {
    normalise(true);
    normalise(false);
  }
}

template <typename T>
[[gnu::always_inline]] inline void sinkhorn_backward_lanes(const T* Z, int n, int iters, T eps, const T* dM, T* dZ,
                                                           T* work) {
  constexpr int W = kSinkhornLanes;
  const int nn = n * n, steps = 2 * iters;
  auto entry = [&](T* m, int at) { return m + int64_t(at) * W; };
  T* P = work;
  auto state = [&](int k) { return work + (nn + int64_t(k) * nn) * W; };
  T a[W], b[W];
  for (int k = 0; k < n; ++k) {
    #pragma omp simd
    for (int q = 0; q < W; ++q) a[q] = Z[int64_t(k) * W + q];
    for (int s = 1; s < n; ++s)
      #pragma omp simd
      for (int q = 0; q < W; ++q) a[q] = std::max(a[q], Z[int64_t(s * n + k) * W + q]);
    #pragma omp simd
    for (int q = 0; q < W; ++q) b[q] = 0;
    for (int s = 0; s < n; ++s) {
      T* p = entry(P, s * n + k);
      const T* z = Z + int64_t(s * n + k) * W;
      #pragma omp simd
      for (int q = 0; q < W; ++q) b[q] += (p[q] = fast_exp(z[q] - a[q]));
    }
    for (int s = 0; s < n; ++s) {
      T* p = entry(P, s * n + k);
      T* out = entry(state(0), s * n + k);
      #pragma omp simd
      for (int q = 0; q < W; ++q) {
        p[q] = p[q] / b[q];
        out[q] = p[q] + eps;
      }
    }
  }
  auto index = [&](int k, int u, int v) { return k % 2 == 1 ? u * n + v : v * n + u; };  // odd steps: rows
  for (int k = 1; k < steps; ++k) {
    T* in = state(k - 1);
    T* out = state(k);
    for (int u = 0; u < n; ++u) {
      #pragma omp simd
      for (int q = 0; q < W; ++q) b[q] = 0;
      for (int v = 0; v < n; ++v) {
        const T* x = entry(in, index(k, u, v));
        #pragma omp simd
        for (int q = 0; q < W; ++q) b[q] += x[q];
      }
      #pragma omp simd
      for (int q = 0; q < W; ++q) b[q] = b[q] + eps;
      for (int v = 0; v < n; ++v) {
        const T* x = entry(in, index(k, u, v));
        T* y = entry(out, index(k, u, v));
        #pragma omp simd
        for (int q = 0; q < W; ++q) y[q] = x[q] / b[q];
      }
    }
  }
  T* grad = work + int64_t(steps + 1) * nn * W;
  T* previous = grad + int64_t(nn) * W;
  std::copy(dM, dM + int64_t(nn) * W, grad);
  for (int k = steps - 1; k >= 1; --k) {
    T* in = state(k - 1);
    T* out = state(k);
    for (int u = 0; u < n; ++u) {
      #pragma omp simd
      for (int q = 0; q < W; ++q) a[q] = 0, b[q] = 0;  // the dot product and the sum
      for (int v = 0; v < n; ++v) {
        const int at = index(k, u, v);
        const T* x = entry(in, at);
        const T* y = entry(out, at);
        const T* g = entry(grad, at);
        #pragma omp simd
        for (int q = 0; q < W; ++q) {
          b[q] += x[q];
          a[q] += g[q] * y[q];
        }
      }
      #pragma omp simd
      for (int q = 0; q < W; ++q) b[q] = b[q] + eps;
      for (int v = 0; v < n; ++v) {
        const int at = index(k, u, v);
        const T* g = entry(grad, at);
        T* o = entry(previous, at);
        #pragma omp simd
        for (int q = 0; q < W; ++q) o[q] = (g[q] - a[q]) / b[q];
      }
    }
    std::swap(grad, previous);
  }
  for (int k = 0; k < n; ++k) {
    #pragma omp simd
    for (int q = 0; q < W; ++q) a[q] = 0;
    for (int s = 0; s < n; ++s) {
      const T* g = entry(grad, s * n + k);
      const T* p = entry(P, s * n + k);
      #pragma omp simd
      for (int q = 0; q < W; ++q) a[q] += g[q] * p[q];
    }
    for (int s = 0; s < n; ++s) {
      const T* g = entry(grad, s * n + k);
      const T* p = entry(P, s * n + k);
      T* dz = dZ + int64_t(s * n + k) * W;
      #pragma omp simd
      for (int q = 0; q < W; ++q) dz[q] = p[q] * (g[q] - a[q]);
    }
  }
}

#define FCA_SINKHORN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
FCA_SINKHORN_CLONES void sinkhorn_lanes_f32(float* Z, int n, int iters, float eps) { sinkhorn_lanes(Z, n, iters, eps); }
FCA_SINKHORN_CLONES void sinkhorn_backward_lanes_f32(const float* Z, int n, int iters, float eps, const float* dM,
                                                     float* dZ, float* work) {
  sinkhorn_backward_lanes(Z, n, iters, eps, dM, dZ, work);
}
#undef FCA_SINKHORN_CLONES

}  // namespace

template <typename T>
void hyper_sinkhorn_lanes(T* Z, int n, int iters, T eps) {
  if constexpr (std::is_same_v<T, float>) sinkhorn_lanes_f32(Z, n, iters, eps);
  else sinkhorn_lanes(Z, n, iters, eps);  // double: the finite-difference checks
}

template <typename T>
void hyper_sinkhorn_backward_lanes(const T* Z, int n, int iters, T eps, const T* dM, T* dZ, T* work) {
  if constexpr (std::is_same_v<T, float>) sinkhorn_backward_lanes_f32(Z, n, iters, eps, dM, dZ, work);
  else sinkhorn_backward_lanes(Z, n, iters, eps, dM, dZ, work);
}

namespace {

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + fast_exp(-x));
}

}  // namespace

int64_t hyper_dhc_controller_flops_per_token(const HyperConfig& c) {
  const int64_t n = c.streams, D = c.d_model;
  // Per stream: LN0 as ops/simd.cpp's LayerNormRows runs it (the sum D and the mean's division 1,
  // deviations, squares and their sum 3D, the variance's division, eps, sqrt and the reciprocal 4,
  // centring and scaling 2D; its unit weight and zero bias are not the controller's arithmetic):
  // 6D + 5; then per entry of z: tanh (if on), times the scale, plus the static part.
  return n * (6 * D + 5) + n * (n + 2) * (c.tanh ? 3 : 2);
}

int64_t hyper_mhc_controller_flops_per_token(const HyperConfig& c) {
  const int64_t n = c.streams, nD = n * c.d_model, E = c.valid_entries();
  // RMS: nD squares and nD adds, the division, eps and sqrt (3); per entry g / r, times alpha, plus
  // b (3 E); reads sigma (negation, exp, add, division) + eps: 5 n; writes sigma and 2x: 5 n;
  // Sinkhorn: the column softmax (subtraction, exp, sum, division, eps: 5 per entry), then iters
  // row and iters - 1 column normalisations (n sums + eps + n divisions per line: n (2n + 1) each).
  return 2 * nD + 3 + 3 * E + 10 * n + 5 * n * n + int64_t(2 * c.sinkhorn_iters - 1) * n * (2 * n + 1);
}

template <typename T>
void HyperController<T>::evaluate(int site, const BatchPosition& batch, const T* streams,
                                  const HyperControllerScratch<T>& scratch, T* C) const {
  const PhaseScope phase_scope(Phase::controller);  // its GEMMs and norms count as theirs (nested scopes)
  count_controller_evaluation(batch);
  const HyperConfig& c = config_;
  const HyperSiteWeights<T>& w = weights_.sites[size_t(site)];
  const int n = c.streams, S = c.square(), D = c.d_model;
  const int64_t N = int64_t(batch.batch) * batch.tokens;
  const T* st = w.static_part;
  if (c.variant == HyperVariant::shc) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < N; ++t) {
      std::copy(st, st + S * S, C + t * S * S);
      C[t * S * S] = T(0);
    }
    return;
  }
  if (c.variant == HyperVariant::dhc) {
    // z_i = W LN0(X[i]) for every token and stream: one GEMM over N n rows.
    const int W = n + 2;
    layernorm_forward(scratch.normed, scratch.ln_mean, scratch.ln_rstd, streams, scratch.ones, scratch.zeros, N * n, D);
    {
      const ControllerGemms controller_gemms;
      gemm<T>(false, true, int(N * n), W, D, T(1), scratch.normed, D, w.dyn_weight, D, T(0), scratch.z, W);
    }
    count_controller_flops(N * hyper_dhc_controller_flops_per_token(c));
    const T s_alpha = w.dyn_scale[0], s_beta = w.dyn_scale[1];
    const bool with_tanh = c.tanh;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < N; ++t) {
      T* Ct = C + t * S * S;
      Ct[0] = T(0);
      for (int i = 0; i < n; ++i) {
        const T* z = scratch.z + (t * n + i) * W;
        auto tau = [&](int k) { return with_tanh ? fast_tanh(z[k]) : z[k]; };
        Ct[1 + i] = st[1 + i] + s_alpha * tau(0);                                     // read weight of stream i
        for (int j = 0; j < n; ++j) Ct[(1 + j) * S + 1 + i] = st[(1 + j) * S + 1 + i] + s_alpha * tau(1 + j);  // i -> j
        Ct[(1 + i) * S] = st[(1 + i) * S] + s_beta * tau(n + 1);                      // write weight into stream i
      }
    }
    return;
  }
  // mhc: u = (Phi v) / r with v the token's n D stream values, one GEMM over N rows.
  const int E = c.valid_entries();
  const int64_t nD = int64_t(n) * D;
  {
    const ControllerGemms controller_gemms;
    gemm<T>(false, true, int(N), E, int(nD), T(1), streams, int(nD), w.dyn_weight, int(nD), T(0), scratch.z, E);
  }
  count_controller_flops(N * hyper_mhc_controller_flops_per_token(c));
  const T alpha_read = w.dyn_scale[0], alpha_write = w.dyn_scale[1], alpha_mix = w.dyn_scale[2];
  const T eps = T(c.eps), norm_eps = T(c.norm_eps);
  const int iters = c.sinkhorn_iters;
  // Blocks of kSinkhornLanes tokens: the reads, writes and logits per token, then the Sinkhorn
  // projections of the whole block at once (bitwise the per-token projection, vectorised across
  // tokens).
  constexpr int W = kSinkhornLanes;
#pragma omp parallel
  {
    std::vector<T> Z(size_t(n) * n * W);
#pragma omp for schedule(static)
    for (int64_t t0 = 0; t0 < N; t0 += W) {
      const int m = int(std::min<int64_t>(W, N - t0));
      std::fill(Z.begin(), Z.end(), T(0));  // unused lanes: any finite value
      for (int q = 0; q < m; ++q) {
        const int64_t t = t0 + q;
        const T r = std::sqrt(lane_dot(streams + t * nD, streams + t * nD, int(nD)) / T(nD) + norm_eps);
        scratch.rms[t] = r;
        const T* g = scratch.z + t * E;
        T* Ct = C + t * S * S;
        Ct[0] = T(0);
        for (int k = 1; k <= n; ++k) Ct[k] = sigmoid(alpha_read * (g[hyper_entry(n, 0, k)] / r) + st[k]) + eps;
        for (int s = 1; s <= n; ++s) Ct[s * S] = T(2) * sigmoid(alpha_write * (g[hyper_entry(n, s, 0)] / r) + st[s * S]);
        for (int s = 1; s <= n; ++s)
          for (int k = 1; k <= n; ++k)
            Z[(size_t(s - 1) * n + k - 1) * W + q] = alpha_mix * (g[hyper_entry(n, s, k)] / r) + st[s * S + k];
      }
      hyper_sinkhorn_lanes(Z.data(), n, iters, eps);
      for (int q = 0; q < m; ++q) {
        T* Ct = C + (t0 + q) * S * S;
        for (int s = 1; s <= n; ++s)
          for (int k = 1; k <= n; ++k) Ct[s * S + k] = Z[(size_t(s - 1) * n + k - 1) * W + q];
      }
    }
  }
}

CoefficientShape hyper_coefficient_shape(const HyperConfig& config, int tokens) {
  return CoefficientShape{config.sites(), tokens, config.square(), config.square()};
}

CoefficientTensor hyper_coefficient_tensor(const HyperConfig& config, int windows, int tokens) {
  CoefficientTensor t(windows, hyper_coefficient_shape(config, tokens));
  for (int p = 0; p < config.sites(); ++p) t.set_valid(p, 0, 0, false);
  return t;
}

void fill_hyper_identity(const HyperConfig& config, CoefficientTensor& out, int window) {
  const CoefficientShape& s = out.shape();
  std::fill_n(out.window_data(window), s.per_window(), 0.0f);
  for (int p = 0; p < s.layers; ++p)
    for (int t = 0; t < s.tokens; ++t) {
      out.at(window, p, t, 0, 1 + config.read_stream(p)) = 1.0f;
      for (int j = 1; j <= config.streams; ++j) {
        out.at(window, p, t, j, 0) = 1.0f;
        out.at(window, p, t, j, j) = 1.0f;
      }
    }
}

template void hyper_sinkhorn_lanes<float>(float*, int, int, float);
template void hyper_sinkhorn_lanes<double>(double*, int, int, double);
template void hyper_sinkhorn_backward_lanes<float>(const float*, int, int, float, const float*, float*, float*);
template void hyper_sinkhorn_backward_lanes<double>(const double*, int, int, double, const double*, double*, double*);
template class HyperController<float>;
template class HyperController<double>;

}  // namespace fca
