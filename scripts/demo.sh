#!/usr/bin/env bash
# make demo / make demo-quick: a small study on the default corpus (FeatureGate, LayerStatic,
# Uniform, Dense and a MUDD model: train, evaluate, audit, aggregate over seeds, measure execution,
# report). Resumable: a second run skips what is finished. Prints where the report is.
set -euo pipefail
build=${1:-build}
config=${2:-configs/demo.json}
start=$(date +%s)
"$build/fca" study --config "$config"
echo "== demo finished in $(( $(date +%s) - start )) s"
