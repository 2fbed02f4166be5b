#include "models/mudd/coefficients.h"

#include "core/error.h"
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

void mudd_da_generator(const MuddConfig& c, const MuddDaWeights& da, const float* newest, int64_t N, float* scratch,
                       float* alpha) {
  const int D = c.dim, width = da.streams * da.sources;
  float* normed = scratch;             // [N, D]
  float* hidden = scratch + N * D;     // [N, H_i]
  rmsnorm_forward(normed, newest, nullptr, N, D, D, c.norm_eps);
  gemm<float>(false, true, int(N), da.hidden, D, 1.0f, normed, D, da.w1, D, 0.0f, hidden, da.hidden);
  gelu_erf_forward(hidden, hidden, N * da.hidden);
  gemm<float>(false, true, int(N), width, da.hidden, 1.0f, hidden, da.hidden, da.w2, da.hidden, 0.0f, alpha, width);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int k = 0; k < width; ++k) alpha[n * width + k] += da.beta[k];
}

void MuddLiveCoefficients::coefficients(int layer, const BatchPosition& batch, const float* newest, float* scratch,
                                        float* alpha) {
  mudd_da_generator(model_.config(), model_.weights().da[size_t(layer)], newest, int64_t(batch.batch) * batch.tokens,
                    scratch, alpha);
  ++controller_evaluations_;
  if (ExecCounters* c = exec_counters()) c->controller_evaluations.fetch_add(1, std::memory_order_relaxed);
}

MuddRecordingCoefficients::MuddRecordingCoefficients(const MuddModel& model, CoefficientTensor& sink)
    : MuddLiveCoefficients(model), sink_(sink) {
  const auto& s = sink.shape();
  if (s.layers != model.config().n_layer || s.streams != 4 || s.sources != model.config().n_layer + 1)
    throw Error("MUDD recording sink has shape " + s.to_string() + ", expected [layer L, token T, stream 4, source L+1]");
}

void MuddRecordingCoefficients::coefficients(int layer, const BatchPosition& batch, const float* newest, float* scratch,
                                             float* alpha) {
  MuddLiveCoefficients::coefficients(layer, batch, newest, scratch, alpha);
  const MuddConfig& c = model_.config();
  const int C = c.streams(layer), S = c.sources(layer);
  if (batch.first_window + batch.batch > sink_.windows() || batch.tokens != sink_.shape().tokens)
    throw Error("MUDD recording sink holds " + std::to_string(sink_.windows()) + " windows of " +
                std::to_string(sink_.shape().tokens) + " tokens; the batch does not fit");
  for (int b = 0; b < batch.batch; ++b)
    for (int t = 0; t < batch.tokens; ++t) {
      const float* a = alpha + (int64_t(b) * batch.tokens + t) * C * S;
      for (int s = 0; s < C; ++s)
        for (int j = 0; j < S; ++j) sink_.at(batch.first_window + b, layer, t, s, j) = a[s * S + j];
    }
}

MuddReplayedCoefficients::MuddReplayedCoefficients(const MuddConfig& config, const CoefficientTensor& coefficients)
    : config_(config), coefficients_(coefficients) {
  const auto& s = coefficients.shape();
  if (s.layers != config.n_layer || s.streams != 4 || s.sources != config.n_layer + 1)
    throw Error("replayed MUDD coefficients have shape " + s.to_string() + ", expected [layer " +
                std::to_string(config.n_layer) + ", token T, stream 4, source " + std::to_string(config.n_layer + 1) + "]");
}

void MuddReplayedCoefficients::coefficients(int layer, const BatchPosition& batch, const float*, float*, float* alpha) {
  const int C = config_.streams(layer), S = config_.sources(layer);
  if (batch.first_window + batch.batch > coefficients_.windows() || batch.tokens != coefficients_.shape().tokens)
    throw Error("replayed MUDD coefficients hold " + std::to_string(coefficients_.windows()) + " windows of " +
                std::to_string(coefficients_.shape().tokens) + " tokens; the batch does not fit");
  for (int b = 0; b < batch.batch; ++b)
    for (int t = 0; t < batch.tokens; ++t) {
      float* a = alpha + (int64_t(b) * batch.tokens + t) * C * S;
      for (int s = 0; s < C; ++s)
        for (int j = 0; j < S; ++j) a[s * S + j] = coefficients_.at(batch.first_window + b, layer, t, s, j);
    }
}

}  // namespace fca
