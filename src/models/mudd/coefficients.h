// Where a MUDD model's mixing coefficients alpha_i [N, C_i * S_i] (flat index c * S_i + j, the
// generator's output order) come from: the live DA generator (counted), live and recorded into a
// CoefficientTensor [layer L, token T, stream 4, source L+1], or replayed from one (the generator is
// never reached). The audit caches the post-bias alpha, exactly as it multiplies the sources.
#pragma once
#include <cstdint>

#include "models/coefficient_tensor.h"
#include "models/gated/coefficients.h"  // BatchPosition
#include "models/mudd/model.h"

namespace fca {

// The coefficient shape of a MUDD model: [L, T, 4, L+1]; valid iff source <= layer + 1 and
// (layer < L - 1 or stream == 0).
CoefficientTensor make_mudd_coefficients(const MuddConfig& config, int windows, int tokens);

// The DA generator of module i: alpha = W2 GELU(W1 rms(X_{i+1})) + beta. scratch: [N, D + H_i].
void mudd_da_generator(const MuddConfig& config, const MuddDaWeights& da, const float* newest, int64_t N,
                       float* scratch, float* alpha);

class MuddCoefficientSource {
 public:
  virtual ~MuddCoefficientSource() = default;
  // Writes alpha [N, C_i * S_i] for DA module `layer`, given the newest source X_{layer+1} [N, D].
  virtual void coefficients(int layer, const BatchPosition& batch, const float* newest, float* scratch,
                            float* alpha) = 0;
  int64_t controller_evaluations() const { return controller_evaluations_; }

 protected:
  int64_t controller_evaluations_ = 0;
};

class MuddLiveCoefficients : public MuddCoefficientSource {
 public:
  explicit MuddLiveCoefficients(const MuddModel& model) : model_(model) {}
  void coefficients(int layer, const BatchPosition& batch, const float* newest, float* scratch, float* alpha) override;

 protected:
  const MuddModel& model_;
};

class MuddRecordingCoefficients : public MuddLiveCoefficients {
 public:
  MuddRecordingCoefficients(const MuddModel& model, CoefficientTensor& sink);
  void coefficients(int layer, const BatchPosition& batch, const float* newest, float* scratch, float* alpha) override;

 private:
  CoefficientTensor& sink_;
};

class MuddReplayedCoefficients : public MuddCoefficientSource {
 public:
  MuddReplayedCoefficients(const MuddConfig& config, const CoefficientTensor& coefficients);
  void coefficients(int layer, const BatchPosition& batch, const float* newest, float* scratch, float* alpha) override;

 private:
  MuddConfig config_;
  const CoefficientTensor& coefficients_;
};

}  // namespace fca
