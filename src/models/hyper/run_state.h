// Per-run state of the hyper model: every activation of one forward pass, carved from one arena sized
// once for the largest batch. Stable names address them (docs/hyper.md): hc.streams.{p} = the n
// streams entering site p [N, n, D] (p = 2L: the last), hc.read.{p} = the branch input a_p [N, D],
// hc.coefficients = C [2L, N, n+1, n+1], hidden.1 = the collapsed state h, logits.
#pragma once
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "models/base/stream.h"
#include "models/hyper/coefficients.h"
#include "models/hyper/config.h"

namespace fca {

template <typename T>
struct HyperRunState : StreamState<T> {
  // keep_all_layers: keep every site's streams and every block's activations (training, traces);
  // otherwise two stream buffers alternate and one set of block activations serves every block.
  HyperRunState(const HyperConfig& config, int max_batch, int max_tokens, bool keep_all_layers);

  HyperConfig config;
  int max_batch, max_tokens;
  bool keep_all_layers;
  int batch = 0, tokens = 0;  // of the last forward pass

  std::vector<BlockActivations<T>> blocks;  // L; the MLP site's read is blocks[l].ln2_in
  std::vector<T*> attention_read;           // L, [N, D]: the attention site's read a_{2l}
  std::vector<T*> stream_buffers;           // 2L+1 (keep_all_layers) or 2, [N, n, D]
  T* coefficients;                          // [2L, N, (n+1)^2]
  // The controller's buffers: one set per site with keep_all_layers (backward reads them), else one.
  std::vector<HyperControllerScratch<T>> controller;
  // Backward scratch (empty unless keep_all_layers): the streams' gradient before and after a site
  // [N, n, D], dC [N, (n+1)^2], the read's gradient [N, D], the MLP's wide gradient [N, 4D], and the
  // controller's: dhc dz [N, n, n+2] and d LN0 [N, n, D]; mhc dz [N, n^2+2n].
  T* d_streams[2];
  T* d_coefficients;
  T* d_read;
  T* d_wide;
  T* d_z;
  T* d_normed;
  T* d_discard;  // [2D]: LN0's parameter gradients (it has no parameters)

  // The streams entering site p (p = 2L: after the last site).
  T* streams(int p) { return stream_buffers[keep_all_layers ? size_t(p) : size_t(p % 2)]; }
  const T* streams(int p) const { return stream_buffers[keep_all_layers ? size_t(p) : size_t(p % 2)]; }
  T* site_coefficients(int p) { return coefficients + int64_t(p) * batch * tokens * config.square() * config.square(); }
  const HyperControllerScratch<T>& controller_scratch(int p) const { return controller[keep_all_layers ? size_t(p) : 0]; }
  // The read a_p of site p.
  T* read(int p) { return p % 2 == 0 ? attention_read[size_t(p / 2)] : blocks[size_t(p / 2)].ln2_in; }
  size_t bytes() const { return arena.capacity(); }

 private:
  template <typename A>
  void layout(A& a, int windows);  // the buffers of `windows` windows (Arena::for_windows)
  Arena arena;
};

}  // namespace fca
