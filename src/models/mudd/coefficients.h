// Where a MUDD model's mixing coefficients alpha_i [N, C_i * S_i] (flat index c * S_i + j, the
// generator's output order) come from: the live DA generator (counted), live and recorded into a
// CoefficientTensor [layer L, token T, stream 4, source L+1], or replayed from one (the generator is
// never reached). The audit caches the post-bias alpha, exactly as it multiplies the sources.
#pragma once
#include <cstdint>
#include <tuple>

#include "models/coefficient_tensor.h"
#include "models/base/batch_position.h"
#include "models/base/controller_source.h"
#include "models/base/recorded_source.h"
#include "models/mudd/model.h"

namespace fca {

// The coefficient shape of a MUDD model: [L, T, 4, L+1]; valid iff source <= layer + 1 and
// (layer < L - 1 or stream == 0).
CoefficientTensor make_mudd_coefficients(const MuddConfig& config, int windows, int tokens);

// What the DA generator of module i saves for backward (all [N, ...] rows of the batch).
template <typename T>
struct MuddDaSaved {
  T* rstd;    // [N]      1 / rms(X_{i+1})
  T* normed;  // [N, D]   X_{i+1} / rms
  T* pre;     // [N, H_i] normed W1^T
  T* act;     // [N, H_i] GELU(pre)
};

// The DA generator of module i: alpha = W2 GELU(W1 rms(X_{i+1})) + beta, alpha [N, C_i * S_i].
template <typename T>
void mudd_da_generator(const MuddConfig& config, const MuddDaWeights<T>& da, const T* newest, const BatchPosition& batch,
                       const MuddDaSaved<T>& saved, T* alpha);

template <typename T>
class MuddCoefficientSource : public ControllerSource {
 public:
  using Value = T;
  using Inputs = std::tuple<const T*, const MuddDaSaved<T>&>;
  // alpha's rows hold only module i's valid coordinates, C_i streams of S_i sources (recorded_source.h).
  static constexpr bool kPackedValidRows = true;
  // Writes alpha [N, C_i * S_i] for DA module `layer`, given the newest source X_{layer+1} [N, D].
  virtual void coefficients(int layer, const BatchPosition& batch, const T* newest, const MuddDaSaved<T>& saved,
                            T* alpha) = 0;
};

template <typename T>
class MuddLiveCoefficients : public MuddCoefficientSource<T> {
 public:
  explicit MuddLiveCoefficients(const MuddModel<T>& model) : model_(model) {}
  bool evaluates_controller() const override { return true; }
  void coefficients(int layer, const BatchPosition& batch, const T* newest, const MuddDaSaved<T>& saved,
                    T* alpha) override;

 protected:
  const MuddModel<T>& model_;
};

// Live and recorded, and replayed (models/base/recorded_source.h): the sink and the replayed tensor
// have make_mudd_coefficients' shape.
template <typename T>
using MuddRecordingCoefficients = RecordingSource<MuddLiveCoefficients<T>>;
template <typename T>
using MuddReplayedCoefficients = ReplayedSource<MuddCoefficientSource<T>>;

}  // namespace fca
