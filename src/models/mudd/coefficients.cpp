#include "models/mudd/coefficients.h"

#include "core/error.h"
#include "core/phase_timer.h"
#include "core/exec_counters.h"
#include "ops/gemm.h"
#include "ops/norms.h"

namespace fca {

CoefficientTensor make_mudd_coefficients(const MuddConfig& c, int windows, int tokens) {
  CoefficientTensor t(windows, CoefficientShape{c.n_layer, tokens, 4, c.n_layer + 1});
  for (int l = 0; l < c.n_layer; ++l)
    for (int s = 0; s < 4; ++s)
      for (int k = 0; k <= c.n_layer; ++k) t.set_valid(l, s, k, k <= l + 1 && s < c.streams(l));
  return t;
}

template <typename T>
void mudd_da_generator(const MuddConfig& c, const MuddDaWeights<T>& da, const T* newest, const BatchPosition& batch,
                       const MuddDaSaved<T>& saved, T* alpha) {
  const PhaseScope phase_scope(Phase::controller);
  count_controller_evaluation(batch);
  const int64_t N = int64_t(batch.batch) * batch.tokens;
  const int D = c.dim, width = da.streams * da.sources;
  // Non-GEMM work per row: RMSNorm (sum of squares 2D, divide, add eps, sqrt, reciprocal, scale D),
  // exact GELU 5 per hidden unit (x/sqrt2, erf, 1 +, x *, 0.5 *), the static bias `width`.
  count_controller_flops(N * (3 * int64_t(D) + 4 + 5 * int64_t(da.hidden) + width));
  rmsnorm_forward<T>(saved.normed, saved.rstd, newest, nullptr, N, 1, D, D, c.norm_eps);
  linear_gelu_forward<T>(saved.pre, saved.act, saved.normed, da.w1, nullptr, int(N), D, da.hidden, GeluForm::erf);
  linear_forward<T>(alpha, saved.act, da.w2, da.beta, int(N), da.hidden, width);  // the static bias beta as the addend
}

template <typename T>
void MuddLiveCoefficients<T>::coefficients(int layer, const BatchPosition& batch, const T* newest,
                                           const MuddDaSaved<T>& saved, T* alpha) {
  mudd_da_generator(model_.config(), model_.weights().da[size_t(layer)], newest, batch, saved, alpha);
}

#define FCA_INSTANTIATE(T)                                                                                        \
  template void mudd_da_generator<T>(const MuddConfig&, const MuddDaWeights<T>&, const T*, const BatchPosition&, \
                                     const MuddDaSaved<T>&, T*);                                                 \
  template class MuddLiveCoefficients<T>;
FCA_INSTANTIATE(float)
FCA_INSTANTIATE(double)
#undef FCA_INSTANTIATE

}  // namespace fca
