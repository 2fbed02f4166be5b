"""Runs one `fca exec` command several times and says whether its latency ratios agree across runs.

    /usr/bin/python3 bench/exec_repeat.py --runs 5 -- build/fca exec --external "..." --data DIR --out runs/repeat

Each run writes to OUT/run-K (the command's `--out` with a suffix). For every mode of every model
it prints each run's ratio to the reference (`latency_ratio_to_reference`, an external model's) or to
Dense (`latency_ratio_to_dense`) with its 95% interval, and whether the intervals share a point (the
largest lower end at most the smallest upper end). Exit status 1 when some ratio's intervals do not
overlap. A measurement, not a test: timing belongs in benchmarks (docs/building.md).
"""
import argparse
import json
import os
import subprocess
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the fca exec command, with --out")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if "--out" not in command or args.runs < 2:
        parser.error("give --runs >= 2 and an fca exec command with --out after --")
    out = command[command.index("--out") + 1]
    ratios = {}                                  # (model, mode, key) -> [(estimate, low, high)]
    for run in range(args.runs):
        folder = f"{out}/run-{run}"
        argv = list(command)
        argv[argv.index("--out") + 1] = folder
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(folder, "exec.json")) as f:
            exec_json = json.load(f)
        for model in exec_json["models"]:
            for mode in model["modes"]:
                for key in ("latency_ratio_to_reference", "latency_ratio_to_dense"):
                    r = mode.get(key)
                    if r and r.get("estimate") is not None and mode["mode"] != "reference":
                        ratios.setdefault(((model.get("label") or model.get("gate")), mode["mode"], key), []).append(
                            (r["estimate"], r["ci95"][0], r["ci95"][1]))
    disjoint = 0
    for (model, mode, key), runs in ratios.items():
        low, high = max(r[1] for r in runs), min(r[2] for r in runs)
        overlap = low <= high
        disjoint += not overlap
        print(f"{model} {mode} {key}: " + ", ".join(f"x{e:.3f} [{lo:.3f}, {hi:.3f}]" for e, lo, hi in runs) +
              (f"; all share [{low:.3f}, {high:.3f}]" if overlap else "; the intervals share no point"))
    return 1 if disjoint else 0


if __name__ == "__main__":
    sys.exit(main())
