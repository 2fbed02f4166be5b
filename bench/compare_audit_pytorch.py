"""fca's audit beside a hand-written PyTorch audit of the same checkpoint, windows and conditions.

  /usr/bin/python3 bench/compare_audit_pytorch.py --fca build/fca [--families gated,mudd]
      [--layers 4 --dim 128 --heads 4 --seq 128 --eval-windows 128 --calib-windows 128 --reps 5
       --threads 2 --torch-batch 16] [--gated-model FILE] [--mudd-model DIR] [--json-out FILE]

The peer is what a researcher would write (audit-protocol.md), with the repository's PyTorch
models (examples/gated_adapter.py, examples/mudd_adapter.py):
  1. live batched forward passes over the evaluation set D (test split) and the calibration set C
     (valid split), recording the coefficient tensors (gated: g [L, T]; MUDD: alpha [L, T, 4, L+1]);
  2. exact replay: the recorded coefficients fed back with the controller disabled, logits compared
     bit for bit with the live ones (kept from step 1), which is also the `correct` condition;
  3. every condition fca runs by default, each a batched replay: cross_input, token_shuffle and
     cross_shuffle (R randomisations, paired), layer_position_mean, static_profile,
     structure_removed, identity, and layer_permutation where every layer has the same valid
     coordinates (gated only);
  4. the statistics in numpy: DeltaNLL, 10,000-resample paired bootstrap CIs for every figure, MC
     SE, factor effects, retention, and the three-factor ANOVA of the evaluation coefficients.

Both are timed in one run on the same threads. The deterministic figures (baseline NLL, live and
calibration NLL, DeltaNLL of every non-randomised condition, retention estimates) must agree within
FIGURE_TOLERANCE, else exit 1. Randomised figures use each tool's own random draws, so only their
presence is compared. Without --gated-model / --mudd-model, small models are trained with fca
first (seconds), so that the gates and mixing weights are not those of a random initialisation.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench_io import write_json_atomically  # noqa: E402  (bench/ is the script's folder)
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import gated_adapter  # noqa: E402  (the repository's PyTorch gated family)
import mudd_adapter   # noqa: E402  (the repository's PyTorch MUDDPythia)

# Both sides compute NLLs from float32 logits of the same weights; float32 summation orders differ
# (BLAS blocking, fused kernels), which moves a window's NLL by about 1e-7 at this scale, and
# DeltaNLL is a difference of two such means. 1e-5 (the bound) leaves two orders of
# magnitude; a wrong profile or condition moves these figures by 1e-4 or more.
FIGURE_TOLERANCE = 1e-5


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
        if d == 0:
            continue
        dn, dd = abs(ours[n_key] - theirs[n_key]), abs(ours[d_key] - theirs[d_key])
        tol[k] = max(FIGURE_TOLERANCE, 2 * (dn + abs(n / d) * dd) / abs(d))
    return tol
BOOTSTRAP = 10000


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
    ap.add_argument("--fca-args", default="", help="extra arguments for fca audit (e.g. '--batch 16')")
    ap.add_argument("--json-out")
    return ap.parse_args()


def fail(msg):
    print(f"compare_audit_pytorch: {msg}", file=sys.stderr)
    sys.exit(1)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"`{' '.join(cmd)}` exited {p.returncode}:\n{p.stderr[-3000:]}")
    return p


# ------------------------------------------------------------------------------------------------
# Windows: the spec's layout, byte-level (token id = byte).

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

class Gated:
    name = "gated"

    def __init__(self, path):
        self.m = gated_adapter.GatedTransformer(path)
        self.calls = 0
        L = self.m.L
        self.mask = np.ones((L, 1, 1), dtype=bool)

    def forward(self, ids, coef):
        gates = None if coef is None else coef[:, :, :, 0, 0]
        count = (lambda: setattr(self, "calls", self.calls + 1)) if coef is None else self.refuse
        logits, g = self.m.forward(ids, gates, on_controller=count)
        return logits, g[..., None, None]

    def refuse(self):
        raise RuntimeError("the controller ran during a replay")

    def identity(self, S):
        return np.ones_like(S)

    def structure_removed(self, S):
        return np.full_like(S, np.float32(S[:, 0, 0, 0].astype(np.float64).mean()))


class Mudd:
    name = "mudd"

    def __init__(self, folder):
        self.m = mudd_adapter.MuddPythia.from_pretrained(folder)
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


# ------------------------------------------------------------------------------------------------
# The PyTorch audit.

def batched(model, ids, targets, coef_fn, batch, keep_logits=False):
    """NLL per window [W] (and coefficients, logits) over batches; coef_fn(w0, w1) gives the
    coefficients of windows w0..w1-1, or None for a live pass."""
    nll, coefs, logits = [], [], []
    for w0 in range(0, ids.shape[0], batch):
        w1 = min(w0 + batch, ids.shape[0])
        c = coef_fn(w0, w1)
        lg, used = model.forward(ids[w0:w1], None if c is None else torch.from_numpy(c))
        nll.append(window_nll(lg, targets[w0:w1]))
        if c is None:
            coefs.append(used.numpy().copy())
        if keep_logits:
            logits.append(lg)
    return (torch.cat(nll).numpy(), np.concatenate(coefs) if coefs else None,
            torch.cat(logits) if keep_logits else None)


def derangement(rng, n):
    while True:
        p = rng.permutation(n)
        if not (p == np.arange(n)).any():
            return p


def bootstrap_ci(values, rng, resamples=BOOTSTRAP):
    idx = rng.integers(0, len(values), size=(resamples, len(values)))
    return np.percentile(values[idx].mean(axis=1), [2.5, 97.5]).tolist()


def anova_shares(A, mask):
    """Three-factor ANOVA (coordinate, input, token) of A [W, L, T, S, K] over valid coordinates."""
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
    return {k: v / total for k, v in ss.items()} if total > 0 else {}


def pytorch_audit(model, data, args):
    timings = {}
    t0 = time.perf_counter()
    T, batch, R = args.seq, args.torch_batch, args.reps
    eval_ids, eval_tg = windows(os.path.join(data, "test.txt"), T, args.eval_windows)
    cal_ids, cal_tg = windows(os.path.join(data, "valid.txt"), T, args.calib_windows)
    W = eval_ids.shape[0]
    timings["io"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    with torch.no_grad():
        live_nll, A, live_logits = batched(model, eval_ids, eval_tg, lambda a, b: None, batch, keep_logits=True)
        cal_nll, Ac, _ = batched(model, cal_ids, cal_tg, lambda a, b: None, batch)
        # Exact replay = correct.
        correct, _, replay_logits = batched(model, eval_ids, eval_tg, lambda a, b: A[a:b], batch, keep_logits=True)
        if not torch.equal(live_logits, replay_logits) or not np.array_equal(live_nll, correct):
            fail(f"{model.name}: the PyTorch replay of the recorded coefficients is not exact")
        L, T_, Sn, K = A.shape[1:]
        S = np.broadcast_to(Ac.astype(np.float64).mean(axis=(0, 2))[:, None], (L, T_, Sn, K)).astype(np.float32)
        lpm = Ac.astype(np.float64).mean(axis=0).astype(np.float32)             # [L, T, S, K]
        profiles = {"layer_position_mean": lpm, "static_profile": S,
                    "structure_removed": model.structure_removed(S), "identity": model.identity(S)}
        rng = np.random.default_rng(args.seed)
        derangements = [derangement(rng, W) for _ in range(R)]
        # sigma[r, i, l, s]: a token permutation per randomisation, window, layer and stream.
        sigma = np.argsort(rng.random((R, W, L, Sn, T)), axis=-1)

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
            nll.setdefault("cross_input", []).append(batched(model, eval_ids, eval_tg, lambda a, b: A[d[a:b]], batch)[0])
            nll.setdefault("token_shuffle", []).append(
                batched(model, eval_ids, eval_tg, lambda a, b: shuffled(A[a:b], r, a, b), batch)[0])
            nll.setdefault("cross_shuffle", []).append(
                batched(model, eval_ids, eval_tg, lambda a, b: shuffled(A[d[a:b]], r, a, b), batch)[0])
        for name, prof in profiles.items():
            nll[name] = [batched(model, eval_ids, eval_tg, lambda a, b: np.broadcast_to(prof, (b - a,) + prof.shape).copy(),
                                 batch)[0]]
        permutable = all((model.mask[l] == model.mask[0]).all() for l in range(L))
        if permutable:
            for r in range(R):
                perm = rng.permutation(L)
                prof = S[perm]
                nll.setdefault("layer_permutation", []).append(
                    batched(model, eval_ids, eval_tg, lambda a, b: np.broadcast_to(prof, (b - a,) + prof.shape).copy(),
                            batch)[0])
    timings["forward_passes"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    stats_rng = np.random.default_rng(args.seed + 1)
    out = {"baseline_nll": float(correct.mean()), "live_nll": float(live_nll.mean()), "calib_nll": float(cal_nll.mean()),
           "conditions": {}}
    for name, reps in nll.items():
        per_rep = np.stack(reps) - correct[None]
        delta = per_rep.mean(axis=0)
        out["conditions"][name] = {"delta_nll": float(delta.mean()), "ci95": bootstrap_ci(delta, stats_rng),
                                   "mc_se": float(per_rep.mean(axis=1).std(ddof=1) / math.sqrt(R)) if len(reps) > 1 else None}
    cc = correct[None]
    dc, cs, ds = (np.stack(nll[n]) for n in ("cross_input", "token_shuffle", "cross_shuffle"))
    effects = {"input": (((dc - cc) + (ds - cs)) / 2).mean(0), "token": (((cs - cc) + (ds - dc)) / 2).mean(0),
               "interaction": (ds - dc - cs + cc).mean(0)}
    out["factor_effects"] = {k: {"estimate": float(v.mean()), "ci95": bootstrap_ci(v, stats_rng)} for k, v in effects.items()}
    den = np.stack(nll["structure_removed"]).mean(0) - correct
    out["retention"] = {}
    for s in ("static_profile", "layer_position_mean"):
        num = np.stack(nll[s]).mean(0) - correct
        idx = stats_rng.integers(0, W, size=(BOOTSTRAP, W))
        ratio = 1 - num[idx].mean(1) / den[idx].mean(1)
        out["retention"][s] = {"estimate": float(1 - num.mean() / den.mean()),
                               "ci95": np.percentile(ratio, [2.5, 97.5]).tolist()}
    out["variance_shares"] = anova_shares(A, model.mask)
    timings["statistics"] = time.perf_counter() - t0
    passes = 2 * W + cal_ids.shape[0] + sum(len(v) for v in nll.values()) * W
    return out, timings, passes


# ------------------------------------------------------------------------------------------------

def deterministic_figures(audit_json):
    """fca's audit.json figures that involve no random draw."""
    a = audit_json
    f = {"baseline_nll": a["baseline"]["nll"], "live_nll": a["baseline"]["live_nll"], "calib_nll": a["baseline"]["calib_nll"]}
    for c in a["conditions"]:
        if not c["randomized"] and c["name"] != "correct":
            f[f"delta_nll[{c['name']}]"] = c["delta_nll"]
    for s, r in a["retention"].items():
        f[f"retention[{s}]"] = r["estimate"]
    return f


def torch_figures(t):
    f = {"baseline_nll": t["baseline_nll"], "live_nll": t["live_nll"], "calib_nll": t["calib_nll"]}
    for name, c in t["conditions"].items():
        if c["mc_se"] is None:
            f[f"delta_nll[{name}]"] = c["delta_nll"]
    for s, r in t["retention"].items():
        f[f"retention[{s}]"] = r["estimate"]
    return f


def train_model(args, family, workdir):
    out = os.path.join(workdir, "featuregate.safetensors" if family == "gated" else "mudd")
    cmd = [args.fca, "train", "--layers", str(args.layers), "--dim", str(args.dim), "--heads", str(args.heads),
           "--seq", str(args.seq), "--steps", str(args.train_steps), "--warmup", "20", "--eval-every", "0",
           "--no-progress", "--threads", str(args.threads), "--data", args.data, "--out", out]
    cmd += ["--gate", "featuregate"] if family == "gated" else ["--arch", "mudd"]
    run(cmd)
    return out


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    if not (os.path.isfile(args.fca) and os.access(args.fca, os.X_OK)):
        fail(f"no executable fca binary at {args.fca!r}")
    results = {"settings": vars(args), "families": {}}
    print(f"compare_audit_pytorch: L{args.layers} D{args.dim} H{args.heads} T{args.seq}, "
          f"{args.eval_windows} + {args.calib_windows} windows, {args.reps} reps, {args.threads} threads, "
          f"torch {torch.__version__} (batch {args.torch_batch}), OPENBLAS_CORETYPE "
          f"{os.environ.get('OPENBLAS_CORETYPE', 'not set')}")
    ok = True
    with tempfile.TemporaryDirectory(prefix="fca-audit-compare-") as workdir:
        for family in [f for f in args.families.split(",") if f]:
            path = args.gated_model if family == "gated" else args.mudd_model
            if path is None:
                path = train_model(args, family, workdir)
            out_dir = os.path.join(workdir, f"{family}-audit")
            cmd = [args.fca, "audit", "--model", path, "--data", args.data, "--eval-windows", str(args.eval_windows),
                   "--calib-windows", str(args.calib_windows), "--seq", str(args.seq), "--reps", str(args.reps),
                   "--seed", str(args.seed), "--threads", str(args.threads), "--no-progress", "--out", out_dir]
            cmd += args.fca_args.split()
            t0 = time.perf_counter()
            p = run(cmd)
            fca_wall = time.perf_counter() - t0
            audit = json.load(open(os.path.join(out_dir, "audit.json")))
            measured = audit["provenance"].get("run", {}).get("measured", {})

            model = Gated(path) if family == "gated" else Mudd(path)
            t0 = time.perf_counter()
            torch_out, torch_times, torch_passes = pytorch_audit(model, args.data, args)
            torch_wall = time.perf_counter() - t0

            ours, theirs = deterministic_figures(audit), torch_figures(torch_out)
            diffs = {k: abs(ours[k] - theirs[k]) for k in ours if k in theirs}
            missing = sorted(set(ours) ^ set(theirs))
            worst = max(diffs.values()) if diffs else float("nan")
            tolerance = figure_tolerances(ours, theirs)
            agree = not missing and all(diffs[k] <= tolerance[k] for k in diffs)
            ok = ok and agree
            fca_conditions = {c["name"] for c in audit["conditions"]}
            torch_conditions = set(torch_out["conditions"]) | {"correct"}
            if fca_conditions != torch_conditions:
                ok = False
                print(f"  {family}: conditions differ: fca {sorted(fca_conditions)}, PyTorch {sorted(torch_conditions)}")
            print(f"{family}: fca audit {fca_wall:.2f} s wall (forward passes {measured.get('seconds', float('nan')):.2f} s), "
                  f"PyTorch audit {torch_wall:.2f} s (forward passes {torch_times['forward_passes']:.2f} s, "
                  f"statistics {torch_times['statistics']:.2f} s, I/O {torch_times['io']:.2f} s, {torch_passes} window passes)")
            print(f"  speed-up {torch_wall / fca_wall:.2f}x wall; deterministic figures: {len(diffs)} compared, "
                  f"max |fca - PyTorch| = {worst:.2e} (tolerance {FIGURE_TOLERANCE:g}; retention's scaled by its "
                  f"conditioning, below)" +
                  (f"; missing on one side: {missing}" if missing else ""))
            for k in sorted(diffs):
                print(f"    {k:36s} fca {ours[k]:+.8f}  PyTorch {theirs[k]:+.8f}" +
                      (f"  (tolerance {tolerance[k]:.2g}, from its inputs' differences)" if tolerance[k] != FIGURE_TOLERANCE else "") +
                      ("" if diffs[k] <= tolerance[k] else "  DISAGREES"))
            results["families"][family] = {"fca_wall_s": fca_wall, "fca_measured": measured, "torch_wall_s": torch_wall,
                                           "torch_timings": torch_times, "torch_window_passes": torch_passes,
                                           "speedup": torch_wall / fca_wall, "figures_fca": ours, "figures_torch": theirs,
                                           "max_abs_diff": worst, "tolerances": tolerance, "agree": agree, "fca_stderr_tail": p.stderr[-2000:]}
    if args.json_out:
        write_json_atomically(args.json_out, results)
    if not ok:
        fail("fca and the PyTorch audit disagree (above)")


if __name__ == "__main__":
    main()
