#!/usr/bin/env bash
# make paper-quick / make paper-cpu: fca paper on a paper config (both corpora: train, evaluate, audit,
# aggregate, measure, report; then the paper's figures beside the paper's values), then a check of
# the page (scripts/check_paper.py). Resumable: a second run skips what is finished.
#   scripts/paper.sh BUILD CONFIG [ENGINE]
# ENGINE torch trains and audits the gated and MUDD variants with fca_torch (docs/torch-engine.md)
# into the config's out folder with "-torch" appended, using Debian's python3 and python/ on the path.
set -euo pipefail
build=${1:-build}
config=${2:-configs/paper-quick.json}
engine=${3:-native}
start=$(date +%s)
if [ "$engine" = torch ]; then
  out=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["out"] + "-torch")' "$config")
  PYTHONPATH="$(pwd)/python${PYTHONPATH:+:$PYTHONPATH}" "$build/fca" paper --config "$config" --out "$out" \
    --engine torch --torch-python "${FCA_TORCH_PYTHON:-/usr/bin/python3}" ${FCA_GPUS:+--gpus "$FCA_GPUS"}
  python3 scripts/check_paper.py "$config" --out "$out"
else
  "$build/fca" paper --config "$config"
  python3 scripts/check_paper.py "$config"
fi
echo "== paper finished in $(( $(date +%s) - start )) s"
