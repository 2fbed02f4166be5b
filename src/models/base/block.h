// The shared base of every model family built from the pre-norm transformer block
// (src/models/base/): the block as plain functions, split where the families differ (the routed
// families' MLP, the gated family's gate): the attention half (LN1, attention, u, LN2) and the dense
// MLP, and the stream's ends (embedding, tied head). Gated, MoE and MoD blocks are all built from
// these; shapes per docs/model.md, N rows of width D. A block's activations live in
// BlockActivations (stream.h).
#pragma once
#include <cstdint>

#include "models/base/batch_position.h"
#include "models/base/stream.h"
#include "ops/attention.h"

namespace fca {

// One block's parameters: pointers into a flat parameter (or gradient, or optimizer-moment)
// buffer; shapes per docs/model.md.
template <typename T>
struct BlockWeights {
  T *ln1_weight, *ln1_bias;    // [D]
  T *qkv_weight, *qkv_bias;    // [3D, D], [3D]
  T *proj_weight, *proj_bias;  // [D, D], [D]
  T *ln2_weight, *ln2_bias;    // [D]
  T *fc_weight, *fc_bias;      // [4D, D], [4D]
  T *mlp_proj_weight, *mlp_proj_bias;  // [D, 4D], [D]
};

// Scratch buffers of a block's backward pass: [N, D] except d_wide [N, 4D] (or the MLP width) and
// d_qkv [N, 3D]; attn_scratch attention_scratch_per_thread(T, dh, true) per thread.
template <typename T>
struct BlockGradScratch {
  T *d_u, *d_ln2_in, *d_small, *d_wide, *d_qkv, *attn_scratch;
};

// The attention branch alone: x [N, D] -> a.ln1_out = LN1(x), a.qkv, a.probs, a.attn_out, a.u (no
// residual: the hyper-connection family mixes it into its streams itself).
template <typename T>
void attention_branch_forward(BlockActivations<T>& a, T* attn_scratch, const BlockWeights<T>& p, const T* x,
                              int B, int Tn, int D, int H, const AttentionStats<T>* stats);
// The MLP branch alone, from its input in a.ln2_in: a.ln2_out = LN2(a.ln2_in), a.fc_pre, a.fc_act and
// a.update = w = GELU(ln2_out Wfc^T + bfc) Wproj^T + bproj (no residual).
template <typename T>
void mlp_branch_forward(BlockActivations<T>& a, const BlockWeights<T>& p, int N, int D);
// h [N, D] -> a.ln1_out, a.qkv, a.probs, a.attn_out, a.u, a.ln2_in = h + u, a.ln2_out = LN2(h + u).
// stats: the featuregate controller's attention statistics, or null; attn_scratch as
// attention_forward's.
template <typename T>
void attention_half_forward(BlockActivations<T>& a, T* attn_scratch, const BlockWeights<T>& p, const T* h,
                            int B, int Tn, int D, int H, const AttentionStats<T>* stats);

// a.fc_pre, a.fc_act and a.update = F = u + GELU(ln2_out Wfc^T + bfc) Wproj^T + bproj.
template <typename T>
void dense_mlp_forward(BlockActivations<T>& a, const BlockWeights<T>& p, int N, int D);

// The whole Dense block: attention half and dense MLP from h [B*Tn, D], then next = h + F (the
// residual add; no controller, so no mixing FLOPs counted): MoD's unrouted blocks. Its FLOPs and the
// head's are dense_forward_flops (dense.h).
template <typename T>
void dense_block_forward(BlockActivations<T>& a, T* attn_scratch, const BlockWeights<T>& p, const T* h, T* next, int B,
                         int Tn, int D, int H);

// From dF [N, D] (the gradient of the block update F = u + mlp): parameter gradients of the MLP,
// and d(ln2_out) into s.d_small.
template <typename T>
void dense_mlp_backward(BlockWeights<T>& dp, const BlockGradScratch<T>& s, const BlockActivations<T>& a,
                        const BlockWeights<T>& p, const T* dF, int N, int D);

// From d(ln2_out) in s.d_small and du_direct [N, D] (the gradient reaching u other than through
// LN2): parameter gradients of LN2, attention and LN1; d h accumulates into d_h (residual stream).
template <typename T>
void attention_half_backward(T* d_h, BlockWeights<T>& dp, const BlockGradScratch<T>& s,
                             const BlockActivations<T>& a, const BlockWeights<T>& p, const T* h,
                             const T* du_direct, int B, int Tn, int D, int H);

// The branches' backward passes alone (the hyper-connection family): from d u in s.d_u, the
// attention's and LN1's parameter gradients, and d x accumulated into d_x (x: the branch's input);
// from dw [N, D], the MLP's and LN2's, and d(a.ln2_in) accumulated into d_x.
template <typename T>
void attention_branch_backward(T* d_x, BlockWeights<T>& dp, const BlockGradScratch<T>& s, const BlockActivations<T>& a,
                               const BlockWeights<T>& p, const T* x, int B, int Tn, int D, int H);
template <typename T>
void mlp_branch_backward(T* d_x, BlockWeights<T>& dp, const BlockGradScratch<T>& s, const BlockActivations<T>& a,
                         const BlockWeights<T>& p, const T* dw, int N, int D);
// The stream's ends, shared by every family built from the block (N = B*T' rows, width D).
// Checks that every token is a byte, saves them, and writes h_0 = wte[token] + wpe[position].
template <typename T>
void stream_embed(StreamState<T>& s, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int D);
// logits = LayerNorm_f(h_L) wte^T (the tied head).
template <typename T>
void stream_head_forward(StreamState<T>& s, const T* ln_f_weight, const T* ln_f_bias, const T* wte, int L, int64_t N, int D);
// From the saved targets: dlogits (over the logits buffer), dwte and the ln_f gradients
// (accumulated), and d_hidden = d h_L (overwritten), the start of the blocks' backward.
template <typename T>
void stream_head_backward(StreamState<T>& s, T* dwte, T* dln_f_weight, T* dln_f_bias, const T* ln_f_weight, const T* wte,
                          T loss_scale, int L, int64_t N, int D);

}  // namespace fca
