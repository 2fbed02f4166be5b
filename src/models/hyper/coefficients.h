// Where the hyper model's coefficient squares come from during a forward pass (docs/hyper.md,
// "Controllers"): one C_p [n+1, n+1] per site p and token, rows s = targets (0: the branch input, j + 1:
// new stream j), columns k = sources (0: the branch output, i + 1: old stream i), C[0, 0] = 0.
//
// - HyperLiveCoefficients: the controller computes C from the site's parameters (and, for dhc and
//   mhc, from the token's streams), counting one evaluation per site and pass; SHC's copy of its
//   constant counts too, so that "replay evaluates no controller" can fail for SHC as well.
// - HyperRecordingCoefficients: live, and every C is also written into a CoefficientTensor
//   [site 2L, token T', stream n+1, source n+1].
// - HyperReplayedCoefficients: C is read from a CoefficientTensor; it holds no controller.
#pragma once
#include <cstdint>
#include <tuple>

#include "models/base/batch_position.h"
#include "models/base/controller_source.h"
#include "models/base/recorded_source.h"
#include "models/coefficient_tensor.h"
#include "models/hyper/model.h"

namespace fca {

// The controller's working buffers for one site, N = B*T' rows (carved by the run state).
template <typename T>
struct HyperControllerScratch {
  T* normed = nullptr;   // dhc: [N, n, D] LN0(X[i]) (no affine)
  T* ln_mean = nullptr;  // dhc: [N * n]
  T* ln_rstd = nullptr;  // dhc: [N * n]
  T* z = nullptr;        // dhc: [N, n, n+2] W LN0(X[i]); mhc: [N, n^2+2n] Phi v (before 1/r)
  T* rms = nullptr;      // mhc: [N] r = sqrt(mean(v^2) + hc_norm_eps)
  const T* ones = nullptr;   // [D] the non-affine LayerNorm's weight
  const T* zeros = nullptr;  // [D] and bias
};

// The coefficient function of docs/hyper.md's "Controllers", reading a model's hc parameters.
template <typename T>
class HyperController {
 public:
  HyperController(const HyperConfig& config, const HyperWeights<T>& weights) : config_(config), weights_(weights) {}
  // C [N, (n+1)^2] for `site` from the streams X [N, n, D], N = batch.batch * batch.tokens.
  void evaluate(int site, const BatchPosition& batch, const T* streams, const HyperControllerScratch<T>& scratch,
                T* C) const;

 private:
  HyperConfig config_;
  HyperWeights<T> weights_;
};

// The controller's arithmetic per token and site beside its GEMMs (counted as controller FLOPs by
// the convention of core/exec_counters.h; the GEMMs, 2 n D (n+2) for dhc and 2 n D (n^2 + 2n) for
// mhc per token, are counted where they are issued, also as controller FLOPs).
int64_t hyper_dhc_controller_flops_per_token(const HyperConfig& config);
int64_t hyper_mhc_controller_flops_per_token(const HyperConfig& config);

// The Sinkhorn projection of docs/hyper.md on kSinkhornLanes n x n matrices of logits at once
// (target rows, source columns), in place, Z [n * n][kSinkhornLanes] (lane q holds matrix q, lanes
// innermost so that the compiler vectorises across matrices): a column softmax plus eps, a row
// normalisation, then iters - 1 more column and row normalisations (rows last, so rows sum to 1 to
// rounding), each sum + eps. Lanes never mix: a matrix's result does not depend on the others.
inline constexpr int kSinkhornLanes = 16;
template <typename T>
void hyper_sinkhorn_lanes(T* Z, int n, int iters, T eps);

// Its backward by unrolled backprop through every step (docs/hyper.md, "Backward"): from the logits Z and the
// gradient dM of the result, dZ (all [n * n][kSinkhornLanes]). The forward steps are recomputed into
// `work` ([(2 iters + 3) n^2][kSinkhornLanes]: the steps and two gradient buffers). Normalisation
// Y = M / (sigma + eps) along an axis: dM = (dY - sum_axis dY Y) / (sigma + eps); column softmax P:
// dZ = P (dM - sum_col dM P).
template <typename T>
void hyper_sinkhorn_backward_lanes(const T* Z, int n, int iters, T eps, const T* dM, T* dZ, T* work);

template <typename T>
class HyperCoefficientSource : public ControllerSource {
 public:
  using Value = T;
  using Inputs = std::tuple<const T*, const HyperControllerScratch<T>&>;  // streams, scratch
  // Writes C [N, (n+1)^2] for `site`; streams X [N, n, D] are read by a live controller only.
  virtual void coefficients(int site, const BatchPosition& batch, const T* streams,
                            const HyperControllerScratch<T>& scratch, T* C) = 0;
};

template <typename T>
class HyperLiveCoefficients : public HyperCoefficientSource<T> {
 public:
  explicit HyperLiveCoefficients(const HyperModel<T>& model) : controller_(model.config(), model.weights()) {}
  bool evaluates_controller() const override { return true; }
  void coefficients(int site, const BatchPosition& batch, const T* streams, const HyperControllerScratch<T>& scratch,
                    T* C) override {
    controller_.evaluate(site, batch, streams, scratch, C);
  }

 private:
  HyperController<T> controller_;
};

// Recording and replay are the shared sources of models/base/recorded_source.h over each site's
// (n+1)^2 square per token; replay reads the masked corner (0, 0) as 0, as the live square has it.
template <typename T>
using HyperRecordingCoefficients = RecordingSource<HyperLiveCoefficients<T>>;
template <typename T>
using HyperReplayedCoefficients = ReplayedSource<HyperCoefficientSource<T>>;

// [site 2L, token `tokens`, stream n+1, source n+1].
CoefficientShape hyper_coefficient_shape(const HyperConfig& config, int tokens);
// A tensor of that shape for `windows` windows with (0, 0) masked at every site.
CoefficientTensor hyper_coefficient_tensor(const HyperConfig& config, int windows, int tokens);
// Window w of `out` set to the identity squares of docs/hyper.md (the initialisation's): read
// 1 at source r(p) + 1, writes 1, mixing I; replaying them runs the block weights as plain Pre-Norm.
void fill_hyper_identity(const HyperConfig& config, CoefficientTensor& out, int window);

}  // namespace fca
