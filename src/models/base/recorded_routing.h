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
// A source with a per-pass preamble (early exit: the record's absorbing fill, its validation) also
// declares `virtual void begin(const BatchPosition& batch) = 0;` and the layout's
//   static void record_begin(const Config&, CoefficientTensor& sink, const BatchPosition&);
//   static void replay_begin(const Config&, const CoefficientTensor& record, const BatchPosition&);
//
// Recording is the live router, then record(); replay derives from the interface alone, so it holds
// no router and no controller code is reachable from it.
#pragma once
#include <tuple>

#include "models/base/batch_position.h"
#include "models/base/controller_source.h"
#include "models/coefficient_tensor.h"

namespace fca {

// The per-pass preamble, where the interface has one (a virtual cannot be constrained, so the
// override lives in this layer, present only then): begin() calls the derived source's pass_begin().
template <typename Source>
concept HasPassBegin = requires(const typename Source::Config& config, CoefficientTensor& sink, const BatchPosition& batch) {
  Source::record_begin(config, sink, batch);
};
template <typename Derived, typename Base, bool = HasPassBegin<Base>>
class RoutingPassBegin : public Base {
 public:
  using Base::Base;
};
template <typename Derived, typename Base>
class RoutingPassBegin<Derived, Base, true> : public Base {
 public:
  using Base::Base;
  void begin(const BatchPosition& batch) override { static_cast<Derived*>(this)->pass_begin(batch); }
};

template <typename Live, typename Inputs = typename Live::Inputs>
class RecordingRouting;
template <typename Live, typename... In>
class RecordingRouting<Live, std::tuple<In...>> final
    : public RoutingPassBegin<RecordingRouting<Live, std::tuple<In...>>, Live> {
  using Base = RoutingPassBegin<RecordingRouting<Live, std::tuple<In...>>, Live>;
  friend Base;

 public:
  // `model` builds the live router and gives the layout's config (with `setting`, a live router's
  // own setting: exit's threshold); `sink` needs windows for every batch recorded.
  template <typename Model>
  RecordingRouting(const Model& model, CoefficientTensor& sink) : Base(model), config_(model.config()), sink_(sink) {}
  template <typename Model, typename Setting>
  RecordingRouting(const Model& model, const Setting& setting, CoefficientTensor& sink)
      : Base(model, setting), config_(model.config()), sink_(sink) {}
  void route(int layer, const BatchPosition& batch, In... inputs) override {
    Live::route(layer, batch, inputs...);
    Live::record(config_, sink_, layer, batch, inputs...);
  }

 private:
  void pass_begin(const BatchPosition& batch) {
    Live::begin(batch);
    Live::record_begin(config_, sink_, batch);
  }
  typename Live::Config config_;
  CoefficientTensor& sink_;
};

template <typename Source, typename Inputs = typename Source::Inputs>
class ReplayedRouting;
template <typename Source, typename... In>
class ReplayedRouting<Source, std::tuple<In...>> final
    : public RoutingPassBegin<ReplayedRouting<Source, std::tuple<In...>>, Source> {
  using Base = RoutingPassBegin<ReplayedRouting<Source, std::tuple<In...>>, Source>;
  friend Base;

 public:
  ReplayedRouting(const typename Source::Config& config, const CoefficientTensor& record) : config_(config), record_(record) {}
  bool evaluates_controller() const override { return false; }
  void route(int layer, const BatchPosition& batch, In... inputs) override {
    Source::replay(config_, record_, layer, batch, inputs...);
  }

 private:
  void pass_begin(const BatchPosition& batch) { Source::replay_begin(config_, record_, batch); }
  typename Source::Config config_;
  const CoefficientTensor& record_;
};

}  // namespace fca
