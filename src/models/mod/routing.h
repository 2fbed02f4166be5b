// Where a Mixture-of-Depths block's token selection comes from. Per routed block and window: the K
// selected positions (in position order) and their weights sigmoid(s_t).
// - ModLiveRouting: the router scores s_t = h_t . w + b, takes the top K (ties to the lower
//   position); counts every evaluation.
// - ModRecordingRouting: live, and the record (kind token_selection: values = sigmoid(s_t) for
//   every token [R, T, 1, 1], discrete = selected 0/1 [R, T, 1]) is written.
// - ModReplayedRouting: selection and weights from a record; no router. A record whose window does
//   not select exactly K tokens in a layer is refused.
#pragma once
#include <cstdint>

#include "models/coefficient_tensor.h"
#include "models/base/batch_position.h"
#include "models/base/controller_source.h"
#include "models/mod/model.h"

namespace fca {

template <typename T>
class ModRoutingSource : public ControllerSource {
 public:
  // Block `layer` (routed), K tokens per window: rows [B*K] = b*T' + position (window b's
  // selection in position order), weights [B*K]. h [B*T', D] is the block's input; scores [B*T']
  // receive s (live only).
  virtual void select(int layer, const BatchPosition& batch, int K, const T* h, T* scores, int32_t* rows, T* weights) = 0;
};

template <typename T>
class ModLiveRouting : public ModRoutingSource<T> {
 public:
  explicit ModLiveRouting(const ModModel<T>& model) : model_(model) {}
  bool evaluates_controller() const override { return true; }
  void select(int layer, const BatchPosition& batch, int K, const T* h, T* scores, int32_t* rows, T* weights) override;

 protected:
  const ModModel<T>& model_;
};

template <typename T>
class ModRecordingRouting : public ModLiveRouting<T> {
 public:
  ModRecordingRouting(const ModModel<T>& model, CoefficientTensor& sink) : ModLiveRouting<T>(model), sink_(sink) {}
  void select(int layer, const BatchPosition& batch, int K, const T* h, T* scores, int32_t* rows, T* weights) override;

 private:
  CoefficientTensor& sink_;
};

template <typename T>
class ModReplayedRouting : public ModRoutingSource<T> {
 public:
  ModReplayedRouting(const ModConfig& config, const CoefficientTensor& record) : config_(config), record_(record) {}
  bool evaluates_controller() const override { return false; }
  void select(int layer, const BatchPosition& batch, int K, const T* h, T* scores, int32_t* rows, T* weights) override;

 private:
  ModConfig config_;
  const CoefficientTensor& record_;
};

CoefficientShape mod_record_shape(const ModConfig& config, int tokens);

}  // namespace fca
