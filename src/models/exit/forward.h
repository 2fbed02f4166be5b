// The exit family's inference pass (docs/exit.md, "Inference"): layer-synchronous and ragged. The rows still
// running are kept compact, in (window, position) order, in X [n_k, D] with their row index
// b*T'+t; every GEMM, LayerNorm, GELU and residual add of block k runs on those n_k rows only.
// After exit point k the continuing rows move to the front (stable) and the exiting rows' states
// go to H [N, D], where they stay frozen. Block k's keys and values: active rows scatter theirs from
// the QKV GEMM; the exited rows that some active query of their window can see (u < the window's
// last active position: need-based propagation) are normalised with block k's ln1 and projected
// with its K/V rows in one GEMM. Attention runs per active query with the dense kernel's
// arithmetic (attention_rows_forward), so a row's result does not depend on which rows run: with
// no exit the pass is bitwise the gated Dense forward of the same weights, and replaying a
// recorded depth record is bitwise the live pass. The head runs once over H.
#pragma once
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "models/base/batch_position.h"
#include "models/base/stream.h"
#include "models/exit/depth_source.h"
#include "models/exit/model.h"
#include "models/prefix_reuse.h"

namespace fca {

template <typename T>
struct ExitRunState {
  ExitRunState(const ExitConfig& config, int max_batch, int max_tokens);

  ExitConfig config;
  int max_batch, max_tokens;
  int batch = 0, tokens = 0;
  int scratch_threads = 0;
  int64_t controller_evaluations = 0;  // counted by the classifier itself

  BlockActivations<T> block;  // one block's buffers for up to N rows (probs unused)
  T* x;                       // [N, D] the running rows' states (compact)
  int32_t* rows;              // [N] b*T'+t of each running row
  int64_t* window_rows;       // [B+1] the running rows of window b: [window_rows[b], window_rows[b+1])
  int32_t* positions;         // [N] t of each running row
  T* frozen;                  // [N, D] H: each token's state at its depth (row b*T'+t)
  int32_t* depth;             // [N] d_t of the last pass
  T* kv;                      // [N, 2D] block k's keys and values by row b*T'+t
  int32_t* propagated;        // [N] rows P_k whose K/V block k projects
  T *propagated_ln, *propagated_kv;  // [N, D], [N, 2D]
  ExitClassifierScratch<T> classifier;  // z [N, D], mean/rstd/scores [N]
  uint8_t* exits;             // [N]
  T* attn_scratch;            // attention_scratch_per_thread(T, dh, false) per thread
  T *ln_f_out, *ln_f_mean, *ln_f_rstd;  // head
  T* logits;                  // [N, 256]
  T* losses;                  // [N]
  int32_t* tokens_in;         // [N]
  int32_t* targets;           // [N]
  // What the last pass ran: rows per block |A_k| [L] and propagated rows |P_k| [L] (0 for the
  // blocks a reused prefix skipped).
  std::vector<int64_t> active_rows, propagated_rows;
  // Blocks 1..m run on every row before any decision (docs/exit.md): a replay of the windows of the
  // last pass starts from their output, kept in prefix_state [N, D] when reuse is enabled.
  PrefixReuse prefix;
  T* prefix_state;
  size_t bytes() const { return arena.capacity(); }

 private:
  template <typename A>
  void layout(A& a, int windows);  // the buffers of `windows` windows (Arena::for_windows)
  Arena arena;
};

template <typename T>
void exit_forward(const ExitModel<T>& model, ExitRunState<T>& rs, const int32_t* tokens, int B, int Tn,
                  ExitDepthSource<T>& depths, int first_window = 0);
template <typename T>
double exit_loss(ExitRunState<T>& rs, const int32_t* targets, double* window_nll);

}  // namespace fca
