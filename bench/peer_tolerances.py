"""The tolerances bench/compare_audit_pytorch.py holds fca's audit to against the PyTorch peer's:
per figure (FIGURE_TOLERANCE, and what a ratio's or the ANOVA's conditioning requires), the peer
against the repository's examples (PEER_TOLERANCE), and where fca's interval endpoints may fall in
the checker's own bootstrap (RANK_Z). Each constant says why it is that value."""
import math

# Both sides compute NLLs from float32 logits of the same weights; float32 summation orders differ
# (BLAS blocking, fused kernels), which moves a window's NLL by about 1e-7 at this scale, and
# DeltaNLL is a difference of two such means. 1e-5 (the bound) leaves two orders of
# magnitude (single windows' NLLs differed by at most 1.9e-7 at L2 D32 and L4 D128). It holds every
# figure and every window's NLL of every replay: a wrong profile or condition moves most figures by
# 1e-4 or more, and where it moves a mean less it moves windows more (a static profile averaged over
# D instead of C: static_profile's DeltaNLL by 8e-7, its windows' NLLs by up to 2.8e-5). The evaluation
# coefficients are held to it relative to their largest value (max(1, max |A|)): the controllers'
# float32 outputs differ by the same rounding carried through the trunk (1e-7 measured), a wrong
# window order or coefficient layout by 0.1 or more.
FIGURE_TOLERANCE = 1e-5
# The peer against the repository's examples (logits, coefficients, replayed logits): two float32
# implementations of one model, 6e-7 apart on logits and 1e-7 on coefficients at L2 D64 (measured),
# so 1e-4 leaves over two orders of magnitude; a wrong mixing source, stream or attention mask
# moves logits by 1e-2 or more.
PEER_TOLERANCE = 1e-4
# fca's 95% intervals, checked by where their endpoints fall in the checker's own bootstrap of the
# same per-window values (interval_check). fca's endpoint e is the p-quantile (p = 2.5%, 97.5%) of its
# B_f resamples, so F(e), F the bootstrap distribution both sample, lies within p +- sqrt(p (1 - p) /
# B_f) (an order statistic's spread); the checker's fraction of its B_p resamples below e estimates
# F(e) within sqrt(p (1 - p) / B_p). Their difference from p has standard deviation
# sqrt(p (1 - p) (1 / B_f + 1 / B_p)), 0.0022 at 10,000 resamples each, whatever the figure's
# distribution. RANK_Z of those (a false alarm per endpoint of 6e-7, under 1e-4 over the few hundred
# endpoints of a run) let the endpoints fall at ranks 1.4-3.6% and 96.4-98.6%. An endpoint 0.2 of
# its figure's standard errors off (a rank moves by phi(1.96) = 0.058 per standard error) fails, and
# so does an interval of another kind: 90% or 99%, unpaired over windows, one standard error wide.
RANK_Z = 5.0


def figure_tolerances(ours, theirs):
    """The allowed |fca - PyTorch| per figure: FIGURE_TOLERANCE, except for retention.

    Retention R = 1 - n / d is a ratio of two DeltaNLLs (n: the profile's, d: structure_removed's),
    so the two engines' rounding differences in n and d reach R amplified by its conditioning:
    |dR| <= (|dn| + |n / d| |dd|) / |d|. With d small (a briefly trained model: d ~ 6e-6), 3e-9 of
    rounding in the inputs becomes 1e-3 in R while every input agrees to 5e-9. So R must agree as
    well as its inputs explain, twice over, and never looser than needed: the bound is
    max(FIGURE_TOLERANCE, 2 (|dn| + |n / d| |dd|) / |d|) with dn, dd the measured input
    differences. A wrong ratio (another profile, another denominator) still fails it."""
    tol = {k: FIGURE_TOLERANCE for k in ours}
    d_key = "delta_nll[structure_removed]"
    for k in ours:
        if not k.startswith("retention[") or d_key not in ours or d_key not in theirs:
            continue
        n_key = "delta_nll[" + k[len("retention["):]
        if n_key not in ours or n_key not in theirs:
            continue
        n, d = ours[n_key], ours[d_key]
        if None in (n, d, theirs[n_key], theirs[d_key], ours[k]) or d == 0:
            continue
        dn, dd = abs(ours[n_key] - theirs[n_key]), abs(ours[d_key] - theirs[d_key])
        tol[k] = max(FIGURE_TOLERANCE, 2 * (dn + abs(n / d) * dd) / abs(d))
    return tol


def variance_tolerances(ours, theirs, e, cells):
    """The allowed |fca - PyTorch| of the ANOVA figures, from e, the Euclidean distance between the
    two tools' evaluation coefficients over the `cells` valid values.

    The balanced ANOVA splits the centred coefficients x into orthogonal projections, SS_k =
    ||P_k x||^2 (the total: the centring projection), so for the other tool's y = x + d, ||d|| = e:
    |sqrt(SS_k(y)) - sqrt(SS_k(x))| <= ||P_k d|| <= e, hence |dSS_k| <= e (2 sqrt(SS_k(x)) + e).
    A share s = a / t then moves by at most (|da| + s |dt|) / t(y), and the total variance
    t / cells by |dt| / cells. That bound is rigorous; 1e-9 is added for the float64 sums over up
    to millions of cells. Coefficients that barely vary (a near-constant tensor) make the shares
    ill-conditioned, and the bound says by how much."""
    tol = {}
    if ours.get("variance.total_variance") is None or theirs.get("variance.total_variance") is None:
        return tol
    t_ours, t_theirs = ours["variance.total_variance"] * cells, theirs["variance.total_variance"] * cells
    dt = e * (2 * math.sqrt(t_ours) + e)
    tol["variance.total_variance"] = dt / cells + 1e-9
    for k, share in ours.items():
        if k.startswith("variance.share[") and share is not None and t_theirs > 0:
            da = e * (2 * math.sqrt(share * t_ours) + e)
            tol[k] = (da + share * dt) / t_theirs + 1e-9
    return tol
