// The exit family's training passes (docs/exit.md): phase 1 runs the Dense trunk at full depth with every
// exit k = m..L supervised through the shared ln_f and tied head, J_LM = sum_k w_k CE_k; phase 2
// fits the exit classifiers on the frozen trunk, J_exit = mean_k mean_t BCE(sigmoid(s_k), u_k) with
// CALM's consistency label u_k = [argmax o_k == argmax o_L]. No discrete decision enters either
// graph, so both have finite-difference gradient checks in double.
#pragma once
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "models/base/batch_position.h"
#include "models/base/stream.h"
#include "models/exit/model.h"

namespace fca {

template <typename T>
struct ExitTrainState : StreamState<T> {
  // backward: keep every block's activations and the backward scratch (training); false: one block
  // set reused (phase 2's frozen-trunk forward and evaluation).
  ExitTrainState(const ExitConfig& config, int max_batch, int max_tokens, bool backward);

  ExitConfig config;
  int max_batch, max_tokens;
  bool backward;
  int batch = 0, tokens = 0;
  std::vector<BlockActivations<T>> blocks;
  // Per supervised exit e = k - m (k = m..L): z_k = LayerNorm(h_k; ln_f) [N, D], its mean and rstd
  // [N], logits o_k [N, 256] (overwritten by their gradient in backward). The last (k = L) are the
  // stream's ln_f_out / logits.
  std::vector<T*> exit_ln, exit_mean, exit_rstd, exit_logits;
  std::vector<double> exit_nll;  // mean CE_k of the last loss, per supervised exit
  // Phase 2: scores s_k [L-m, N] and labels u_k [L-m, N] of the last probe loss.
  T* probe_scores;
  int32_t* probe_labels;
  T* d_wide;  // [N, 4D] backward scratch
  size_t bytes() const { return arena.capacity(); }

 private:
  template <typename A>
  void layout(A& a, int windows);  // the buffers of `windows` windows (Arena::for_windows)
  Arena arena;
};

// Full-depth forward: h_0..h_L, and z_k, o_k for k = m..L.
template <typename T>
void exit_trunk_forward(const ExitModel<T>& model, ExitTrainState<T>& rs, const int32_t* tokens, int B, int Tn);
// J_LM = sum_k w_k CE_k (each CE_k a mean over the B x T' positions); window_nll [B] receives the
// full-depth (k = L) per-window NLL when not null.
template <typename T>
double exit_trunk_loss(ExitTrainState<T>& rs, const int32_t* targets, double* window_nll = nullptr);
// Gradients of loss_scale * B T' * J_LM (accumulated into grads; exit.* untouched).
template <typename T>
void exit_trunk_backward(const ExitModel<T>& model, ExitTrainState<T>& rs, ExitModel<T>& grads, T loss_scale);

// Phase 2 on the last exit_trunk_forward: labels, scores, J_exit (returned), and the gradients of
// loss_scale * B T' * J_exit into grad_weight [L-1, D] and grad_bias [L-1] (accumulated; rows k < m
// stay untouched).
template <typename T>
double exit_probe_loss(const ExitModel<T>& model, ExitTrainState<T>& rs, T* grad_weight, T* grad_bias, T loss_scale);

}  // namespace fca
