// Where the MoE's routing (expert indices I [N, k] and weights w [N, k] per layer) comes from.
// - MoeLiveRouting: the router (the controller) computes p = softmax(m W_router^T) [N, E], then the
//   top k; counts every evaluation.
// - MoeRecordingRouting: live, and every (I, w) goes into a routing record (CoefficientTensor of
//   kind expert_routing: values = w [L, T, 1, k], discrete = I [L, T, k]).
// - MoeReplayedRouting: (I, w) read from a record; holds no router, so the router cannot run. Every
//   record is checked before use: k distinct experts per token, each in [0, E).
// Both are the shared templates of models/base/recorded_routing.h over MoeRoutingSource's layout.
#pragma once
#include <cstdint>
#include <tuple>

#include "models/coefficient_tensor.h"
#include "models/base/batch_position.h"
#include "models/base/controller_source.h"
#include "models/base/recorded_routing.h"
#include "models/moe/model.h"

namespace fca {

template <typename T>
class MoeRoutingSource : public ControllerSource {
 public:
  using Value = T;
  using Config = MoeConfig;
  using Inputs = std::tuple<const T*, T*, int32_t*, T*>;
  // Layer `layer`, rows n < batch*tokens: writes experts [N, k], weights [N, k]; live sources also
  // write probs [N, E] (the softmax the auxiliary loss and backward read). m [N, D].
  virtual void route(int layer, const BatchPosition& batch, const T* m, T* probs, int32_t* experts, T* weights) = 0;
  // The record layout (models/base/recorded_routing.h): (I, w) of the batch's windows written into
  // the record, and read back from it, each token's experts checked.
  static void record(const MoeConfig& config, CoefficientTensor& sink, int layer, const BatchPosition& batch, const T* m,
                     T* probs, int32_t* experts, T* weights);
  static void replay(const MoeConfig& config, const CoefficientTensor& record, int layer, const BatchPosition& batch,
                     const T* m, T* probs, int32_t* experts, T* weights);
};

template <typename T>
class MoeLiveRouting : public MoeRoutingSource<T> {
 public:
  explicit MoeLiveRouting(const MoeModel<T>& model) : model_(model) {}
  bool evaluates_controller() const override { return true; }
  void route(int layer, const BatchPosition& batch, const T* m, T* probs, int32_t* experts, T* weights) override;

 protected:
  const MoeModel<T>& model_;
};

template <typename T>
using MoeRecordingRouting = RecordingRouting<MoeLiveRouting<T>>;
template <typename T>
using MoeReplayedRouting = ReplayedRouting<MoeRoutingSource<T>>;

// The routing record's shape for windows of `tokens` tokens.
CoefficientShape moe_record_shape(const MoeConfig& config, int tokens);

// Top-k of p [E] (ties to the lower index, in descending p) and docs/routed.md's weights: renormalised
// over the selected when k > 1, p itself when k = 1.
template <typename T>
void moe_top_k(const T* p, int E, int k, int32_t* experts, T* weights);

// Checks one token's k expert indices: each in [0, E) and distinct. Throws Error naming `where`.
void check_expert_record(const int32_t* experts, int k, int E, const std::string& where);

}  // namespace fca
