"""Compares the outputs of scripts/compare_builds.sh under WORK/old and WORK/new: safetensors by
tensor (name and bytes) plus trace metadata, JSON documents without provenance, paths and timing.
Prints one line per file and exits 1 on any difference.
  compare_builds.py --runs WORK: the runs, one line each (name, checkpoint path, `fca train` flags),
  from WORK/families.json (the new build's `fca families --json`): every configuration of every
  family."""
import hashlib
import json
import os
import struct
import sys



def runs(work):
    """(name, checkpoint path, weights, state, log, train flags) of every configuration of every
    family, paths relative to the build's folder."""
    out = []
    for family in json.load(open(f"{work}/families.json"))["families"]:
        files = family["checkpoint"]
        for c in family["configurations"]:
            stem = c["name"]
            out.append((stem, *[files[k].replace("STEM", stem) for k in ("out", "weights", "state", "log")],
                        c["train_flags"]))
    return out


if sys.argv[1] == "--runs":
    for name, out, _, _, _, flags in runs(sys.argv[2]):
        print(name, out, " ".join(flags))
    sys.exit(0)
work = sys.argv[1]
ok = True


def tensors(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    return {k: hashlib.sha256(data[v["data_offsets"][0]:v["data_offsets"][1]]).hexdigest() for k, v in header.items()}, meta


def strip(j):
    if isinstance(j, dict):
        return {k: strip(v) for k, v in j.items() if k not in ("provenance", "cache", "cache_build", "path", "model")}
    if isinstance(j, list):
        return [strip(x) for x in j]
    return j


def report(name, same):
    global ok
    ok &= same
    print(f"{name:40s} {'same' if same else 'DIFFER'}")


for name, _, weights, state, log, _ in runs(work):
    for f in [weights, state]:
        report(f, tensors(f"{work}/old/{f}")[0] == tensors(f"{work}/new/{f}")[0])
    for kind in ["trace", "replay", "ids"]:
        f = f"{kind}_{name}.safetensors"
        (a, ma), (b, mb) = tensors(f"{work}/old/{f}"), tensors(f"{work}/new/{f}")
        report(f, a == b and strip(ma) == strip(mb))
    report(f"audit_{name}/windows.csv", open(f"{work}/old/audit_{name}/windows.csv", "rb").read() ==
           open(f"{work}/new/audit_{name}/windows.csv", "rb").read())
    report(f"audit_{name}/audit.json", strip(json.load(open(f"{work}/old/audit_{name}/audit.json"))) ==
           strip(json.load(open(f"{work}/new/audit_{name}/audit.json"))))

    def records(p):
        return [strip({k: v for k, v in json.loads(line).items() if k not in ("tokens_per_s", "elapsed_s", "seconds")})
                for line in open(p)]
    report(log, records(f"{work}/old/{log}") == records(f"{work}/new/{log}"))
    keys = ["nll", "bits_per_byte", "byte_ppl", "gate_mass", "windows", "family", "label", "config", "unit"]
    ea, eb = json.load(open(f"{work}/old/eval_{name}.json")), json.load(open(f"{work}/new/eval_{name}.json"))
    report(f"eval_{name}.json", all(ea.get(k) == eb.get(k) for k in keys))

    def info(v):
        text = open(f"{work}/{v}/info_{name}.txt").read().replace(f"{v}/", "X/")
        return [line for line in text.splitlines() if not line.startswith(("fca_version", "sha256"))]
    report(f"info_{name}.txt", info("old") == info("new"))


def exec_figures(p):
    keep = ("mode", "nll", "executed_blocks", "controller_evaluations_per_pass", "routed_rows_per_pass", "gemm_calls_per_pass",
            "gflop_per_pass", "gflop_per_token", "gflop_per_pass_by_kind", "counters_match_graph", "expert_rows", "threshold",
            "removed_blocks", "total_blocks", "mean_depth", "exit_histogram", "fixed_depth",
            "eval_gflop_per_token", "nll_minus_fixed_depth_at_equal_flops")
    # Every counter of a pass, the families' own counters (exec/exec_family.h: "<name>_per_pass") included.
    counted = lambda k: k in keep or k.endswith("_per_pass")
    out = []
    for m in json.load(open(p))["models"]:
        # The model's label is a name, not a figure (exec.json's "gate" before issue 44, "label" after).
        entry = {k: m[k] for k in m if k in ("family", "config", "tokens_per_pass", "calibrated_static_gates",
                                              "skip_sweep_note", "selected_tokens_per_window", "expert_gflop_per_token")}
        entry["modes"] = [{k: x[k] for k in x if counted(k)} for x in m["modes"]]
        entry["skip_sweep"] = [{k: x[k] for k in x if counted(k)} for x in m.get("skip_sweep", [])]
        out.append(entry)
    return out


report("exec/exec.json (counted figures, NLL)", exec_figures(f"{work}/old/exec/exec.json") == exec_figures(f"{work}/new/exec/exec.json"))
print("ALL SAME" if ok else "DIFFERENCES")
sys.exit(0 if ok else 1)
