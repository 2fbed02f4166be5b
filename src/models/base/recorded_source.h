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
// (its storage order), and the live row is that entry in the same order. A family whose live rows
// hold only each layer's valid coordinates, packed (MUDD: C_l streams of S_l sources), declares
// `static constexpr bool kPackedValidRows = true;` in its source interface: layer l's live row is
// then the rectangle [0, C) x [0, S) of the record's mask, stream-major, C the streams valid at
// source 0 and S the sources valid at stream 0. The tensor's shape must be the family's record shape (its make_coefficients): the audit
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

// The live row of `layer`: `streams` x `sources` of the record's entry, stream-major; the entry's
// width is the record's streams * sources (record_sources apart from one stream to the next).
struct LiveRowShape {
  int streams, sources, record_sources;
};
template <typename Source>
LiveRowShape live_row_shape(const CoefficientTensor& record, int layer) {
  const CoefficientShape& s = record.shape();
  if constexpr (requires { Source::kPackedValidRows; }) {
    static_assert(Source::kPackedValidRows, "kPackedValidRows, where declared, is true");
    const CoefficientView v = record.view();
    int streams = 0, sources = 0;
    while (streams < s.streams && v.valid(layer, streams, 0)) ++streams;
    while (sources < s.sources && v.valid(layer, 0, sources)) ++sources;
    // The valid coordinates must be exactly that rectangle: any other mask would give a row width
    // the live source does not write.
    bool rectangle = streams > 0 && sources > 0;
    for (int st = 0; st < s.streams && rectangle; ++st)
      for (int k = 0; k < s.sources && rectangle; ++k) rectangle = v.valid(layer, st, k) == (st < streams && k < sources);
    if (!rectangle)
      throw Error("packed coefficient rows: layer " + std::to_string(layer) + "'s valid coordinates of " + s.to_string() +
                  " are not a non-empty rectangle from stream 0, source 0");
    return {streams, sources, s.sources};
  } else {
    return {s.streams, s.sources, s.sources};
  }
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
    const LiveRowShape row_shape = live_row_shape<Live>(sink_, layer);
    const int64_t row_width = int64_t(row_shape.streams) * row_shape.sources;
    for (int b = 0; b < batch.batch; ++b)
      for (int t = 0; t < batch.tokens; ++t) {
        float* entry = sink_.window_data(batch.first_window + b) + (int64_t(layer) * batch.tokens + t) * width;
        const Value* row = out + (int64_t(b) * batch.tokens + t) * row_width;
        for (int st = 0; st < row_shape.streams; ++st)
          for (int k = 0; k < row_shape.sources; ++k)
            entry[int64_t(st) * row_shape.record_sources + k] = static_cast<float>(row[int64_t(st) * row_shape.sources + k]);
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
    const LiveRowShape row_shape = live_row_shape<Source>(coefficients_, layer);
    const int64_t row_width = int64_t(row_shape.streams) * row_shape.sources;
    for (int b = 0; b < batch.batch; ++b)
      for (int t = 0; t < batch.tokens; ++t) {
        const float* entry = coefficients_.window_data(batch.first_window + b) + (int64_t(layer) * batch.tokens + t) * width;
        Value* row = out + (int64_t(b) * batch.tokens + t) * row_width;
        for (int st = 0; st < row_shape.streams; ++st)
          for (int k = 0; k < row_shape.sources; ++k) {
            const int64_t i = int64_t(st) * row_shape.record_sources + k;
            row[int64_t(st) * row_shape.sources + k] = valid[i] ? static_cast<Value>(entry[i]) : Value(0);
          }
      }
  }

 private:
  const CoefficientTensor& coefficients_;
};

}  // namespace fca
