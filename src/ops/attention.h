// Causal multi-head self-attention over a fused qkv buffer, with the optional attention statistics
// that the featuregate controller reads.
//
// Shapes: qkv [B*T, 3D] (columns 0..D-1 = q, D..2D-1 = k, 2D..3D-1 = v; head h owns columns
// h*dh .. h*dh+dh-1 of each), out [B*T, D] (heads concatenated), probs [B, H, T, T] (row t holds
// p[t, u] for u <= t and exact zeros for t < u < the keys its tile computes, attention.cpp; what
// lies beyond is left as it was: only attention itself reads probs, and never there). Scores are
// s[t,u] = q_t . k_u / sqrt(dh). Only the backward pass reads probs: an inference pass passes null,
// and each tile's probabilities then live in the thread's scratch (the same arithmetic, so out is
// bitwise the same) instead of going to a [B, H, T, T] buffer in memory and back.
#pragma once
#include <cstdint>

namespace fca {

// Statistics of the attention distributions for the featuregate controller; all per (b, h, t).
template <typename T>
struct AttentionStats {
  T* logp = nullptr;             // [B,H,T,T] log-softmax of this layer (written for u <= t only), for the
                                 //          next layer's KL
  const T* prev_logp = nullptr;  // [B,H,T,T] the previous layer's logp, or null at layer 0 (KL = 0)
  T* head_features = nullptr;    // [B,H,T,3]: entropy / log(t+1) (0 at t = 0), KL(p || p_prev),
                                 //            logsumexp_u s - log(t+1)
};

// (query, key) pairs whose products the tiled kernels execute per head: the causal triangle plus the
// masked part of each diagonal tile (ops/attention.cpp). The FLOP counts of exec/ use it.
int64_t attention_executed_pairs(int Tn);

// The causal softmax of attention_forward on its own: each of `heads` [Tn, Tn] score matrices,
// row t over keys u <= t in place (zeros beyond t). For the kernel benchmarks.
template <typename T>
void causal_softmax(T* scores, int heads, int Tn);

// Controller FLOPs of the statistics over B x H heads of Tn rows (the convention of
// core/exec_counters.h); with_kl when the previous layer's logp is given.
int64_t attention_statistics_flops(int B, int H, int Tn, bool with_kl);

// Scratch values the attention kernels need per OpenMP thread at Tn tokens and head width dh: a
// head's K^T or V^T [dh, Tn], one row tile's scores [8, Tn] (forward passes without probs and
// attention_rows_forward), and for attention_backward (backward true) its dS [Tn, Tn].
inline int64_t attention_scratch_per_thread(int Tn, int dh, bool backward) {
  return int64_t(dh) * Tn + int64_t(8) * Tn + (backward ? int64_t(Tn) * Tn : 0);
}

// Throws unless the current OpenMP thread count fits scratch sized for `sized_for` threads.
void check_attention_scratch_threads(int sized_for);

// stats may be null: then no statistic is computed, and out/probs are bitwise the same as with it.
// probs may be null (no backward to follow). scratch: attention_scratch_per_thread(Tn, D / H, false)
// values per OpenMP thread.
template <typename T>
void attention_forward(T* out, T* probs, T* scratch, const AttentionStats<T>* stats, const T* qkv, int B, int Tn, int D,
                       int H);

// Causal attention for a subset of the query rows (the exit family's ragged pass). Window b's active
// queries are the compact rows [row_begin[b], row_begin[b+1]) of q (row stride ldq, head h in
// columns h*dh..), at positions pos[i], increasing within the window; keys and values of window b's
// positions come from kv [B*T', 2D] (K in columns 0..D-1, V in D..2D-1; rows that no query reaches
// are never read). Each row runs the dense kernel's arithmetic for its position (the same key count,
// the same product chains and softmax), so out row i (row stride ldo) is bitwise attention_forward's
// row pos[i], whatever other rows are active. scratch: attention_scratch_per_thread(Tn, dh, false)
// values per OpenMP thread. Executed (query, key) pairs are counted as the tiles run.
template <typename T>
void attention_rows_forward(T* out, int64_t ldo, T* scratch, const T* q, int64_t ldq, const T* kv, const int32_t* pos,
                            const int64_t* row_begin, int B, int Tn, int D, int H);
// Keys the tiled kernels run for the query at position t (its tile's causal range, rounded up):
// attention_executed_pairs(Tn) is its sum over t.
int64_t attention_row_pairs(int t, int Tn);

// dqkv [B*T, 3D] is overwritten; scratch: attention_scratch_per_thread(Tn, D / H, true) values per
// OpenMP thread.
template <typename T>
void attention_backward(T* dqkv, T* scratch, const T* dout, const T* probs, const T* qkv, int B, int Tn, int D,
                        int H);

}  // namespace fca
