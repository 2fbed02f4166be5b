#!/usr/bin/env bash
# The same work with two fca binaries, then a comparison of everything that must not change in a
# refactor (docs/adding-a-family.md): for every configuration of every family (`fca families`), checkpoints and training state from the same
# seed, training logs, eval, info, traces (live, replay, ids), audits (audit.json, windows.csv) and
# exec.json's counted figures. Timing, provenance and paths are left out.
#   scripts/compare_builds.sh OLD_FCA NEW_FCA [WORK_DIR] [DATA_DIR]
# Exits 0 when everything compared is bitwise the same.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage="usage: compare_builds.sh OLD_FCA NEW_FCA [WORK_DIR] [DATA_DIR]"
# Absolute paths: the work runs in WORK_DIR.
old=$(realpath "${1:?$usage}")
new=$(realpath "${2:?$usage}")
work=${3:-$(mktemp -d)}
data=$(realpath "${4:-$here/../data/nlp-corpus}")
# The runs: every configuration of every family the NEW build lists (`fca families --json`), so a
# family added later is covered without an edit here. An old build that lacks one fails its run.
mkdir -p "$work"
"$new" families --json > "$work/families.json"
mapfile -t runs < <(/usr/bin/python3 "$here/compare_builds.py" --runs "$work")
for v in old new; do
  fca=$([ $v = old ] && echo "$old" || echo "$new")
  rm -rf "$work/$v" && mkdir -p "$work/$v"
  cd "$work"
  printf '[[1,2,3,4,5],[9,8,7,6,5]]' > ids.json
  models=()
  for run in "${runs[@]}"; do
    # name, checkpoint path under $v, then the `fca train` flags of the configuration
    read -r name out flags <<< "$run"
    out=$v/$out
    models+=(--model "$out")
    if ! $fca train --layers 2 --dim 64 --heads 2 --seq 64 --steps 30 --warmup 5 --eval-every 10 --eval-windows 8 --no-progress \
      --threads 2 --seed 3 --data "$data" --out "$out" $flags > $v/train_$name.log 2>&1; then
      echo "the $v build could not train $name (fca train $flags): $work/$v/train_$name.log" >&2
      exit 1
    fi
    $fca eval --model $out --data "$data" --windows 16 --no-progress --threads 2 --out $v/eval_$name.json > /dev/null
    $fca info --model $out > $v/info_$name.txt
    $fca trace --model $out --text "The frozen controller, replayed." --threads 2 --out $v/trace_$name.safetensors > /dev/null
    $fca trace --model $out --text "The frozen controller, replayed." --replay old/trace_$name.safetensors --threads 2 \
      --out $v/replay_$name.safetensors > /dev/null
    $fca trace --model $out --ids ids.json --threads 2 --out $v/ids_$name.safetensors > /dev/null
    $fca audit --model $out --data "$data" --eval-windows 32 --calib-windows 32 --reps 3 --seed 1 --threads 2 --no-progress \
      --batch 8 --out $v/audit_$name > $v/audit_$name.log 2>&1
  done
  $fca exec "${models[@]}" --data "$data" --runs 3 --max-runs 3 --warmup 1 --eval-windows 8 --calib-windows 8 \
    --skip-threshold 0.3,0.6 --threads 2 --no-progress --out $v/exec > $v/exec.log 2>&1
done
/usr/bin/python3 "$here/compare_builds.py" "$work"
