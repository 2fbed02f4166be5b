// The transformer block of the gated family as plain functions, split where the routed families
// (MoE, Mixture-of-Depths) differ: the attention half (LN1, attention, u, LN2) and the dense MLP.
// Gated, MoE and MoD blocks are all built from these; shapes per the gated-transformer spec, N rows
// of width D. A block's activations live in GatedBlockActivations (run_state.h).
#pragma once
#include <cstdint>

#include "models/gated/model.h"
#include "models/gated/run_state.h"
#include "ops/attention.h"

namespace fca {

// Scratch buffers of a block's backward pass: [N, D] except d_wide [N, 4D] (or the MLP width) and
// d_qkv [N, 3D]; attn_scratch one [T, T] per thread.
template <typename T>
struct BlockGradScratch {
  T *d_u, *d_ln2_in, *d_small, *d_wide, *d_qkv, *attn_scratch;
};

// h [N, D] -> a.ln1_out, a.qkv, a.probs, a.attn_out, a.u, a.ln2_in = h + u, a.ln2_out = LN2(h + u).
// stats: the featuregate controller's attention statistics, or null.
template <typename T>
void attention_half_forward(GatedBlockActivations<T>& a, const GatedBlockWeights<T>& p, const T* h, int B, int Tn, int D,
                            int H, const AttentionStats<T>* stats);

// a.fc_pre, a.fc_act and a.update = F = u + GELU(ln2_out Wfc^T + bfc) Wproj^T + bproj.
template <typename T>
void dense_mlp_forward(GatedBlockActivations<T>& a, const GatedBlockWeights<T>& p, int N, int D);

// From dF [N, D] (the gradient of the block update F = u + mlp): parameter gradients of the MLP,
// and d(ln2_out) into s.d_small.
template <typename T>
void dense_mlp_backward(GatedBlockWeights<T>& dp, const BlockGradScratch<T>& s, const GatedBlockActivations<T>& a,
                        const GatedBlockWeights<T>& p, const T* dF, int N, int D);

// From d(ln2_out) in s.d_small and du_direct [N, D] (the gradient reaching u other than through
// LN2): parameter gradients of LN2, attention and LN1; d h accumulates into d_h (residual stream).
template <typename T>
void attention_half_backward(T* d_h, GatedBlockWeights<T>& dp, const BlockGradScratch<T>& s,
                             const GatedBlockActivations<T>& a, const GatedBlockWeights<T>& p, const T* h,
                             const T* du_direct, int B, int Tn, int D, int H);

}  // namespace fca
