// The Mixture-of-Depths forward and backward passes and their run state.
//
// A block that is not routed is the gated family's Dense block: h_{l+1} = h + F(h). A routed block
// gathers its K selected rows of each window (position order) into h_sub [B*K, D], runs the same
// block on that length-K sequence (attention causal among the selected tokens; positions keep the
// wpe rows already in h), and scatter-adds: h_{l+1,t} = h_t + sigmoid(s_t) F_t for t in S.
#pragma once
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "models/base/stream.h"
#include "models/mod/model.h"
#include "models/mod/routing.h"

namespace fca {

template <typename T>
struct ModRoutedState {
  T* scores;      // [N] s_t (live only)
  int32_t* rows;  // [B*K] selected rows b*T' + t
  T* weights;     // [B*K] sigmoid(s)
  T* h_sub;       // [B*K, D]
};

template <typename T>
struct ModRunState : StreamState<T> {
  ModRunState(const ModConfig& config, int max_batch, int max_tokens, bool keep_all_layers);

  ModConfig config;
  int max_batch, max_tokens;
  bool keep_all_layers;
  int batch = 0, tokens = 0, selected = 0;  // of the last pass (selected = K)
  bool live_router = false;

  std::vector<BlockActivations<T>> blocks;  // [N] rows, or [B*K] rows for routed blocks
  std::vector<ModRoutedState<T>> routed;         // per block (unused entries for blocks not routed)
  // Backward scratch beyond the stream's.
  T* d_wide;                 // [N, 4D]
  T *d_sub, *d_sel, *d_sig;  // [B*K, D], [B*K, D], [B*K]
  size_t bytes() const { return arena.capacity(); }

 private:
  template <typename A>
  void layout(A& a, int windows);  // the buffers of `windows` windows (Arena::for_windows)
  Arena arena;
};

template <typename T>
void mod_forward(const ModModel<T>& model, ModRunState<T>& rs, const int32_t* tokens, int B, int Tn,
                 ModRoutingSource<T>& routing, int first_window = 0);
template <typename T>
double mod_loss(ModRunState<T>& rs, const int32_t* targets, double* window_nll);
template <typename T>
void mod_backward(const ModModel<T>& model, ModRunState<T>& rs, ModModel<T>& grads, T loss_scale);

}  // namespace fca
