// The part of the audit interface that every model family implements the same way: run windows
// with a live source (recording when asked) or a replayed one, give back the logits and the
// replayed sources' controller evaluations. A family supplies Traits:
//   Model, RunState, Live, Recording, Replayed (its coefficient or routing sources);
//   run_state(model, max_batch, max_tokens); replayed(model, coefficients) -> Replayed;
//   forward(model, rs, tokens, B, T, source, first_window); loss(rs, targets, window_nll).
// and the rest of AuditableModel (names, tokenizer, coefficient shape, profiles) in its subclass.
#pragma once
#include <cstdint>
#include <utility>

#include "models/auditable.h"

namespace fca {

template <typename Traits>
class FamilyAuditable : public AuditableModel {
 public:
  using Model = typename Traits::Model;

  void run_live(const int32_t* inputs, const int32_t* targets, int B, int T, CoefficientTensor* record, int record_first,
                double* window_nll) override {
    if (record != nullptr) {
      typename Traits::Recording source(model_, *record);
      Traits::forward(model_, rs_, inputs, B, T, source, record_first);
    } else {
      typename Traits::Live source(model_);
      Traits::forward(model_, rs_, inputs, B, T, source, 0);
    }
    Traits::loss(rs_, targets, window_nll);
  }
  void run_replay(const int32_t* inputs, const int32_t* targets, int B, int T, const CoefficientTensor& coefficients,
                  double* window_nll) override {
    typename Traits::Replayed source = Traits::replayed(model_, coefficients);
    Traits::forward(model_, rs_, inputs, B, T, source, 0);
    replay_evaluations_ += source.controller_evaluations();
    Traits::loss(rs_, targets, window_nll);
  }
  const float* last_logits() const override { return rs_.logits; }
  int64_t replay_controller_evaluations() const override { return replay_evaluations_; }
  size_t run_state_bytes() const override { return rs_.bytes(); }
  const Model& model() const { return model_; }

 protected:
  FamilyAuditable(Model model, int max_batch, int max_tokens)
      : model_(std::move(model)), rs_(Traits::run_state(model_, max_batch, max_tokens)) {}
  Model model_;
  typename Traits::RunState rs_;

 private:
  int64_t replay_evaluations_ = 0;
};

}  // namespace fca
