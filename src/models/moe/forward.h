// The MoE forward and backward passes and their run state.
//
// Block l: the gated family's attention half gives u and m = LN2(h + u); the routing source gives
// (I, w); the experts run grouped: the rows of the tokens routed to expert e are gathered into one
// contiguous slice of a row buffer (tokens in order), each expert multiplies only its own slice
// (one GEMM per expert and Linear), and y_t = sum_j w_t,j Y[row(t, j)] combines them in slot order.
// F = u + y, h_{l+1} = h + F. In `dense_experts` mode (measurement only) every expert runs every
// token and the unselected ones are multiplied by zero.
#pragma once
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "models/base/stream.h"
#include "models/moe/model.h"
#include "models/moe/routing.h"

namespace fca {

// One layer's routing and expert buffers. R = N*k rows (grouped) or N*E (dense_experts).
template <typename T>
struct MoeLayerState {
  T* probs;             // [N, E] router softmax (live only)
  int32_t* experts;     // [N, k]
  T* weights;           // [N, k]
  int64_t* offsets;     // [E + 1] rows of expert e: offsets[e] .. offsets[e+1]-1
  int32_t* entry_rows;  // [N, S] row of token n's entry j (S = k grouped, E dense)
  T* entry_weights;     // [N, S] its weight (w, or 0 for an unselected expert in dense mode)
  int32_t* row_tokens;  // [R] the token each row belongs to
  T *x, *pre, *act, *y; // [R, D], [R, F], [R, F], [R, D]
  double aux = 0;       // aux_l = E sum_e f_e P_e of the last live pass
};

template <typename T>
struct MoeRunState : StreamState<T> {
  MoeRunState(const MoeConfig& config, int max_batch, int max_tokens, bool keep_all_layers, bool dense_experts = false);

  MoeConfig config;
  int max_batch, max_tokens;
  bool keep_all_layers, dense_experts;
  int batch = 0, tokens = 0;
  bool live_router = false;  // whether the last pass evaluated the router (probs and aux are valid)

  std::vector<BlockActivations<T>> blocks;  // attention half + update F (fc fields unused)
  std::vector<MoeLayerState<T>> layers;
  // Backward scratch beyond the stream's.
  T *d_x, *d_act, *d_y;  // [R, D], [R, F], [R, D]
  T *d_weights, *d_probs;  // [N, k], [N, E]
  size_t bytes() const { return arena.capacity(); }

 private:
  template <typename A>
  void layout(A& a, int windows);  // the buffers of `windows` windows (Arena::for_windows)
  Arena arena;
};

template <typename T>
void moe_forward(const MoeModel<T>& model, MoeRunState<T>& rs, const int32_t* tokens, int B, int Tn,
                 MoeRoutingSource<T>& routing, int first_window = 0);
// Mean cross-entropy over the batch (the NLL); window_nll [B] per window when not null.
template <typename T>
double moe_loss(MoeRunState<T>& rs, const int32_t* targets, double* window_nll);
// The training objective of the last live pass: cross-entropy + alpha * mean_l aux_l.
template <typename T>
double moe_objective(const MoeRunState<T>& rs, double cross_entropy);
// Gradients of the training objective (loss_scale = 1 / (positions summed by the caller)) into
// `grads` (accumulated). Needs a live pass with keep_all_layers and grouped experts.
template <typename T>
void moe_backward(const MoeModel<T>& model, MoeRunState<T>& rs, MoeModel<T>& grads, T loss_scale);

}  // namespace fca
