#!/usr/bin/env bash
# make demo: train a small featuregate model on the default corpus for a few minutes, with
# progress shown, then evaluate it on the test split. Outputs go to <build>/demo/.
set -euo pipefail
build=${1:-build}
fca="$build/fca"
out="$build/demo"
mkdir -p "$out"
model="$out/featuregate-L4-D128.safetensors"
echo "== demo: training a 4-layer, 128-wide featuregate model on data/nlp-corpus (about 3 minutes on 2 cores)"
"$fca" train --gate featuregate --layers 4 --dim 128 --heads 4 --seq 128 --batch 16 --steps 1200 --lr 2e-3 \
  --warmup 60 --seed 1 --eval-every 300 --eval-windows 64 --out "$model"
echo "== demo: evaluating on the test split"
"$fca" eval --model "$model" --split test --out "$out/eval-test.json"
"$fca" info --model "$model"
echo "== demo: done. Model: $model, training log: $model.log.jsonl, evaluation: $out/eval-test.json"
