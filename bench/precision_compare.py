"""The bf16 precision's effect on an audit's figures and speed, against fp32, on the same checkpoints.

  python3 bench/precision_compare.py --fca build/fca --data data/nlp-corpus --out /tmp/prec \
      --model featuregate=fg.safetensors --model mudd=mudd_dir --model moe=moe.safetensors \
      [--eval-windows 128 --calib-windows 128 --reps 5 --seq 128 --rounds 3 --threads 2]

For each model, --rounds alternating rounds of `fca audit --precision fp32` then `--precision bf16`
(a fresh output folder and cache each time, so every round runs the live recording pass too), the
same seed, windows and batch (--batch, default 8: bf16 results depend on the batch, so the batch is
fixed for both). Prints and writes (<out>/precision.md, <out>/precision.json):
  - per condition: DeltaNLL in fp32 and bf16 (first round of each; rounds are bitwise equal within a
    precision, which is checked), their difference, and the difference over the condition's Monte
    Carlo SE (randomised conditions) or over its bootstrap SE (95% interval width / 3.92, the
    deterministic conditions);
  - exact replay (passed, differing logits) in each precision;
  - the audit's measured passes (tokens/s from audit.json's provenance.run.measured) as the median
    over rounds per precision, and the median of the per-round ratios bf16 / fp32.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys


def run_audit(fca, model, data, out, precision, a):
    if os.path.exists(out):
        shutil.rmtree(out)
    cmd = [fca, "audit", "--model", model, "--data", data, "--out", out, "--precision", precision,
           "--eval-windows", str(a.eval_windows), "--calib-windows", str(a.calib_windows), "--reps", str(a.reps),
           "--seq", str(a.seq), "--batch", str(a.batch), "--seed", str(a.seed), "--threads", str(a.threads),
           "--no-progress"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "audit.json")) as f:
        return json.load(f)


def figures(j):
    """Everything that must be bitwise equal between two rounds of the same precision."""
    return json.dumps({"conditions": j["conditions"], "baseline": j["baseline"], "exact_replay": j["exact_replay"]},
                      sort_keys=True)


def se_of(c):
    if c.get("mc_se") is not None and c["mc_se"] > 0:
        return c["mc_se"], "MC"
    ci = c.get("ci95")
    if ci and ci[0] is not None and ci[1] is not None and ci[1] > ci[0]:
        return (ci[1] - ci[0]) / 3.92, "bootstrap"
    return None, ""


def compare(name, model, a):
    rounds = {"fp32": [], "bf16": []}
    for r in range(a.rounds):
        for precision in ("fp32", "bf16"):
            out = os.path.join(a.out, f"{name}-{precision}-{r}")
            rounds[precision].append(run_audit(a.fca, model, a.data, out, precision, a))
            print(f"{name} round {r + 1} {precision}: "
                  f"{rounds[precision][-1]['provenance']['run']['measured']['tokens_per_s']:.0f} tokens/s", flush=True)
    for precision, js in rounds.items():
        if any(figures(j) != figures(js[0]) for j in js[1:]):
            sys.exit(f"{name} {precision}: rounds disagree (not deterministic)")
    f32, b16 = rounds["fp32"][0], rounds["bf16"][0]
    rows = []
    for c in f32["conditions"]:
        other = next(x for x in b16["conditions"] if x["name"] == c["name"])
        se, kind = se_of(c)
        diff = other["delta_nll"] - c["delta_nll"]
        rows.append({"condition": c["name"], "fp32": c["delta_nll"], "bf16": other["delta_nll"], "difference": diff,
                     "se": se, "se_kind": kind, "difference_over_se": diff / se if se else None})
    speed = {p: [j["provenance"]["run"]["measured"]["tokens_per_s"] for j in js] for p, js in rounds.items()}
    ratios = [b / f for b, f in zip(speed["bf16"], speed["fp32"])]
    return {"model": name, "path": model, "description": f32["model"].get("description", ""),
            "baseline_nll": {"fp32": f32["baseline"]["nll"], "bf16": b16["baseline"]["nll"]},
            "exact_replay": {p: {"passed": js[0]["exact_replay"]["passed"],
                                 "differing_logits": js[0]["exact_replay"]["differing_logits"]} for p, js in rounds.items()},
            "conditions": rows,
            "tokens_per_s": {p: statistics.median(v) for p, v in speed.items()},
            "speedup_median": statistics.median(ratios), "speedup_rounds": ratios,
            "provenance": {p: js[0]["provenance"] for p, js in rounds.items()}}


def markdown(results, a):
    lines = [f"Settings: {a.eval_windows} evaluation and {a.calib_windows} calibration windows of {a.seq} tokens, "
             f"{a.reps} randomisations, batch {a.batch}, seed {a.seed}, {a.threads} threads, {a.rounds} alternating rounds.", ""]
    for r in results:
        lines += [f"### {r['model']}: {r['description']}", "",
                  f"Baseline NLL fp32 {r['baseline_nll']['fp32']:.6f}, bf16 {r['baseline_nll']['bf16']:.6f}. "
                  f"Exact replay: fp32 {'passed' if r['exact_replay']['fp32']['passed'] else 'FAILED'} "
                  f"({r['exact_replay']['fp32']['differing_logits']} differing logits), bf16 "
                  f"{'passed' if r['exact_replay']['bf16']['passed'] else 'FAILED'} "
                  f"({r['exact_replay']['bf16']['differing_logits']} differing logits). "
                  f"Audit passes: fp32 {r['tokens_per_s']['fp32']:.0f} tokens/s, bf16 {r['tokens_per_s']['bf16']:.0f} "
                  f"tokens/s (medians); bf16 / fp32 {r['speedup_median']:.2f}x (median of per-round ratios "
                  f"{', '.join(f'{x:.2f}' for x in r['speedup_rounds'])}).", "",
                  "| condition | ΔNLL fp32 | ΔNLL bf16 | bf16 − fp32 | SE (kind) | difference / SE |",
                  "|---|---:|---:|---:|---:|---:|"]
        for c in r["conditions"]:
            se = f"{c['se']:.2e} ({c['se_kind']})" if c["se"] else "—"
            ratio = f"{c['difference_over_se']:+.2f}" if c["difference_over_se"] is not None else "—"
            lines.append(f"| {c['condition']} | {c['fp32']:+.5f} | {c['bf16']:+.5f} | {c['difference']:+.2e} | {se} | {ratio} |")
        lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fca", default="build/fca")
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", action="append", required=True, help="NAME=PATH (repeat)")
    ap.add_argument("--eval-windows", type=int, default=128)
    ap.add_argument("--calib-windows", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    results = [compare(*m.split("=", 1), a) for m in a.model]
    text = markdown(results, a)
    print(text)
    with open(os.path.join(a.out, "precision.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(a.out, "precision.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
