// The shared base of every model family (src/models/base/): the recording and the replayed
// coefficient source, written once. A family with a continuous record writes its source interface
// and its live controller, nothing more:
//
//   template <typename T> class MySource : public ControllerSource {
//    public:
//     using Value = T;                     // the precision of the forward pass
//     using Inputs = std::tuple<const T*>; // what the controller reads, in the call's order
//     // out [batch.batch * batch.tokens, width]: row b * tokens + t holds entry (layer, t) of
//     // window batch.first_window + b, width = streams * sources of the record's shape.
//     virtual void coefficients(int layer, const BatchPosition& batch, Inputs inputs, T* out) = 0;
//   };
//   template <typename T> class MyLive : public MySource<T> { ... the controller ... };
//   template <typename T> using MyRecording = RecordingSource<MyLive<T>>;
//   template <typename T> using MyReplayed = ReplayedSource<MySource<T>>;
//
// A record's (layer, token) entry is streams * sources contiguous floats of the CoefficientTensor
// (its storage order), so both copies below are one row each, in the order the live source wrote
// it. The tensor's shape must be the family's record shape (its make_coefficients): the audit
// interface checks it before every pass (FamilyAuditable), since a wider row would be read or
// written past the pass's buffer. Recording converts to float as the cache stores it; replay converts back, so a float forward
// pass replays its own bits exactly.
#pragma once
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "models/base/batch_position.h"
#include "models/base/controller_source.h"
#include "models/coefficient_tensor.h"

namespace fca {

// Throws Error unless windows first_window .. first_window + batch - 1 of `batch.tokens` tokens and
// layer `layer` lie in `tensor` (`what`: "recording sink", "replayed coefficients").
inline void check_record_rows(const CoefficientTensor& tensor, int layer, const BatchPosition& batch, const char* what) {
  const CoefficientShape& s = tensor.shape();
  if (batch.first_window < 0 || batch.first_window + batch.batch > tensor.windows() || batch.tokens != s.tokens || layer < 0 ||
      layer >= s.layers)
    throw Error(std::string(what) + ": shape " + s.to_string() + " for " + std::to_string(tensor.windows()) +
                " windows, and the forward pass asks for layer " + std::to_string(layer) + " of windows " +
                std::to_string(batch.first_window) + ".." + std::to_string(batch.first_window + batch.batch - 1) + " with " +
                std::to_string(batch.tokens) + " tokens");
}

// Live, and every row the live controller writes is also written to `sink`. `Inputs` is the
// source interface's std::tuple of what its call reads (the parameters between the batch and `out`).
template <typename Live, typename Inputs = typename Live::Inputs>
class RecordingSource;
template <typename Live, typename... In>
class RecordingSource<Live, std::tuple<In...>> final : public Live {
 public:
  using Value = typename Live::Value;
  // `model` builds the live source; `sink` needs windows for every batch recorded.
  template <typename Model>
  RecordingSource(const Model& model, CoefficientTensor& sink) : Live(model), sink_(sink) {}
  void coefficients(int layer, const BatchPosition& batch, In... inputs, Value* out) override {
    Live::coefficients(layer, batch, inputs..., out);
    check_record_rows(sink_, layer, batch, "recording sink");
    const int64_t width = int64_t(sink_.shape().streams) * sink_.shape().sources;
    for (int b = 0; b < batch.batch; ++b)
      for (int t = 0; t < batch.tokens; ++t) {
        float* entry = sink_.window_data(batch.first_window + b) + (int64_t(layer) * batch.tokens + t) * width;
        const Value* row = out + (int64_t(b) * batch.tokens + t) * width;
        for (int64_t i = 0; i < width; ++i) entry[i] = static_cast<float>(row[i]);
      }
  }

 private:
  CoefficientTensor& sink_;
};

// Every row read from `coefficients`; it holds no controller, so no controller code is reachable.
// A coordinate the record's mask marks invalid reads 0 (as a live row has it: hyper-connections'
// unused corner), whatever an intervention left there.
template <typename Source, typename Inputs = typename Source::Inputs>
class ReplayedSource;
template <typename Source, typename... In>
class ReplayedSource<Source, std::tuple<In...>> final : public Source {
 public:
  using Value = typename Source::Value;
  explicit ReplayedSource(const CoefficientTensor& coefficients) : coefficients_(coefficients) {}
  bool evaluates_controller() const override { return false; }
  void coefficients(int layer, const BatchPosition& batch, In..., Value* out) override {
    check_record_rows(coefficients_, layer, batch, "replayed coefficients");
    const int64_t width = int64_t(coefficients_.shape().streams) * coefficients_.shape().sources;
    const uint8_t* valid = coefficients_.mask().data() + int64_t(layer) * width;  // mask [layer][stream][source]
    for (int b = 0; b < batch.batch; ++b)
      for (int t = 0; t < batch.tokens; ++t) {
        const float* entry = coefficients_.window_data(batch.first_window + b) + (int64_t(layer) * batch.tokens + t) * width;
        Value* row = out + (int64_t(b) * batch.tokens + t) * width;
        for (int64_t i = 0; i < width; ++i) row[i] = valid[i] ? static_cast<Value>(entry[i]) : Value(0);
      }
  }

 private:
  const CoefficientTensor& coefficients_;
};

}  // namespace fca
