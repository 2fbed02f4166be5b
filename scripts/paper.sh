#!/usr/bin/env bash
# make paper-quick / make paper-cpu: fca paper on a paper config (both corpora: train, evaluate, audit,
# aggregate, measure, report; then the paper's figures beside the paper's values), then a check of
# the page (scripts/check_paper.py). Resumable: a second run skips what is finished.
set -euo pipefail
build=${1:-build}
config=${2:-configs/paper-quick.json}
start=$(date +%s)
"$build/fca" paper --config "$config"
python3 scripts/check_paper.py "$config"
echo "== paper finished in $(( $(date +%s) - start )) s"
