// Where a token's depth comes from (docs/exit.md, "The depth record"). At each exit point k
// (min_exit <= k <= L-1) the ragged pass asks its source which of the n rows still running stop there.
// - ExitLiveDepth: the classifier, s = exit.weight[k-1] . LayerNorm(h_k; ln_f) + exit.bias[k-1],
//   exit iff s >= tau (logit space, ties exit); counts its FLOPs and one evaluation per exit point.
// - ExitRecordingDepth: live, and the record (kind exit_depth: continued c and score q = sigmoid(s)
//   with the absorbing fill) is written.
// - ExitReplayedDepth: the decisions from a record (continued only); no classifier. Each window's
//   record is validated (check_exit_record) when the pass begins.
// Recording and replay are the shared templates of models/base/recorded_routing.h over
// ExitDepthSource's layout, with its per-pass preamble (begin).
#pragma once
#include <cstdint>
#include <tuple>

#include "models/base/batch_position.h"
#include "models/base/controller_source.h"
#include "models/base/recorded_routing.h"
#include "models/coefficient_tensor.h"
#include "models/exit/model.h"

namespace fca {

// The classifier's buffers for n rows (the run state's): z [n, D] = LayerNorm(h_k; ln_f) (never
// written into h), its mean and rstd [n], the scores s [n].
template <typename T>
struct ExitClassifierScratch {
  T *z, *mean, *rstd, *scores;
};

template <typename T>
class ExitDepthSource : public ControllerSource {
 public:
  using Value = T;
  using Config = ExitConfig;
  using Inputs = std::tuple<int, const int32_t*, const T*, const ExitClassifierScratch<T>&, uint8_t*>;
  // Before the pass's first exit point (checks and fills a record).
  virtual void begin(const BatchPosition& batch) = 0;
  // Exit point k: rows[i] = b*T' + t of the n rows still running and their states x [n, D]; sets
  // exits[i] = 1 for each row that stops at k.
  virtual void route(int k, const BatchPosition& batch, int n, const int32_t* rows, const T* x,
                     const ExitClassifierScratch<T>& scratch, uint8_t* exits) = 0;
  // The record layout (models/base/recorded_routing.h). record_begin writes the absorbing fill of
  // the batch's windows; record writes each decided row's continued flag c = 1 - exit and score
  // q = sigmoid(s) (the live scores in scratch.scores). replay_begin validates each window's record
  // (check_exit_record); replay reads the rows' decisions.
  static void record_begin(const ExitConfig& config, CoefficientTensor& sink, const BatchPosition& batch);
  static void record(const ExitConfig& config, CoefficientTensor& sink, int k, const BatchPosition& batch, int n,
                     const int32_t* rows, const T* x, const ExitClassifierScratch<T>& scratch, uint8_t* exits);
  static void replay_begin(const ExitConfig& config, const CoefficientTensor& record, const BatchPosition& batch);
  static void replay(const ExitConfig& config, const CoefficientTensor& record, int k, const BatchPosition& batch, int n,
                     const int32_t* rows, const T* x, const ExitClassifierScratch<T>& scratch, uint8_t* exits);
};

template <typename T>
class ExitLiveDepth : public ExitDepthSource<T> {
 public:
  // lambda: the exit threshold (the config's default unless a command sets another).
  ExitLiveDepth(const ExitModel<T>& model, double lambda) : model_(model), tau_(exit_logit_threshold(lambda)) {}
  explicit ExitLiveDepth(const ExitModel<T>& model) : ExitLiveDepth(model, model.config().exit_threshold) {}
  bool evaluates_controller() const override { return true; }
  void begin(const BatchPosition&) override {}
  void route(int k, const BatchPosition& batch, int n, const int32_t* rows, const T* x,
             const ExitClassifierScratch<T>& scratch, uint8_t* exits) override;

 protected:
  // The scores s of the n rows into scratch.scores (the classifier; counted).
  void score(int k, const BatchPosition& batch, int n, const T* x, const ExitClassifierScratch<T>& scratch);
  const ExitModel<T>& model_;
  T tau_;
};

// Live and recorded (ExitRecordingDepth(model[, lambda], sink)), and replayed
// (ExitReplayedDepth(config, record)): the shared templates of models/base/recorded_routing.h.
template <typename T>
using ExitRecordingDepth = RecordingRouting<ExitLiveDepth<T>>;
template <typename T>
using ExitReplayedDepth = ReplayedRouting<ExitDepthSource<T>>;

// [L-1, T', 1, 1], kind exit_depth, one slot, min_exit m.
CoefficientShape exit_record_shape(const ExitConfig& config, int tokens);

}  // namespace fca
