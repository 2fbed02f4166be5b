// The shared base of the routing families (src/models/base/): the recording and the replayed
// source of a record with a discrete field (which experts, which tokens), written once. The family
// writes its live router and its record layout, nothing more. Its source interface declares:
//
//   using Value = T;
//   using Config = MoeConfig;           // what the layout reads (k, E; MoD's routed layers)
//   using Inputs = std::tuple<...>;     // every parameter of route() after the batch, in order
//   virtual void route(int layer, const BatchPosition& batch, Args... args) = 0;
//   // The layout: the live call's outputs written into window rows of the record, and read back.
//   // replay() checks that the record can be executed (Error naming window, layer and token).
//   static void record(const Config&, CoefficientTensor& sink, int layer, const BatchPosition&, Args...);
//   static void replay(const Config&, const CoefficientTensor& record, int layer, const BatchPosition&, Args...);
//
// Recording is the live router, then record(); replay derives from the interface alone, so it holds
// no router and no controller code is reachable from it.
#pragma once
#include <tuple>

#include "models/base/batch_position.h"
#include "models/base/controller_source.h"
#include "models/coefficient_tensor.h"

namespace fca {

template <typename Live, typename Inputs = typename Live::Inputs>
class RecordingRouting;
template <typename Live, typename... In>
class RecordingRouting<Live, std::tuple<In...>> final : public Live {
 public:
  // `model` builds the live router and gives the layout's config; `sink` needs windows for every
  // batch recorded.
  template <typename Model>
  RecordingRouting(const Model& model, CoefficientTensor& sink) : Live(model), config_(model.config()), sink_(sink) {}
  void route(int layer, const BatchPosition& batch, In... inputs) override {
    Live::route(layer, batch, inputs...);
    Live::record(config_, sink_, layer, batch, inputs...);
  }

 private:
  typename Live::Config config_;
  CoefficientTensor& sink_;
};

template <typename Source, typename Inputs = typename Source::Inputs>
class ReplayedRouting;
template <typename Source, typename... In>
class ReplayedRouting<Source, std::tuple<In...>> final : public Source {
 public:
  ReplayedRouting(const typename Source::Config& config, const CoefficientTensor& record) : config_(config), record_(record) {}
  bool evaluates_controller() const override { return false; }
  void route(int layer, const BatchPosition& batch, In... inputs) override {
    Source::replay(config_, record_, layer, batch, inputs...);
  }

 private:
  typename Source::Config config_;
  const CoefficientTensor& record_;
};

}  // namespace fca
