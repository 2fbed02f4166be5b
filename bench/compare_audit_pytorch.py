"""fca's audit beside a hand-written PyTorch audit of the same checkpoint, windows and conditions.

  /usr/bin/python3 bench/compare_audit_pytorch.py --fca build/fca [--families gated,mudd]
      [--layers 4 --dim 128 --heads 4 --seq 128 --eval-windows 128 --calib-windows 128 --reps 5
       --threads 2 --torch-batch 16 --repeats 3] [--gated-model FILE] [--mudd-model DIR]
      [--json-out FILE] [--precision fp32|bf16]

The peer is the audit a researcher would write (audit-protocol.md), on the fastest PyTorch models
torch 1.13 allows (bench/pytorch_peer.py): GatedPeer (plain batched causal attention wherever no
statistics are needed: every replay, and every live pass of a gate without features) and MuddPeer
(the repository's MUDDPythia, its mixing vectorised over the streams). Before anything is timed,
each is checked against the repository's example (examples/gated_adapter.py,
examples/mudd_adapter.py) on a few evaluation windows: live logits and coefficients, and the logits
of a replay of changed coefficients, within PEER_TOLERANCE. The audit:
  1. live batched forward passes over the evaluation set D (test split) and the calibration set C
     (valid split), recording the coefficient tensors (gated: g [L, T]; MUDD: alpha [L, T, 4, L+1]);
  2. exact replay: the recorded coefficients fed back with the controller disabled, logits compared
     bit for bit with the live ones (kept from step 1), which is also the `correct` condition;
  3. every condition fca runs by default, each a batched replay: cross_input, token_shuffle and
     cross_shuffle (R randomisations, paired), layer_position_mean, static_profile,
     structure_removed, identity, and layer_permutation (R randomisations) where every layer has the
     same valid coordinates (gated only). The randomisations are fca's own: the peer draws the
     derangements and the token and layer permutations from --seed with fca's generator and streams
     (python/fca_torch/rng.py, audit_randomisations), so both tools replay the same coefficient tensors;
  4. the statistics in numpy: DeltaNLL, 10,000-resample paired bootstrap CIs for every figure, MC
     SE, factor effects, retention, and the three-factor ANOVA of the evaluation coefficients.

Compared, each listed with its difference (exit 1 on any disagreement); with the same
randomisations every figure is deterministic given the seed, so none is compared only in
distribution:
  - every figure: baseline, live and calibration NLL; the DeltaNLL of every condition (correct and
    the randomised ones included) and the MC SE of each randomised one; the three factor effects
    and their MC SEs (fca's from its windows.csv); retention; the ANOVA's total variance and its
    seven shares; and the evaluation coefficients themselves (fca's from its cache). Each within
    FIGURE_TOLERANCE, or what its conditioning requires (figure_tolerances, variance_tolerances).
  - the NLL of every (condition, randomisation, window), fca's windows.csv against the peer's,
    within FIGURE_TOLERANCE: each draw, not only the means over draws.
  - every 95% interval: defined on both sides or undefined on both, and fca's endpoints where a
    95% paired percentile bootstrap puts them: at ranks 2.5% and 97.5% of the checker's own
    bootstrap of the same per-window values, within what two bootstraps' resampling explains
    (RANK_Z, interval_check). Bootstrap endpoints are random, so they are not compared as numbers.
  - every round: each side's results must be the same bit for bit in every round (the same seed,
    windows and threads), and every round's are compared with the peer's as above (in full for the
    first round, then only what disagrees).

--precision bf16 times fca's bf16 audit (`fca audit --precision bf16`, oneDNN) against the same peer
under torch.autocast("cpu", dtype=torch.bfloat16) (PyTorch's bf16 products, through its own oneDNN):
each side's exact replay and round-to-round bits are still required, but the figures, which the
two round to bf16 in different places, are compared for information only (fca's bf16 figures are
held against its fp32 ones in tests/precision_test.cpp and bench/precision_compare.py).

Fairness (as bench/compare_pytorch.py): both sides run with this process's environment; what each
runs is recorded (PyTorch's ATen capability, OpenBLAS core and threads, fca's provenance) and the
script exits 2, before timing anything, unless both run the same instruction set (on an AVX-512
CPU: no OPENBLAS_CORETYPE narrower than AVX-512, and ATEN_CPU_CAPABILITY=avx512, torch 1.13's
AVX-512 kernels being opt-in) on the same number of threads; and it exits 2 after any round whose
audit.json records other threads than torch.get_num_threads() ran the PyTorch audit with.

Timing: --repeats alternating rounds per family, the PyTorch audit (loading the model included)
then `fca audit` (a fresh output folder, so no cache is reused); each side's wall time and the
per-round speed-up (PyTorch's wall time over fca's) as median [min, max], and the fastest PyTorch
round over fca's median. The peer's time is bimodal on some machines: on a 2-core Zen 4, a PyTorch
model instance ran its passes either about 45% slower or not, for the whole of its life, with
OpenBLAS's packing routine (sgemm_oncopy) taking 8.7% of the samples instead of 2.5%: where its
memory lands appears to decide it (with address-space randomisation off every process was slow), so the
median speed-up depends on how many rounds drew the slow state, and the fastest round is the peer
at its best. The peer's time excludes drawing fca's randomisations (done once, before the rounds;
numpy's own draws would cost it less). Without --gated-model / --mudd-model, small models are
trained with fca first (seconds), so that the gates and mixing weights are not those of a random
initialisation.
"""

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

from bench_io import format_spread, spread, write_json_atomically  # noqa: E402  (bench/ is the script's folder)
from peer_statistics import (BOOTSTRAP, anova, audit_randomisations, bootstrap_ci, bootstrap_statistics,  # noqa: E402
                             factor_effects, mc_se)
from peer_tolerances import (FIGURE_TOLERANCE, PEER_TOLERANCE, RANK_Z, figure_tolerances,  # noqa: E402
                             variance_tolerances)
from pytorch_peer import (GatedPeer, MuddPeer, describe_runtime, fairness_problems, fca_runtime,
                          torch_runtime)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import fca_adapter    # noqa: E402  (safetensors reading)
import gated_adapter  # noqa: E402  (the repository's PyTorch gated family)
import mudd_adapter   # noqa: E402  (the repository's PyTorch MUDDPythia)

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fca", default="build/fca")
    ap.add_argument("--data", default=os.path.join(HERE, "..", "data", "nlp-corpus"))
    ap.add_argument("--families", default="gated,mudd")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--train-steps", type=int, default=150, help="steps of the fca-trained models")
    ap.add_argument("--gated-model", help="featuregate checkpoint (default: train one)")
    ap.add_argument("--mudd-model", help="byte-level MUDD folder (default: train one)")
    ap.add_argument("--eval-windows", type=int, default=128)
    ap.add_argument("--calib-windows", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--torch-batch", type=int, default=16, help="windows per PyTorch forward pass")
    ap.add_argument("--repeats", type=int, default=3, help="alternating rounds: PyTorch, fca, PyTorch, fca, ...")
    ap.add_argument("--fca-args", default="", help="extra arguments for fca audit (e.g. '--batch 16')")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: fca audit --precision bf16 against the peer under torch.autocast('cpu', bfloat16); the "
                         "figures are then compared for information only (the two round differently)")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    if args.reps < 2:
        ap.error("--reps must be at least 2 (fca's minimum: a Monte-Carlo standard error needs two)")
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    return args


def fail(msg, status=1):
    print(f"compare_audit_pytorch: {msg}", file=sys.stderr)
    sys.exit(status)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"`{' '.join(cmd)}` exited {p.returncode}:\n{p.stderr[-3000:]}")
    return p


# ------------------------------------------------------------------------------------------------
# Windows: docs/data.md's layout, byte-level (token id = byte).

def windows(path, T, wanted):
    data = np.frombuffer(open(path, "rb").read(), dtype=np.uint8)
    available = (len(data) - 1) // T
    n = min(wanted, available)
    idx = [k * available // n for k in range(n)]
    w = np.stack([data[i * T:i * T + T + 1] for i in idx]).astype(np.int64)
    return torch.from_numpy(w[:, :T]), torch.from_numpy(w[:, 1:])


def window_nll(logits, targets):
    """Mean NLL per window in float64, from float32 logits [B, T, V]."""
    logp = torch.log_softmax(logits.double(), dim=-1)
    return -logp.gather(-1, targets[..., None])[..., 0].mean(dim=1)


# ------------------------------------------------------------------------------------------------
# The two families behind one small interface: forward(ids, coefficients or None) ->
# (logits, coefficients [B, L, T, S, K]), the validity mask [L, S, K], identity and structure_removed.
# `example` is the repository's example model behind the same interface, for the peer check.

class Gated:
    name = "gated"

    def __init__(self, path):
        loaded = gated_adapter.GatedTransformer(path)        # reads and checks the checkpoint
        self.m = GatedPeer(loaded.config, loaded.P, replays=True, on_controller=self.on_controller)
        self.replaying = False
        self.mask = np.ones((self.m.L, 1, 1), dtype=bool)

    def on_controller(self):
        if self.replaying:
            raise RuntimeError("the controller ran during a replay")

    def forward(self, ids, coef):
        self.replaying = coef is not None
        logits, g = self.m.forward(ids, None if coef is None else coef[:, :, :, 0, 0])
        return logits, g[..., None, None]

    @staticmethod
    def example(path):
        m = gated_adapter.GatedTransformer(path)

        def forward(ids, coef):
            logits, g = m.forward(ids, None if coef is None else coef[:, :, :, 0, 0])
            return logits, g[..., None, None]
        return forward

    def identity(self, S):
        return np.ones_like(S)

    def structure_removed(self, S):
        return np.full_like(S, np.float32(S[:, 0, 0, 0].astype(np.float64).mean()))


class Mudd:
    name = "mudd"

    def __init__(self, folder):
        self.m = MuddPeer.from_pretrained(folder)
        L = self.m.L
        self.mask = np.zeros((L, 4, L + 1), dtype=bool)
        for i in range(L):
            self.mask[i, :self.m.C[i], :i + 2] = True
        self.replaying = False
        self.m.on_controller = self.on_controller

    def on_controller(self):
        if self.replaying:
            raise RuntimeError("the DA generator ran during a replay")

    def forward(self, ids, coef):
        self.replaying = coef is not None
        return self.m.forward(ids, coef)

    @staticmethod
    def example(folder):
        return mudd_adapter.MuddPythia.from_pretrained(folder).forward

    def identity(self, S):
        out = np.zeros_like(S)
        for i in range(self.m.L):
            out[i, :, :self.m.C[i], i + 1] = 1.0
        return out

    def structure_removed(self, S):
        out = np.zeros_like(S)
        for i in range(self.m.L):
            valid = self.mask[i, 0].sum()
            total = S[i, 0].astype(np.float64).sum(axis=-1)          # [streams]: sum over sources
            out[i, :, :, :] = (total / valid)[None, :, None].astype(np.float32) * self.mask[i][None]
        return out


FAMILIES = {"gated": Gated, "mudd": Mudd}


def check_peer(family, path, ids):
    """The peer against the repository's example on a few windows: live logits and coefficients,
    and the logits of a replay of every valid coefficient v changed to v + 0.25 (1 + |v|) (fca's
    replay sensitivity probe). Returns the largest differences; exits 1 past PEER_TOLERANCE."""
    model, example = FAMILIES[family](path), FAMILIES[family].example(path)
    with torch.no_grad():
        logits, coef = model.forward(ids, None)
        ex_logits, ex_coef = example(ids, None)
        mask = torch.from_numpy(model.mask)[:, None]                     # [L, 1, S, K]: over tokens
        changed = torch.where(mask, coef + 0.25 * (1 + coef.abs()), coef)
        replayed, _ = model.forward(ids, changed)
        ex_replayed, _ = example(ids, changed)
    diffs = {"live logits": (logits - ex_logits).abs().max().item(),
             "coefficients": ((coef - ex_coef).abs() * mask).max().item(),
             "replayed logits": (replayed - ex_replayed).abs().max().item()}
    if not max(diffs.values()) <= PEER_TOLERANCE:               # also catches NaN
        fail(f"{family}: the PyTorch peer differs from the repository's example: {diffs} > {PEER_TOLERANCE:g}")
    return diffs


# ------------------------------------------------------------------------------------------------
# The PyTorch audit.

def batched(model, ids, targets, coef_fn, batch, keep_logits=False, bf16=False):
    """NLL per window [W] (and coefficients, logits) over batches; coef_fn(w0, w1) gives the
    coefficients of windows w0..w1-1, or None for a live pass. With bf16, the forward passes run
    under PyTorch's CPU autocast to bfloat16 (its matrix products through oneDNN); logits, NLLs and
    recorded coefficients are taken back to float32."""
    nll, coefs, logits = [], [], []
    for w0 in range(0, ids.shape[0], batch):
        w1 = min(w0 + batch, ids.shape[0])
        c = coef_fn(w0, w1)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            lg, used = model.forward(ids[w0:w1], None if c is None else torch.from_numpy(c))
        lg, used = lg.float(), used.float()
        nll.append(window_nll(lg, targets[w0:w1]))
        if c is None:
            coefs.append(used.numpy().copy())
        if keep_logits:
            logits.append(lg)
    return (torch.cat(nll).numpy(), np.concatenate(coefs) if coefs else None,
            torch.cat(logits) if keep_logits else None)


def pytorch_audit(model, data, args, draws):
    """The audit of model on args' windows with fca's randomisations draws (audit_randomisations,
    drawn once before anything is timed): (figures, evaluation coefficients [W, L, T, S, K],
    timings, window passes). The figures hold every condition's NLLs per randomisation and window
    ("nll", [R, W]) and what each interval bootstraps ("per_window", [W])."""
    timings = {}
    t0 = time.perf_counter()
    T, batch, R = args.seq, args.torch_batch, args.reps
    bf16 = args.precision == "bf16"
    eval_ids, eval_tg = windows(os.path.join(data, "test.txt"), T, args.eval_windows)
    cal_ids, cal_tg = windows(os.path.join(data, "valid.txt"), T, args.calib_windows)
    W = eval_ids.shape[0]
    timings["io"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    with torch.no_grad():
        live_nll, A, live_logits = batched(model, eval_ids, eval_tg, lambda a, b: None, batch, keep_logits=True, bf16=bf16)
        cal_nll, Ac, _ = batched(model, cal_ids, cal_tg, lambda a, b: None, batch, bf16=bf16)
        # Exact replay = correct.
        correct, _, replay_logits = batched(model, eval_ids, eval_tg, lambda a, b: A[a:b], batch, keep_logits=True, bf16=bf16)
        if not torch.equal(live_logits, replay_logits) or not np.array_equal(live_nll, correct):
            fail(f"{model.name}: the PyTorch replay of the recorded coefficients is not exact")
        L, T_, Sn, K = A.shape[1:]
        S = np.broadcast_to(Ac.astype(np.float64).mean(axis=(0, 2))[:, None], (L, T_, Sn, K)).astype(np.float32)
        lpm = Ac.astype(np.float64).mean(axis=0).astype(np.float32)             # [L, T, S, K]
        profiles = {"layer_position_mean": lpm, "static_profile": S,
                    "structure_removed": model.structure_removed(S), "identity": model.identity(S)}
        derangements, sigma, layer_perms = draws    # sigma[r, i, l, s]: window i's permutation of the tokens

        def shuffled(src, r, a, b):
            s = sigma[r, a:b]                                                    # [B, L, S, T]
            out = np.empty_like(src)
            for st in range(Sn):
                idx = s[:, :, st, :][..., None]                                  # [B, L, T, 1]
                out[:, :, :, st, :] = np.take_along_axis(src[:, :, :, st, :], idx, axis=2)
            return out

        nll = {}
        for r in range(R):
            d = derangements[r]
            nll.setdefault("cross_input", []).append(batched(model, eval_ids, eval_tg, lambda a, b: A[d[a:b]], batch, bf16=bf16)[0])
            nll.setdefault("token_shuffle", []).append(
                batched(model, eval_ids, eval_tg, lambda a, b: shuffled(A[a:b], r, a, b), batch, bf16=bf16)[0])
            nll.setdefault("cross_shuffle", []).append(
                batched(model, eval_ids, eval_tg, lambda a, b: shuffled(A[d[a:b]], r, a, b), batch, bf16=bf16)[0])
        for name, prof in profiles.items():
            nll[name] = [batched(model, eval_ids, eval_tg, lambda a, b: np.broadcast_to(prof, (b - a,) + prof.shape).copy(),
                                 batch, bf16=bf16)[0]]
        permutable = all((model.mask[l] == model.mask[0]).all() for l in range(L))
        if permutable:
            for r in range(R):
                prof = S[layer_perms[r]]
                nll.setdefault("layer_permutation", []).append(
                    batched(model, eval_ids, eval_tg, lambda a, b: np.broadcast_to(prof, (b - a,) + prof.shape).copy(),
                            batch, bf16=bf16)[0])
    timings["forward_passes"] = time.perf_counter() - t0
    passes = 2 * W + cal_ids.shape[0] + sum(len(v) for v in nll.values()) * W

    t0 = time.perf_counter()
    stats_rng = np.random.default_rng(args.seed + 1)
    out = {"baseline_nll": float(correct.mean()), "live_nll": float(live_nll.mean()), "calib_nll": float(cal_nll.mean()),
           "conditions": {}}
    nll["correct"] = [correct]                                   # the exact replay, DeltaNLL 0 by definition
    out["nll"] = {name: np.stack(reps) for name, reps in nll.items()}
    out["per_window"] = {}                                        # what each interval bootstraps, [W]
    for name, reps in nll.items():
        per_rep = np.stack(reps) - correct[None]
        delta = per_rep.mean(axis=0)
        out["per_window"][f"delta_nll[{name}]"] = delta
        out["conditions"][name] = {"delta_nll": float(delta.mean()), "ci95": bootstrap_ci(delta, stats_rng),
                                   "mc_se": mc_se(per_rep) if len(reps) > 1 else None, "reps": len(reps)}
    effects = factor_effects(correct[None], *(np.stack(nll[n]) for n in ("cross_input", "token_shuffle", "cross_shuffle")))
    out["factor_effects"] = {k: {"estimate": float(v.mean()), "ci95": bootstrap_ci(v.mean(0), stats_rng),
                                 "mc_se": mc_se(v), "reps": R} for k, v in effects.items()}
    out["per_window"].update({f"factor_effect[{k}]": v.mean(0) for k, v in effects.items()})
    den = np.stack(nll["structure_removed"]).mean(0) - correct
    out["retention"] = {}
    for s in ("static_profile", "layer_position_mean"):
        num = np.stack(nll[s]).mean(0) - correct
        idx = stats_rng.integers(0, W, size=(BOOTSTRAP, W))
        if den.mean() == 0 or (den[idx].mean(1) == 0).any():  # 0/0, or resamples that divide by 0: undefined, as in fca
            out["retention"][s] = {"estimate": None, "ci95": None}
            continue
        ratio = 1 - num[idx].mean(1) / den[idx].mean(1)
        out["retention"][s] = {"estimate": float(1 - num.mean() / den.mean()),
                               "ci95": np.percentile(ratio, [2.5, 97.5]).tolist()}
    out["variance"] = anova(A, model.mask)
    timings["statistics"] = time.perf_counter() - t0
    return out, A, timings, passes


# ------------------------------------------------------------------------------------------------
# The two audits' figures, by the same names.

def fca_figures(audit, out_dir):
    """fca's figures from audit.json, and from windows.csv its NLLs, per-window values and factor
    effects' MC SEs, as {"values": {name: number or None (undefined)}, "reps": {randomised figure:
    R}, "intervals": {name: ci95}, "per_window": {name: [W], what its interval bootstraps}, "nll":
    {condition: [R, W]}}. With the same randomisations on both sides every figure is deterministic,
    so "values" holds the randomised ones too: each condition's delta_nll[...], mc_se[...] where
    randomised, factor_effect[...] with its mc_se[factor_effect.<name>]."""
    a = audit
    values = {"baseline_nll": a["baseline"]["nll"], "live_nll": a["baseline"]["live_nll"],
              "calib_nll": a["baseline"]["calib_nll"]}
    reps, ci = {}, {}
    for c in a["conditions"]:
        key = f"delta_nll[{c['name']}]"
        values[key], ci[key] = c["delta_nll"], c["ci95"]
        if c["randomized"]:
            values[f"mc_se[{c['name']}]"], reps[key] = c["mc_se"], c["reps"]
    for s, r in a["retention"].items():
        values[f"retention[{s}]"], ci[f"retention[{s}]"] = r["estimate"], r["ci95"]
    values["variance.total_variance"] = a["variance"]["total_variance"]
    for k, v in a["variance"]["shares"].items():
        values[f"variance.share[{k}]"] = v

    # windows.csv: one row per (condition, rep, window). Every figure read from it is checked
    # against audit.json's value first (means are linear in the NLLs), which checks the reading.
    by_condition = {}
    with open(os.path.join(out_dir, "windows.csv")) as f:
        for row in csv.DictReader(f):
            by_condition.setdefault(row["condition"], {}).setdefault(int(row["rep"]), {})[int(row["window"])] = float(row["nll"])
    table = {name: np.array([[reps_[r][w] for w in sorted(reps_[r])] for r in sorted(reps_)])    # [R, W]
             for name, reps_ in by_condition.items()}
    reported = {f"delta_nll[{c['name']}]": c["delta_nll"] for c in a["conditions"]}
    per_window = {f"delta_nll[{name}]": (nll - table["correct"]).mean(axis=0) for name, nll in table.items()}
    factorial = ("correct", "cross_input", "token_shuffle", "cross_shuffle")
    effects = factor_effects(*(table[n] for n in factorial)) if all(n in table for n in factorial) else {}
    for k, v in effects.items():
        key = f"factor_effect[{k}]"
        reported[key] = values[key] = a["factor_effects"][k]["estimate"]
        values[f"mc_se[factor_effect.{k}]"], reps[key] = mc_se(v), v.shape[0]
        per_window[key], ci[key] = v.mean(axis=0), a["factor_effects"][k]["ci95"]
    for k, x in per_window.items():
        if abs(x.mean() - reported[k]) > 1e-9:
            fail(f"fca's windows.csv gives {k} = {x.mean():.10g}, its audit.json {reported[k]:.10g}")
    return {"values": values, "reps": reps, "intervals": ci, "per_window": per_window, "nll": table}


def torch_figures(t):
    """The PyTorch audit's figures, as fca_figures."""
    values = {"baseline_nll": t["baseline_nll"], "live_nll": t["live_nll"], "calib_nll": t["calib_nll"]}
    reps, ci = {}, {}
    for name, c in t["conditions"].items():
        key = f"delta_nll[{name}]"
        values[key], ci[key] = c["delta_nll"], c["ci95"]
        if c["mc_se"] is not None:
            values[f"mc_se[{name}]"], reps[key] = c["mc_se"], c["reps"]
    for s, r in t["retention"].items():
        values[f"retention[{s}]"], ci[f"retention[{s}]"] = r["estimate"], r["ci95"]
    values["variance.total_variance"] = t["variance"]["total_variance"]
    for k, v in t["variance"]["shares"].items():
        values[f"variance.share[{k}]"] = v
    for k, e in t["factor_effects"].items():
        key = f"factor_effect[{k}]"
        values[key], values[f"mc_se[factor_effect.{k}]"], reps[key], ci[key] = e["estimate"], e["mc_se"], e["reps"], e["ci95"]
    return {"values": values, "reps": reps, "intervals": ci, "per_window": t["per_window"], "nll": t["nll"]}


def interval_check(ci, stats, fca_resamples):
    """Where the endpoints of fca's 95% interval ci fall in the checker's bootstrap distribution
    stats (sorted) of the same figure: per endpoint, the fractions of resamples below it and at or
    below it (they differ where resamples tie), and the largest distance of that range from the
    nominal 2.5% / 97.5% allowed (RANK_Z, above). Returns (agree, [(below, at_or_below, nominal,
    allowed) per endpoint])."""
    ranks, ok = [], True
    for e, p in zip(ci, (0.025, 0.975)):
        below = int(np.searchsorted(stats, e, side="left")) / len(stats)
        at_or_below = int(np.searchsorted(stats, e, side="right")) / len(stats)
        allowed = RANK_Z * math.sqrt(p * (1 - p) * (1 / fca_resamples + 1 / len(stats)))
        ok = ok and below - allowed <= p <= at_or_below + allowed
        ranks.append((below, at_or_below, p, allowed))
    return ok, ranks


def bit_differences(a, b, path=""):
    """The paths at which two rounds' results differ in any bit (dicts, lists, arrays, numbers)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path} (keys {sorted(set(a) ^ set(b))})"]
        return [d for k in sorted(a) for d in bit_differences(a[k], b[k], f"{path}.{k}" if path else str(k))]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [path]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in bit_differences(x, y, f"{path}[{i}]")]
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        x, y = np.asarray(a), np.asarray(b)
        return [] if x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes() else [path]
    if isinstance(a, float) and isinstance(b, float):
        return [] if np.float64(a).tobytes() == np.float64(b).tobytes() else [path]
    return [] if a == b and type(a) is type(b) else [path]


def compare(family, ours, theirs, A_fca, A_torch, mask, audit, torch_out, args, verbose):
    """Every figure of the two audits of one round side by side; printed in full when verbose, else
    only what disagrees and a summary. ours, theirs: fca_figures and torch_figures; A_fca, A_torch:
    the evaluation coefficients [W, L, T, S, K]. Returns (agree, the comparison)."""
    say = print if verbose else (lambda *a, **k: None)
    problems = [f"{kind} only in {side}: {sorted(names)}"
                for kind in ("values", "reps", "intervals", "nll")
                for side, names in (("fca", set(ours[kind]) - set(theirs[kind])),
                                    ("PyTorch", set(theirs[kind]) - set(ours[kind]))) if names]
    problems += [f"{k} ran {ours['reps'][k]} randomisations in fca, {theirs['reps'][k]} in PyTorch"
                 for k in sorted(set(ours["reps"]) & set(theirs["reps"])) if ours["reps"][k] != theirs["reps"][k]]
    lines = []                                                   # (line, agrees)

    # The evaluation coefficients, fca's from its cache (same windows, same order).
    valid = np.broadcast_to(mask[None, :, None], A_torch.shape)
    cells = int(valid.sum())
    if A_fca.shape != A_torch.shape:
        problems.append(f"evaluation coefficients of shape {list(A_fca.shape)} in fca's cache, {list(A_torch.shape)} in PyTorch")
        e = coef_diff = coef_tol = float("nan")
    else:
        d = np.where(valid, A_fca - A_torch, 0.0)
        e, coef_diff = float(np.sqrt((d ** 2).sum())), float(np.abs(d).max())
        coef_tol = FIGURE_TOLERANCE * max(1.0, float(np.abs(A_fca[valid]).max()))
    lines.append((f"  evaluation coefficients: max |fca - PyTorch| = {coef_diff:.2e} over {cells} valid values "
                  f"(tolerance {coef_tol:.2g})", coef_diff <= coef_tol))

    # Every figure, randomised ones included: both tools replayed the same tensors.
    a_vals, b_vals = ours["values"], theirs["values"]
    tolerance = figure_tolerances(a_vals, b_vals)
    tolerance.update(variance_tolerances(a_vals, b_vals, e, cells))
    number = lambda v: "undefined" if v is None else f"{v:+.8e}"
    figures = {}
    lines.append((f"  figures (the same randomisations on both sides): |fca - PyTorch| within the tolerance "
                  f"(FIGURE_TOLERANCE {FIGURE_TOLERANCE:g}, or derived from the figure's conditioning)", True))
    for k in sorted(set(a_vals) & set(b_vals)):
        a, b = a_vals[k], b_vals[k]
        if a is None or b is None:                               # undefined: must be undefined on both sides
            ok, diff = a is None and b is None, None
        else:
            diff = abs(a - b)
            ok = diff <= tolerance[k]                            # also catches NaN
        figures[k] = {"fca": a, "pytorch": b, "abs_diff": diff, "tolerance": tolerance[k], "agree": ok}
        lines.append((f"    {k:38s} fca {number(a):>15s}  PyTorch {number(b):>15s}  "
                      f"|diff| {'-' if diff is None else format(diff, '.2e'):>8s}  (tolerance {tolerance[k]:.2g})", ok))

    # Every replay's NLL, window by window: each randomisation's draws, not only their means.
    window_nll = {}
    lines.append((f"  NLL of every (condition, randomisation, window): max |fca - PyTorch| within "
                  f"FIGURE_TOLERANCE {FIGURE_TOLERANCE:g}", True))
    for k in sorted(set(ours["nll"]) & set(theirs["nll"])):
        x, y = ours["nll"][k], theirs["nll"][k]
        diff = float(np.abs(x - y).max()) if x.shape == y.shape else float("nan")
        ok = diff <= FIGURE_TOLERANCE
        window_nll[k] = {"shape": list(x.shape), "max_abs_diff": diff, "agree": ok}
        lines.append((f"    {k:38s} {x.shape[0]} x {x.shape[1]} NLLs (PyTorch {y.shape[0]} x {y.shape[1]})  "
                      f"max |diff| {diff:.2e}", ok))

    # fca's intervals against the checker's bootstrap of fca's own per-window values (just checked
    # against the peer's, window by window): the same statistic, resampled by other hands.
    fca_resamples = audit["settings"]["bootstrap_resamples"]
    names = sorted(set(ours["intervals"]) & set(theirs["intervals"]))
    stats = bootstrap_statistics(ours["per_window"], [k for k in names if ours["intervals"][k] is not None],
                                 BOOTSTRAP, args.seed + 2)
    intervals = {}
    lines.append((f"  95% intervals: defined on both sides or on neither; fca's endpoints at ranks 2.5% and 97.5% of "
                  f"the checker's {BOOTSTRAP}-resample bootstrap of the same values, within {RANK_Z:g} standard "
                  f"deviations of a rank", True))
    for k in names:
        a, b = ours["intervals"][k], theirs["intervals"][k]
        if a is None or b is None or k not in stats:
            ok, ranks = a is None and b is None, None
            text = "undefined on both sides" if ok else f"fca {a}, PyTorch {b}"
        else:
            ok, ranks = interval_check(a, stats[k], fca_resamples)
            text = (f"fca [{a[0]:+.4e}, {a[1]:+.4e}]  ranks " +
                    ", ".join(f"{lo:.2%}" + ("" if hi == lo else f"-{hi:.2%}") + f" (allowed {p - q:.1%}-{p + q:.1%})"
                              for lo, hi, p, q in ranks))
        intervals[k] = {"fca": a, "pytorch": b, "ranks": ranks, "agree": ok}
        lines.append((f"    {k:38s} {text}", ok))

    fca_conditions = {c["name"] for c in audit["conditions"]}
    if fca_conditions != set(torch_out["conditions"]):
        problems.append(f"conditions differ: fca {sorted(fca_conditions)}, PyTorch {sorted(torch_out['conditions'])}")
    if not audit["exact_replay"]["passed"]:
        problems.append("fca's exact replay did not pass")
    agree = all(ok for _, ok in lines) and not problems
    for line, ok in lines:
        if verbose or not ok:
            print(line + ("" if ok else "  DISAGREES"))
    for p in problems:
        print(f"  {family}: {p}")
    verdict = ("every figure agrees" if agree else
               "differences above: bf16 rounding, for information only" if args.precision == "bf16" else "DISAGREEMENTS above")
    say(f"  {family}: {verdict}")
    return agree, {
        "coefficients": {"max_abs_diff": coef_diff, "euclidean_diff": e, "tolerance": coef_tol},
        "figures": figures, "window_nll": window_nll, "intervals": intervals, "problems": problems}


def train_model(args, family, workdir):
    out = os.path.join(workdir, "featuregate.safetensors" if family == "gated" else "mudd")
    cmd = [args.fca, "train", "--layers", str(args.layers), "--dim", str(args.dim), "--heads", str(args.heads),
           "--seq", str(args.seq), "--steps", str(args.train_steps), "--warmup", "20", "--eval-every", "0",
           "--no-progress", "--threads", str(args.threads), "--data", args.data, "--out", out]
    cmd += ["--gate", "featuregate"] if family == "gated" else ["--arch", "mudd"]
    run(cmd)
    return out


def fca_provenance(args, model, workdir):
    """fca's provenance (its build: SIMD target and GEMM kernels), from a one-token trace."""
    out = os.path.join(workdir, "provenance-trace.safetensors")
    run([args.fca, "trace", "--model", model, "--text", "a", "--threads", str(args.threads), "--out", out])
    return json.loads(fca_adapter.read_safetensors_file(out)[1]["provenance"])


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    if not (os.path.isfile(args.fca) and os.access(args.fca, os.X_OK)):
        fail(f"no executable fca binary at {args.fca!r}")
    families = [f for f in args.families.split(",") if f]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        fail(f"unknown families {unknown} (known: {', '.join(FAMILIES)})")
    pt_runtime = torch_runtime()
    results = {"settings": vars(args), "runtime": {"pytorch": pt_runtime, "fca": None}, "families": {}}
    print(f"compare_audit_pytorch: L{args.layers} D{args.dim} H{args.heads} T{args.seq}, "
          f"{args.eval_windows} + {args.calib_windows} windows, {args.reps} reps, {args.threads} threads, "
          f"PyTorch batch {args.torch_batch}, {args.repeats} alternating round{'s' * (args.repeats > 1)} (PyTorch first)")
    print(describe_runtime("PyTorch", pt_runtime))
    ok = True
    with tempfile.TemporaryDirectory(prefix="fca-audit-compare-") as workdir:
        for family in families:
            path = args.gated_model if family == "gated" else args.mudd_model
            if path is None:
                path = train_model(args, family, workdir)
            if results["runtime"]["fca"] is None:               # once, before anything is timed
                fca_rt = fca_runtime(fca_provenance(args, path, workdir))
                results["runtime"]["fca"] = fca_rt
                print(describe_runtime("fca", fca_rt))
                problems = fairness_problems(pt_runtime, fca_rt)
                if problems:
                    fail("not a fair comparison, so nothing was timed:\n  " + "\n  ".join(problems), status=2)

            ids, _ = windows(os.path.join(args.data, "test.txt"), args.seq, min(4, args.eval_windows))
            peer = check_peer(family, path, ids)
            # fca's randomisations, drawn once before anything is timed (the peer's own draws, numpy's,
            # would cost it less than the few tenths of a second fca's generator takes in Python).
            W = windows(os.path.join(args.data, "test.txt"), args.seq, args.eval_windows)[0].shape[0]
            L, streams = FAMILIES[family](path).mask.shape[:2]
            draws = audit_randomisations(args.seed, W, args.seq, args.reps, L, streams,
                                         joint="--joint-token-shuffle" in args.fca_args.split())

            rounds, results_of_round = [], []
            for r in range(args.repeats):
                t0 = time.perf_counter()
                model = FAMILIES[family](path)
                torch_threads = torch.get_num_threads()
                torch_out, A_torch, torch_times, torch_passes = pytorch_audit(model, args.data, args, draws)
                torch_wall = time.perf_counter() - t0

                out_dir = os.path.join(workdir, f"{family}-audit-{r}")
                cmd = [args.fca, "audit", "--model", path, "--data", args.data, "--eval-windows", str(args.eval_windows),
                       "--calib-windows", str(args.calib_windows), "--seq", str(args.seq), "--reps", str(args.reps),
                       "--seed", str(args.seed), "--threads", str(args.threads), "--no-progress", "--out", out_dir]
                cmd += ["--precision", args.precision] + args.fca_args.split()
                t0 = time.perf_counter()
                p = run(cmd)
                fca_wall = time.perf_counter() - t0
                with open(os.path.join(out_dir, "audit.json")) as f:
                    audit = json.load(f)
                # The same number of threads on both sides, or the times compare nothing.
                if audit["provenance"]["threads"] != torch_threads:
                    fail(f"not a fair comparison: round {r + 1} of {family} ran fca's audit on "
                         f"{audit['provenance']['threads']} threads (audit.json provenance) and PyTorch's on "
                         f"{torch_threads} (torch.get_num_threads())", status=2)
                rounds.append({"pytorch_wall_s": torch_wall, "pytorch_timings": torch_times, "fca_wall_s": fca_wall,
                               "threads": {"pytorch": torch_threads, "fca": audit["provenance"]["threads"]},
                               "fca_measured": audit["provenance"].get("run", {}).get("measured", {}),
                               "fca_stderr_tail": p.stderr[-2000:]})
                cache, _ = fca_adapter.read_safetensors_file(audit["settings"]["cache"])
                results_of_round.append({"audit": audit, "fca": fca_figures(audit, out_dir),
                                         "A_fca": cache["eval.coefficients"].numpy().astype(np.float64),
                                         "pytorch": torch_figures(torch_out), "A_torch": A_torch,
                                         "torch_out": torch_out, "mask": model.mask})

            pt_wall = spread(r["pytorch_wall_s"] for r in rounds)
            pt_passes = spread(r["pytorch_timings"]["forward_passes"] for r in rounds)
            pt_stats = spread(r["pytorch_timings"]["statistics"] for r in rounds)
            fca_wall = spread(r["fca_wall_s"] for r in rounds)
            fca_passes = spread(r["fca_measured"].get("seconds", float("nan")) for r in rounds)
            speedup = spread(r["pytorch_wall_s"] / r["fca_wall_s"] for r in rounds)
            # The peer's fastest round over fca's median: PyTorch's time depends on where its tensors
            # land (module docstring), and this is the speed-up over the peer in its fast state.
            speedup_vs_fastest_peer = pt_wall["min"] / fca_wall["median"]
            print(f"{family}: median [min, max] over {args.repeats} round{'s' * (args.repeats > 1)}: "
                  f"PyTorch audit {format_spread(pt_wall, '.2f')} s wall (forward passes {format_spread(pt_passes, '.2f')} s, "
                  f"statistics {format_spread(pt_stats, '.2f')} s; {torch_passes} window passes), "
                  f"fca audit {format_spread(fca_wall, '.2f')} s wall (forward passes {format_spread(fca_passes, '.2f')} s)")
            print(f"  speed-up (PyTorch wall / fca wall, per round) {format_spread(speedup, '.2f')}; "
                  f"the fastest PyTorch round over fca's median {speedup_vs_fastest_peer:.2f}")
            print(f"  PyTorch peer vs the repository's example on {ids.shape[0]} windows: "
                  + ", ".join(f"{k} {v:.1e}" for k, v in peer.items()) + f" (tolerance {PEER_TOLERANCE:g})")

            # Each side's rounds, bit for bit: the same seed, windows, threads and code give the same
            # results (fca's batch may differ between rounds; its results do not depend on it).
            first = results_of_round[0]
            reproducible = True
            for r, res in enumerate(results_of_round[1:], start=2):
                for side, keys in (("fca", ("fca", "A_fca")), ("PyTorch", ("pytorch", "A_torch"))):
                    diffs = [d for k in keys for d in bit_differences(first[k], res[k], k)]
                    if diffs:
                        reproducible = False
                        print(f"  {family}: {side}'s round {r} differs from its round 1 at {len(diffs)} place"
                              f"{'s' * (len(diffs) > 1)}: {', '.join(diffs[:8])}{' ...' if len(diffs) > 8 else ''}")
            if args.repeats > 1 and reproducible:
                print(f"  each side's {args.repeats} rounds: the same results bit for bit")
            # Every round against the peer's: in full for the first, then what disagrees.
            comparisons, agree = [], reproducible
            for r, res in enumerate(results_of_round, start=1):
                if r > 1:
                    print(f"  round {r}:")
                round_agrees, comparison = compare(family, res["fca"], res["pytorch"], res["A_fca"], res["A_torch"],
                                                   res["mask"], res["audit"], res["torch_out"], args, verbose=r == 1)
                if r > 1 and round_agrees:
                    print("    every figure agrees")
                comparisons.append(comparison)
                agree = agree and round_agrees
            if args.precision == "bf16":
                # Both sides round to bf16, each in its own places (PyTorch's autocast rounds the
                # products' outputs too): the figures were compared above for information only.
                print(f"  {family}: bf16 figures compared for information only, not required to agree")
                agree = reproducible and all(x["audit"]["exact_replay"]["passed"] for x in results_of_round)
            ok = ok and agree
            results["families"][family] = {"pytorch_wall_s": pt_wall, "fca_wall_s": fca_wall, "speedup": speedup,
                                           "speedup_vs_fastest_peer_round": speedup_vs_fastest_peer,
                                           "pytorch_window_passes": torch_passes, "rounds": rounds,
                                           "peer_vs_example": peer, "rounds_reproducible": reproducible, "agree": agree,
                                           **comparisons[0], "comparison_per_round": comparisons}
    if args.json_out:
        write_json_atomically(args.json_out, results)
    if not ok:
        fail("fca and the PyTorch audit disagree (above)")


if __name__ == "__main__":
    main()
