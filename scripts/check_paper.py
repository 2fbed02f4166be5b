#!/usr/bin/env python3
"""Checks the page `fca paper` wrote for a paper config (make paper-quick in CI): paper.md and
paper.html exist, every figure of paper.json appears in paper.md with the paper's value (or "not
available") beside it, every entry of the values file is printed, and every claim has a verdict.
Exits non-zero naming what is missing."""
import json
import os
import sys


def fail(msg):
    print("check_paper: " + msg, file=sys.stderr)
    sys.exit(1)


def paper_cell(v):
    if v is None:
        return "not available"
    if isinstance(v, (int, float)):
        return "%.4g" % v
    return v


def main():
    if len(sys.argv) != 2:
        fail("usage: check_paper.py CONFIG")
    config = json.load(open(sys.argv[1]))
    out = config["out"]
    for name in ("paper.md", "paper.html", "paper.json"):
        if not os.path.isfile(os.path.join(out, name)):
            fail("%s/%s is missing" % (out, name))
    paper = json.load(open(os.path.join(out, "paper.json")))
    values = json.load(open(config["paper_values"]))["values"]
    md = open(os.path.join(out, "paper.md")).read()
    printed = set()
    rows = 0
    for section in paper["sections"]:
        for row in section["rows"]:
            line = "| " + row["label"] + " |"
            for cell in row["cells"]:
                if cell["id"] not in values:
                    fail("figure %s has no entry in %s" % (cell["id"], config["paper_values"]))
                printed.add(cell["id"])
                line += " %s | *%s* |" % (cell["measured"], paper_cell(cell["paper"]))
            if line not in md:
                fail("paper.md lacks the row of %s with the paper's values beside it: %s" % (row["id"], line))
            rows += 1
    for claim in paper["claims"]:
        if claim["verdict"] not in ("reproduces", "does not reproduce", "not comparable"):
            fail("claim %s has no verdict" % claim["id"])
        printed.add(claim["id"])
    missing = set(values) - printed
    if missing:
        fail("entries of the values file not printed: " + ", ".join(sorted(missing)))
    counts = {}
    for claim in paper["claims"]:
        counts[claim["verdict"]] = counts.get(claim["verdict"], 0) + 1
    print("check_paper: %s: %d figure rows x %d corpora, each beside the paper's value; claims: %s" %
          (os.path.join(out, "paper.md"), rows, len(paper["corpora"]),
           ", ".join("%d %s" % (n, v) for v, n in sorted(counts.items()))))


main()
