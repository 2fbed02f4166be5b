// The gated model's forward and backward passes (docs/model.md), as plain functions over a
// read-only model, a run state and a coefficient source.
#pragma once
#include <cstdint>
#include <vector>

#include "models/gated/coefficients.h"
#include "models/gated/model.h"
#include "models/gated/run_state.h"

namespace fca {

// Runs tokens [B, Tn] (Tn <= seq_len) through the model; fills rs.hidden, rs.gates, rs.logits.
// `first_window` tells the coefficient source which windows the batch rows are.
// `executed_blocks` (null = all): block l runs iff executed_blocks[l] != 0; a removed block is not
// computed at all (h_{l+1} = h_l, g_l recorded as 0, its coefficient never requested). A live
// featuregate controller cannot run with removed blocks (its KL feature needs the previous layer).
// Throws Error when B or Tn exceed the run state or Tn exceeds the model's positions.
template <typename T>
void gated_forward(const GatedModel<T>& model, GatedRunState<T>& rs, const int32_t* tokens, int B, int Tn,
                   CoefficientSource<T>& source, int first_window = 0,
                   const std::vector<uint8_t>* executed_blocks = nullptr);

// Cross-entropy of the last forward pass against targets [B, Tn]: fills rs.losses [N] and returns
// their mean. window_nll (may be null) receives the mean over each window's Tn positions.
template <typename T>
double gated_loss(GatedRunState<T>& rs, const int32_t* targets, double* window_nll);

// Backward of loss_scale * sum of per-position losses of the last forward pass (loss_scale =
// 1/(B*Tn) for the mean loss; smaller under gradient accumulation). Parameter gradients are added
// into `grads` (same layout as the model). Needs a run state that keeps all layers, and a forward
// pass with a live source (the gate's inputs phi were recorded).
template <typename T>
void gated_backward(const GatedModel<T>& model, GatedRunState<T>& rs, GatedModel<T>& grads, T loss_scale);

}  // namespace fca
