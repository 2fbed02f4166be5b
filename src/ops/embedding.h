// Token + position embedding and the tied output head's loss.
#pragma once
#include <cstdint>

namespace fca {

// h0[b,t,:] = wte[tokens[b,t], :] + wpe[t, :]; tokens [B, T] with values < V; wte [V, C]; wpe [>=T, C].
template <typename T>
void embedding_forward(T* h0, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C);
// dwte[v] += sum of dh0 rows whose token is v; dwpe[t] += sum over b of dh0[b, t]. Column-parallel,
// rows in index order: deterministic for any thread count.
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dh0, const int32_t* tokens, int B, int Tn, int C);

// Per-row cross-entropy (natural log): losses[n] = logsumexp(logits[n]) - logits[n, targets[n]].
template <typename T>
void cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int64_t N, int V);
// The language-model loss of B windows of Tn positions: checks each target is in [0, V) and copies
// it to saved_targets [N] (backward reads them), per-position cross-entropy into losses [N], each
// window's mean into window_nll [B] (may be null); returns the mean over all positions. Sums run in
// a fixed order (windows, then positions).
template <typename T>
double language_model_loss(T* losses, int32_t* saved_targets, const T* logits, const int32_t* targets, int B, int Tn,
                           int V, double* window_nll);
// dlogits[n] = scale * (softmax(logits[n]) - onehot(targets[n])); may alias logits (in place).
template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const int32_t* targets, T scale, int64_t N, int V);

}  // namespace fca
