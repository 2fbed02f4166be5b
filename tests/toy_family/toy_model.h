// The toy family: a model family written against fca's public family API only (models/base,
// models/flat_model.h, models/family_auditable.h, train/, exec/exec_family.h), living in tests/ and
// registered from the test binary (toy_family.h). It exists to show, and to keep showing, that a new
// family needs no line in src/ (docs/adding-a-family.md is written from it), and it runs through
// the same conformance suite as fca's own families (tests/family_conformance_test.cpp).
//
// The model: a byte-level language model without attention, each token on its own (so causal by
// construction). N = B T rows of width D:
//   h_0 = wte[x]                                      [N, D]
//   per layer l < L:
//     a_l = tanh(h_l W_l^T + c_l)                     [N, D]   (blocks.l.fc.weight [D, D], .bias [D])
//     g_l = sigmoid(h_l . r_l + b_l)                  [N]      (the controller: blocks.l.router.weight [D], .bias [1])
//     h_{l+1} = h_l + g_l a_l                         [N, D]
//   logits = h_L V^T                                  [N, 256] (head.fc.weight [256, D])
// Its record is continuous, one gate per (layer, token): [L, T, 1, 1].
#pragma once
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/json.h"
#include "models/base/batch_position.h"
#include "models/base/controller_source.h"
#include "models/base/recorded_source.h"
#include "models/coefficient_tensor.h"
#include "models/flat_model.h"
#include "models/parameters.h"

namespace fca::toy {

inline constexpr const char* kToyFormat = "fca-toy-v1";
inline constexpr int kVocab = 256;

struct ToyConfig {
  int n_layer = 2;
  int d_model = 16;
  int n_head = 1;  // the shape flags every family take: checked (D % H == 0) and recorded, unused (no attention)
  int seq_len = 16;
  void validate(const std::string& where) const;
  std::string to_json() const;
  static ToyConfig from_json(const std::string& text, const std::string& where);
  bool operator==(const ToyConfig&) const = default;
};

template <typename T>
struct ToyWeights {
  T* wte;                      // [256, D]
  std::vector<T*> fc_weight;   // [D, D] per layer
  std::vector<T*> fc_bias;     // [D]
  std::vector<T*> gate_weight; // r_l [D]
  std::vector<T*> gate_bias;   // b_l [1]
  T* head;                     // [256, D]
};

struct ToySpec {
  using Config = ToyConfig;
  template <typename T>
  using Weights = ToyWeights<T>;
  static constexpr const char* kFormat = kToyFormat;
  static std::vector<TensorSlot> layout(const ToyConfig& c);
  template <typename T>
  static ToyWeights<T> bind(ParameterBuffer<T>& params, const ToyConfig& c);
  static std::string describe(const ToyConfig& c);
};

template <typename T>
using ToyModel = FlatModel<T, ToySpec>;

// One pass's buffers, for up to max_batch windows of max_tokens tokens (training keeps what
// backward reads; inference keeps the same, it is small).
template <typename T>
struct ToyRunState {
  ToyRunState(const ToyConfig& c, int max_batch, int max_tokens, bool training);
  int max_batch, max_tokens, batch = 0, tokens = 0, L, D;
  std::vector<int32_t> inputs;  // [N]
  std::vector<T> hidden;        // h_0 .. h_L, [L + 1][N, D]
  std::vector<T> activation;    // a_l, [L][N, D]
  std::vector<T> gates;         // g_l, [L][N]
  std::vector<T> logit_buffer;  // [N, 256]
  std::vector<int32_t> targets; // [N], saved by the loss for backward
  T* logits;
  int64_t controller_evaluations = 0;
  T* h(int l) { return hidden.data() + int64_t(l) * max_batch * max_tokens * D; }
  size_t bytes() const;
};

// The controller's source interface (models/base/recorded_source.h): g_l [N] from h_l [N, D].
template <typename T>
class ToyGateSource : public ControllerSource {
 public:
  using Value = T;
  using Inputs = std::tuple<const T*>;  // h_l
  virtual void coefficients(int layer, const BatchPosition& batch, const T* h, T* g) = 0;
};

template <typename T>
class ToyLiveGates : public ToyGateSource<T> {
 public:
  explicit ToyLiveGates(const ToyModel<T>& model) : model_(model) {}
  bool evaluates_controller() const override { return true; }
  void coefficients(int layer, const BatchPosition& batch, const T* h, T* g) override;

 private:
  const ToyModel<T>& model_;
};

template <typename T>
using ToyRecordingGates = RecordingSource<ToyLiveGates<T>>;
template <typename T>
using ToyReplayedGates = ReplayedSource<ToyGateSource<T>>;

CoefficientShape toy_record_shape(const ToyConfig& c, int tokens);

// Forward over B windows [B, T] (windows first_window ..); logits in rs.logits.
template <typename T>
void toy_forward(const ToyModel<T>& m, ToyRunState<T>& rs, const int32_t* tokens, int B, int T_, ToyGateSource<T>& source,
                 int first_window = 0);
// Mean NLL over the pass's tokens; window_nll [B] (may be null) gets each window's mean.
template <typename T>
double toy_loss(ToyRunState<T>& rs, const int32_t* targets, double* window_nll);
// Gradients of `scale` * (summed NLL) added into `grads`, from the last forward and loss.
template <typename T>
void toy_backward(const ToyModel<T>& m, ToyRunState<T>& rs, ToyModel<T>& grads, T scale);

// The pieces the skip family shares with the toy (its model is the toy's weights with a hard skip,
// skip_model.h): h_0 = wte[x] for the pass's N rows (checked bytes, saved for backward; `family`
// names the model in the error); the head's backward, dh [N, D] = d(scale * summed NLL)/d h_L from
// the last loss, with the head's gradient added into dw; the embedding's backward from dh_0.
template <typename T>
void toy_embed(const ToyWeights<T>& w, ToyRunState<T>& rs, const int32_t* tokens, int64_t N, const char* family);
template <typename T>
std::vector<T> toy_head_backward(const ToyWeights<T>& w, ToyWeights<T>& dw, ToyRunState<T>& rs, T scale);
template <typename T>
void toy_embedding_backward(ToyWeights<T>& dw, const ToyRunState<T>& rs, const std::vector<T>& dh);

// FLOPs of one live pass by formula (core/exec_counters.h's convention): GEMMs, the controller
// (r . h + b: 2D, the sigmoid: 4, per row and layer) and the mixing h + g a (2D per row and layer).
double toy_gemm_flops(const ToyConfig& c, int B, int T);
double toy_controller_flops(const ToyConfig& c, int B, int T);
double toy_mixing_flops(const ToyConfig& c, int B, int T);

}  // namespace fca::toy
