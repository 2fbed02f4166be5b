// Where a Mixture-of-Depths block's token selection comes from. Per routed block and window: the K
// selected positions (in position order) and their weights sigmoid(s_t).
// - ModLiveRouting: the router scores s_t = h_t . w + b, takes the top K (ties to the lower
//   position); counts every evaluation.
// - ModRecordingRouting: live, and the record (kind token_selection: values = sigmoid(s_t) for
//   every token [R, T, 1, 1], discrete = selected 0/1 [R, T, 1]) is written.
// - ModReplayedRouting: selection and weights from a record; no router. A record whose window does
//   not select exactly K tokens in a layer is refused.
// Both are the shared templates of models/base/recorded_routing.h over ModRoutingSource's layout.
#pragma once
#include <cstdint>
#include <tuple>

#include "models/coefficient_tensor.h"
#include "models/base/batch_position.h"
#include "models/base/controller_source.h"
#include "models/base/recorded_routing.h"
#include "models/mod/model.h"

namespace fca {

template <typename T>
class ModRoutingSource : public ControllerSource {
 public:
  using Value = T;
  using Config = ModConfig;
  using Inputs = std::tuple<int, const T*, T*, int32_t*, T*>;
  // Block `layer` (routed), K tokens per window: rows [B*K] = b*T' + position (window b's
  // selection in position order), weights [B*K]. h [B*T', D] is the block's input; scores [B*T']
  // receive s (live only).
  virtual void route(int layer, const BatchPosition& batch, int K, const T* h, T* scores, int32_t* rows, T* weights) = 0;
  // The record layout (models/base/recorded_routing.h): sigmoid(s) of every token and the 0/1
  // selection written into the record, and the selection and weights read back from it (a window
  // selecting other than exactly K tokens in a layer is refused).
  static void record(const ModConfig& config, CoefficientTensor& sink, int layer, const BatchPosition& batch, int K, const T* h,
                     T* scores, int32_t* rows, T* weights);
  static void replay(const ModConfig& config, const CoefficientTensor& record, int layer, const BatchPosition& batch, int K,
                     const T* h, T* scores, int32_t* rows, T* weights);
};

template <typename T>
class ModLiveRouting : public ModRoutingSource<T> {
 public:
  explicit ModLiveRouting(const ModModel<T>& model) : model_(model) {}
  bool evaluates_controller() const override { return true; }
  void route(int layer, const BatchPosition& batch, int K, const T* h, T* scores, int32_t* rows, T* weights) override;

 protected:
  const ModModel<T>& model_;
};

template <typename T>
using ModRecordingRouting = RecordingRouting<ModLiveRouting<T>>;
template <typename T>
using ModReplayedRouting = ReplayedRouting<ModRoutingSource<T>>;

CoefficientShape mod_record_shape(const ModConfig& config, int tokens);

}  // namespace fca
