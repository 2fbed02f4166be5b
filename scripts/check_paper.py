#!/usr/bin/env python3
"""Checks the page `fca paper` wrote for a paper config (make paper-quick / paper-cpu), independently
of the C++ that wrote it:

1. paper.md, paper.html and paper.json exist;
2. every entry of the values file is printed beside its figure: the paper's readings are rendered
   here from the values file (not taken from paper.json) and must appear in that figure's row of
   paper.md, and every entry must belong to a figure or a claim of the page;
3. every claim's verdict is recomputed from the measured cells of paper.json with the criteria of
   docs/paper.md ("The claims and how each is decided"); a verdict that differs fails, and so does
   "not comparable" where the figures the criterion needs exist.

Usage: check_paper.py CONFIG [--paper-json FILE] [--values FILE] (the last two override the config's,
for tests). Exits non-zero naming what is wrong."""
import json
import math
import os
import sys


def fail(msg):
    print("check_paper: " + msg, file=sys.stderr)
    sys.exit(1)


def readings_text(readings):
    """The page's text of an entry's readings (docs/paper.md, 'The paper's values')."""
    parts = []
    for r in readings:
        if "not_reported" in r:
            parts.append("not reported by the paper (%s)" % r["not_reported"])
            continue
        t = ("%.6g" % r["number"]) if "number" in r else r["text"]
        t += " [" + r["setting"]
        if "derived" in r:
            t += "; derived: " + r["derived"]
        if "note" in r:
            t += "; " + r["note"]
        parts.append(t + "]")
    return "; ".join(parts)


def made_by_paper(readings):
    return any("not_reported" not in r for r in readings)


class Cells:
    """The measured cells of paper.json by id (<row>.<paper_key>)."""

    def __init__(self, paper, key):
        self.key = key
        self.cells = {}
        for s in paper["sections"]:
            for row in s["rows"]:
                for c in row["cells"]:
                    self.cells[c["id"]] = c

    def cell(self, row):
        return self.cells["%s.%s" % (row, self.key)]

    def value(self, row):
        return self.cell(row)["value"]

    def data(self, row):
        return self.cell(row)["data"]


class Undefined(Exception):
    pass


def need(x):
    if x is None:
        raise Undefined()
    return x


def per_checkpoint(cells, row):
    v = need(cells.data(row).get("per_checkpoint"))
    if any(x is None for x in v):
        raise Undefined()
    return v


def wins_all(cells, a, b):
    pa = per_checkpoint(cells, "table1.byte_ppl." + a)
    pb = per_checkpoint(cells, "table1.byte_ppl." + b)
    return all(x < y for x, y in zip(pa, pb))


def ci(cells, row):
    need(cells.value(row))
    return need(cells.data(row).get("ci95"))


# The criteria of docs/paper.md, one function per claim: True / False, or Undefined.
CRITERIA = {
    "claim.coefficients_vary": lambda c: min(100 - v for v in per_checkpoint(c, "figure3.layer")) > 1.0,
    "claim.every_intervention_positive": lambda c: all(
        v > 0 for cond in ("cross_input", "token_shuffle", "cross_shuffle", "layer_position_mean", "static_profile", "structure_removed")
        for v in per_checkpoint(c, "figure2." + cond)),
    "claim.static_penalty_small": lambda c: ci(c, "figure2.static_profile")[1] < 0.002,
    "claim.retention_high": lambda c: ci(c, "figure4.retention.static_profile")[0] > 95.0,
    "claim.layerstatic_beats_uniform": lambda c: wins_all(c, "layerstatic", "uniform"),
    "claim.featuregate_not_consistently_better_than_layerstatic": lambda c: not wins_all(c, "featuregate", "layerstatic"),
    "claim.featuregate_not_better_than_uniform_matched": lambda c: not wins_all(c, "featuregate", "uniform-matched"),
    "claim.no_compute_saved": lambda c: no_compute_saved(c),
    "claim.mudd_executes_every_block": lambda c: need(c.data("execution.mudd_blocks").get("executed_blocks")) ==
    c.data("execution.mudd_blocks")["total_blocks"],
    "claim.mudd_penalties_larger": lambda c: all(
        need(c.value("figure5.orders." + cond)) >= 1.0 for cond in ("cross_input", "token_shuffle", "layer_position_mean", "static_profile")),
    "claim.negative_interaction": lambda c: ci(c, "factors.interaction")[1] < 0 and ci(c, "mudd.factors.interaction")[1] < 0,
}


def no_compute_saved(c):
    fg, dense = c.data("execution.ms_per_batch.featuregate"), c.data("execution.ms_per_batch.dense")
    r = c.data("execution.featuregate_slower_pct")
    need(c.value("execution.featuregate_slower_pct"))
    every_block = fg["executed_blocks"] == fg["total_blocks"]
    flops_not_lower = fg["gflop_per_token"] >= dense["gflop_per_token"]
    not_faster = not (r["ratio_ci95"][1] < 1 - r["margin"])
    return every_block and flops_not_lower and not_faster


def expected_verdict(claim_id, cells, readings):
    try:
        holds = CRITERIA[claim_id](cells)
    except Undefined:
        return "not comparable"
    if not made_by_paper(readings):
        return "extension"
    return "reproduces" if holds else "does not reproduce"


def main():
    args = sys.argv[1:]
    if not args:
        fail("usage: check_paper.py CONFIG [--out DIR] [--paper-json FILE] [--values FILE]")
    config = json.load(open(args[0]))
    out = args[args.index("--out") + 1] if "--out" in args else config["out"]
    paper_path, values_path = os.path.join(out, "paper.json"), config["paper_values"]
    if "--paper-json" in args:
        paper_path = args[args.index("--paper-json") + 1]
    if "--values" in args:
        values_path = args[args.index("--values") + 1]
    for name in ("paper.md", "paper.html"):
        if not os.path.isfile(os.path.join(out, name)):
            fail("%s/%s is missing" % (out, name))
    if not os.path.isfile(paper_path):
        fail("%s is missing" % paper_path)
    paper = json.load(open(paper_path))
    values = json.load(open(values_path))["values"]
    md = open(os.path.join(out, "paper.md")).read()
    md_lines = md.split("\n")

    printed = set()
    rows = 0
    for section in paper["sections"]:
        for row in section["rows"]:
            line = "| " + row["label"] + " |"
            for cell in row["cells"]:
                if cell["id"] not in values:
                    fail("figure %s has no entry in %s" % (cell["id"], values_path))
                printed.add(cell["id"])
                line += " %s | *%s* |" % (cell["measured"], readings_text(values[cell["id"]]))
            if line not in md_lines:
                fail("paper.md lacks the row of %s with the paper's values (from %s) beside fca's: %s" % (row["id"], values_path, line))
            rows += 1
    counts = {}
    for claim in paper["claims"]:
        cid = claim["id"]
        if cid not in values:
            fail("claim %s has no entry in %s" % (cid, values_path))
        printed.add(cid)
        base, key = cid.rsplit(".", 1)
        if base not in CRITERIA:
            fail("claim %s has no criterion in this check (docs/paper.md lists every claim)" % cid)
        want = expected_verdict(base, Cells(paper, key), values[cid])
        if claim["verdict"] != want:
            fail("claim %s: paper.json says '%s', its figures and docs/paper.md's criterion give '%s'" % (cid, claim["verdict"], want))
        text = readings_text(values[cid])
        row_start = "| %s | %s | *%s* | %s | **%s** |" % (claim["claim"], claim["source"], text, claim["corpus"], claim["verdict"])
        if not any(l.startswith(row_start) for l in md_lines):
            fail("paper.md lacks the claim row of %s with the paper's setting and number beside it: %s" % (cid, row_start))
        counts[want] = counts.get(want, 0) + 1
    missing = set(values) - printed
    if missing:
        fail("entries of the values file not printed beside a figure: " + ", ".join(sorted(missing)))
    print("check_paper: %s: %d figure rows x %d corpora, each beside the paper's readings; %d claims, every verdict recomputed: %s" %
          (os.path.join(out, "paper.md"), rows, len(paper["corpora"]), len(paper["claims"]),
           ", ".join("%d %s" % (n, v) for v, n in sorted(counts.items()))))


main()
