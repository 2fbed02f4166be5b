// The hyper model's forward pass (docs/hyper.md) as a plain function over a read-only model, a
// run state and a coefficient source, and its loss.
#pragma once
#include <cstdint>

#include "models/hyper/coefficients.h"
#include "models/hyper/model.h"
#include "models/hyper/run_state.h"

namespace fca {

// Runs tokens [B, Tn] (Tn <= seq_len) through the model: x_0 copied into n streams, then at each site
// p the coefficients C_p (from `source`), the read a = sum_i C[0, i+1] X[i], the branch (attention of
// block p/2 for even p, its MLP for odd p), the write X'[j] = C[j+1, 0] F + sum_i C[j+1, i+1] X[i];
// then h = the pairwise sum of the streams, logits = LN_f(h) wte^T. `first_window` tells the source
// which windows the batch rows are. Throws Error when B or Tn exceed the run state or the model.
template <typename T>
void hyper_forward(const HyperModel<T>& model, HyperRunState<T>& rs, const int32_t* tokens, int B, int Tn,
                   HyperCoefficientSource<T>& source, int first_window = 0);

// Cross-entropy of the last forward pass against targets [B, Tn]: fills rs.losses and returns their
// mean; window_nll (may be null) receives each window's mean.
template <typename T>
double hyper_loss(HyperRunState<T>& rs, const int32_t* targets, double* window_nll);

// Backward of loss_scale * the sum of per-position losses of the last forward pass, which must have
// run a live source on a run state that keeps all layers. Parameter gradients are added into
// `grads` (same layout as the model): the blocks, the embeddings, ln_f, and every site's static
// square (never its masked [0, 0]), dynamic weights and scales, through the unrolled Sinkhorn for mhc.
template <typename T>
void hyper_backward(const HyperModel<T>& model, HyperRunState<T>& rs, HyperModel<T>& grads, T loss_scale);

// The mixing of one site over N tokens (docs/hyper.md's bitwise rules: sums over i ascending,
// the C[j+1, 0] F term first). read: a [N, D] from X [N, n, D]; write: X' [N, n, D] from F [N, D].
template <typename T>
void hyper_read(T* a, const T* X, const T* C, int64_t N, int n, int D);
template <typename T>
void hyper_write(T* X_next, const T* X, const T* C, const T* F, int64_t N, int n, int D);
// h [N, D] = the streams summed in adjacent pairs level by level, an odd one carried up
// (n = 4: (X0 + X1) + (X2 + X3); n = 3: (X0 + X1) + X2).
template <typename T>
void hyper_collapse(T* h, const T* X, int64_t N, int n, int D);

}  // namespace fca
