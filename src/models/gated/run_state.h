// Per-run state of the gated model: every activation of one forward pass (and what backward reads),
// carved from one arena sized once for the largest batch. Stable names (docs/model.md) address them:
// hidden.{l} = h_l, blocks.{l}.gate = g_l, blocks.{l}.features = phi_l, logits.
#pragma once
#include "models/prefix_reuse.h"
#include <omp.h>

#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "models/base/stream.h"
#include "models/gated/config.h"
#include "ops/attention.h"

namespace fca {

template <typename T>
struct GatedRunState : StreamState<T> {
  // keep_all_layers: keep every block's activations (training, traces); otherwise one set is reused
  // by all layers (inference), which is all a forward pass needs.
  GatedRunState(const GatedConfig& config, int max_batch, int max_tokens, bool keep_all_layers);

  GatedConfig config;
  int max_batch, max_tokens;
  bool keep_all_layers;
  int batch = 0, tokens = 0;  // of the last forward pass

  // L entries. Without keep_all_layers, block 0 has its own set (its update F_0 stays for prefix
  // reuse) and blocks 1 .. L-1 share a second one.
  std::vector<BlockActivations<T>> blocks;
  PrefixReuse prefix;      // h_0 and F_0 = blocks[0].update, kept for replays of the same windows
  T* gates;                // [L, N]   g_l
  T* features;             // [L, N, 4] phi_l (featuregate, live only)
  T* logp[2];              // [B, H, T', T'] log-softmax of the previous and current layer (featuregate)
  T* head_features;        // [B, H, T', 3]
  // Backward scratch beyond the stream's.
  T* d_wide;     // [N, 4D]
  T* d_gate;     // [N]

  size_t bytes() const { return arena.capacity(); }

 private:
  template <typename A>
  void layout(A& a, int windows);  // the buffers of `windows` windows (Arena::for_windows)
  Arena arena;
};

}  // namespace fca
