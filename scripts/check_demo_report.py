#!/usr/bin/env python3
"""Checks the report a study wrote, as CI runs it after `make demo-quick` on a clean clone.

  scripts/check_demo_report.py CONFIG.json

The report (report.html, report.md in the config's "out" folder) must exist and hold one verdict
card per variant of the config, with distinct titles; variants whose gate has no variation at all
(uniform, dense, fixed) must say why their retention is undefined. Exits 1 naming what is wrong.
"""
import json
import os
import re
import sys


def fail(message):
    print(f"check_demo_report: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) != 2:
        fail("usage: check_demo_report.py CONFIG.json")
    config = json.load(open(sys.argv[1]))
    out = config["out"]
    html_path, md_path = os.path.join(out, "report.html"), os.path.join(out, "report.md")
    for path in (html_path, md_path):
        if not os.path.isfile(path) or os.path.getsize(path) == 0:
            fail(f"{path} is missing or empty: the study did not end with its report")
    html, md = open(html_path, encoding="utf-8").read(), open(md_path, encoding="utf-8").read()
    titles = re.findall(r'<div class="card"><h3>([^<]*)</h3>', html)
    variants = config["variants"]
    if len(titles) != len(variants):
        fail(f"{html_path}: {len(titles)} verdict cards for {len(variants)} variants: {titles}")
    if len(set(titles)) != len(titles):
        fail(f"{html_path}: two cards share a title: {titles}")
    sections = re.split(r"^## ", md, flags=re.M)[1:]
    # A gated model's card is titled by its description, which starts with the gate's name.
    degenerate = [v for v in variants if v.get("gate") in ("uniform", "dense", "fixed")]
    for v in degenerate:
        card = [s for s in sections if s.startswith(v["gate"] + " L ")]
        if len(card) != 1:
            fail(f"{md_path}: not exactly one card for the {v['name']} variant ({v['gate']} gate)")
        if "retention undefined: " not in card[0]:
            fail(f"{md_path}: the {v['name']} card does not say why its retention is undefined")
    print(f"check_demo_report: {html_path}: {len(titles)} cards for {len(variants)} variants; "
          f"undefined retention explained for {', '.join(v['name'] for v in degenerate) or 'no variant'}")


main()
