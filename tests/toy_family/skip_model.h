// The skip family: the test binary's second family (toy_model.h is the first), written against the
// public family API with what the toy does not have: its own record kind (block_skip,
// skip_kind.h), its own run-time setting (the gate threshold tau: an audit flag, and an exec sweep)
// and its own execution counter (skipped_rows). It lives in tests/ and touches no file in src/, as
// a family brought by a user would (docs/adding-a-family.md).
//
// The model: the toy's weights (ToySpec's layout, its own format), each block with a hard skip.
// N = B T rows of width D, per layer l < L:
//   g_l = sigmoid(h_l . r_l + b_l)                       [N]     the controller
//   c_l = [g_l >= tau]                                   [N]     ran: the block runs on the row
//   h_{l+1} = h_l + c_l g_l tanh(h_l W_l^T + c_l)        [N, D]  the GEMM over the rows with c = 1 only
//   logits = h_L V^T                                     [N, 256]
// Its record (block_skip): values g [L, T, 1, 1], discrete c [L, T, 1] (slots 1). A replay runs the
// recorded c with the recorded g; no controller.
#pragma once
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "models/base/batch_position.h"
#include "models/base/controller_source.h"
#include "models/base/recorded_routing.h"
#include "models/coefficient_tensor.h"
#include "toy_family/toy_model.h"

namespace fca::toy {

inline constexpr const char* kSkipFormat = "fca-toy-skip-v1";
inline constexpr double kDefaultSkipThreshold = 0.5;  // tau of training, eval and a default audit
// The family's declarations: its counter, its audit setting and its exec sweep.
inline constexpr const char* kSkippedRows = "skipped_rows";
inline constexpr const char* kSkipGateThreshold = "skip_gate_threshold";
inline constexpr const char* kSkipGateThresholds = "skip_gate_thresholds";

struct SkipConfig : ToyConfig {
  static SkipConfig from_json(const std::string& text, const std::string& where);
};

struct SkipSpec : ToySpec {
  using Config = SkipConfig;
  static constexpr const char* kFormat = kSkipFormat;
  static std::string describe(const ToyConfig& c);
};

// float for every pass; double for the gradient check (skip_family.cpp's probe).
template <typename T = float>
using SkipModel = FlatModel<T, SkipSpec>;

// The toy's buffers, plus the ran flags c [L][N] and the gathered rows of one block.
template <typename T = float>
struct SkipRunState : ToyRunState<T> {
  SkipRunState(const ToyConfig& c, int max_batch, int max_tokens, bool training);
  std::vector<uint8_t> ran;      // c_l, [L][N]
  std::vector<int32_t> rows;     // the rows a block runs on, [N]
  std::vector<T> gathered_in;    // their h_l rows, [N, D]
  std::vector<T> gathered_out;   // their tanh(h W^T + c) rows, [N, D]
  size_t bytes() const;
};

// The controller's source interface (models/base/recorded_routing.h): g and c of layer `layer`
// from h_l [N, D].
template <typename T = float>
class SkipSource : public ControllerSource {
 public:
  using Value = T;
  using Config = SkipConfig;
  using Inputs = std::tuple<const T*, T*, uint8_t*>;  // h_l, g [N], c [N]
  virtual void route(int layer, const BatchPosition& batch, const T* h, T* g, uint8_t* ran) = 0;
  // The record layout: g into the values, c into the discrete field; read back (a flag other than
  // 0 or 1 is an Error naming window, layer and token).
  static void record(const SkipConfig& config, CoefficientTensor& sink, int layer, const BatchPosition& batch, const T* h, T* g,
                     uint8_t* ran);
  static void replay(const SkipConfig& config, const CoefficientTensor& record, int layer, const BatchPosition& batch, const T* h,
                     T* g, uint8_t* ran);
};

template <typename T = float>
class SkipLiveGates : public SkipSource<T> {
 public:
  explicit SkipLiveGates(const SkipModel<T>& model, double threshold = kDefaultSkipThreshold) : model_(model), threshold_(threshold) {}
  bool evaluates_controller() const override { return true; }
  void route(int layer, const BatchPosition& batch, const T* h, T* g, uint8_t* ran) override;

 private:
  const SkipModel<T>& model_;
  double threshold_;
};

using SkipRecordingGates = RecordingRouting<SkipLiveGates<float>>;
using SkipReplayedGates = ReplayedRouting<SkipSource<float>>;

// The record kind's value (skip_kind.cpp installs it) and the record's shape for T tokens.
RecordKind block_skip_kind();
CoefficientShape skip_record_shape(const ToyConfig& c, int tokens);

// Forward over B windows [B, T] (windows first_window ..); logits in rs.logits.
template <typename T>
void skip_forward(const SkipModel<T>& m, SkipRunState<T>& rs, const int32_t* tokens, int B, int Tn, SkipSource<T>& source,
                  int first_window = 0);
// Gradients of `scale` * (summed NLL) from the last forward and toy_loss (through the rows that ran;
// c is a step function, its derivative 0 almost everywhere).
template <typename T>
void skip_backward(const SkipModel<T>& m, SkipRunState<T>& rs, SkipModel<T>& grads, T scale);

// What one pass runs, from its ran flags [L][N] (a record's, or a run state's): GEMM FLOPs (the
// blocks' rows that ran and the head), controller FLOPs of a live pass, mixing FLOPs and skipped rows.
struct SkipPassFigures {
  double gemm = 0, controller = 0, mixing = 0;
  int64_t skipped_rows = 0;
};
SkipPassFigures skip_pass_figures(const ToyConfig& c, const uint8_t* ran, int B, int T, bool live);

}  // namespace fca::toy
