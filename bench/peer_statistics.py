"""The statistics of the PyTorch peer audit (compare_audit_pytorch.py), computed as docs/audit.md
defines them and independently of fca's C++: fca's randomisations drawn with its own generator
(python/fca_torch/rng.py), the coefficient ANOVA, factor effects, Monte-Carlo standard errors and the bootstrap
the checker holds fca's intervals against."""

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from fca_torch.rng import Rng, derive_seed, permutations  # noqa: E402  (python/ on the path above)

BOOTSTRAP = 10000
# fca's randomisation streams (src/audit/conditions.cpp: kDerangementStream, kTokenStream,
# kLayerStream), which the peer draws from as fca does (audit_randomisations).
DERANGEMENT_STREAM, TOKEN_STREAM, LAYER_STREAM = 1, 2, 3


def audit_randomisations(seed, W, T, R, L, streams, joint):
    """fca's randomisations for seed (docs/audit.md, src/audit/conditions.cpp), drawn with its
    generator (python/fca_torch/rng.py): the derangements pi_r [R, W] (uniform permutations from the stream
    (seed, 1, r) until one has no fixed point), the token permutations sigma [R, W, L, streams, T]
    (one generator per (r, window, layer, stream), seeded derive_seed(derive_seed(seed, 2, r), window,
    layer << 32 | stream), stream 0 for all with --joint-token-shuffle) and the layer permutations
    [R, L] (stream (seed, 3, r)). Window i of a condition replay receives window pi_r[i]'s coefficients,
    token t of (layer l, stream s) the token sigma[r, i, l, s, t]'s, layer l the profile's layer
    perm[r, l]: so the two tools replay the same tensors, and every randomised figure is
    deterministic given the seed."""
    derangements = []
    for r in range(R):
        rng = Rng(derive_seed(seed, DERANGEMENT_STREAM, r))
        while True:
            d = np.array(rng.permutation(W))
            if (d != np.arange(W)).all():
                break
        derangements.append(d)
    seeds = []
    for r in range(R):
        per_rep = derive_seed(seed, TOKEN_STREAM, r)
        seeds += [derive_seed(per_rep, i, (l << 32) | (0 if joint else st))
                  for i in range(W) for l in range(L) for st in range(streams)]
    sigma = permutations(seeds, T).reshape(R, W, L, streams, T)
    layers = np.array([Rng(derive_seed(seed, LAYER_STREAM, r)).permutation(L) for r in range(R)])
    return np.stack(derangements), sigma, layers


def bootstrap_ci(values, rng, resamples=BOOTSTRAP):
    idx = rng.integers(0, len(values), size=(resamples, len(values)))
    return np.percentile(values[idx].mean(axis=1), [2.5, 97.5]).tolist()


def anova(A, mask):
    """Three-factor ANOVA (coordinate, input, token) of A [W, L, T, S, K] over valid coordinates:
    the total variance (sum of squares / cells) and each effect's share of the sum of squares (None
    for a constant tensor, as fca writes them)."""
    W, L, T, S, K = A.shape
    X = A.transpose(1, 3, 4, 0, 2).reshape(L * S * K, W, T)[mask.reshape(-1)].astype(np.float64)  # [C, W, T]
    m = X.mean()
    c, i, t = X.mean(axis=(1, 2)), X.mean(axis=(0, 2)), X.mean(axis=(0, 1))
    ci, ct, it = X.mean(axis=2), X.mean(axis=1), X.mean(axis=0)
    C = X.shape[0]
    ss = {"coordinate": W * T * ((c - m) ** 2).sum(), "input": C * T * ((i - m) ** 2).sum(),
          "token": C * W * ((t - m) ** 2).sum()}
    ss["coordinate_x_input"] = T * ((ci - c[:, None] - i[None, :] + m) ** 2).sum()
    ss["coordinate_x_token"] = W * ((ct - c[:, None] - t[None, :] + m) ** 2).sum()
    ss["input_x_token"] = C * ((it - i[:, None] - t[None, :] + m) ** 2).sum()
    total = ((X - m) ** 2).sum()
    ss["residual"] = total - sum(ss.values())
    return {"total_variance": float(total / X.size),
            "shares": {k: (float(v / total) if total > 0 else None) for k, v in ss.items()}}


def factor_effects(cc, dc, cs, ds):
    """Per-randomisation factor effects from NLLs [R, W] (cc: correct, [1, W]): {effect: [R, W]}."""
    return {"input": ((dc - cc) + (ds - cs)) / 2, "token": ((cs - cc) + (ds - dc)) / 2,
            "interaction": ds - dc - cs + cc}


def mc_se(per_rep_window):
    """Monte-Carlo standard error of a randomised figure from its values [R, W]: the sample standard
    deviation over r of the window means, / sqrt(R) (audit.md, Statistics)."""
    means = per_rep_window.mean(axis=1)
    return float(means.std(ddof=1) / math.sqrt(len(means)))


def bootstrap_statistics(per_window, names, resamples, seed):
    """The checker's bootstrap of each interval's statistic from per-window values: {name: [B]},
    the windows resampled with replacement B = resamples times (its own generator, seeded by seed),
    the same resamples for every figure (paired), the ratio computed inside each resample for
    retention (docs/audit.md, Statistics). Non-finite resamples (a retention resample dividing by
    0) are left out."""
    W = len(next(iter(per_window.values())))
    idx = np.random.default_rng(seed).integers(0, W, size=(resamples, W))
    den = per_window.get("delta_nll[structure_removed]")
    out = {}
    for k in names:
        if k.startswith("retention["):
            if den is None:
                continue
            with np.errstate(divide="ignore", invalid="ignore"):
                stats = 1 - per_window["delta_nll[" + k[len("retention["):]][idx].mean(1) / den[idx].mean(1)
        else:
            stats = per_window[k][idx].mean(1)
        out[k] = np.sort(stats[np.isfinite(stats)])
    return out
