#!/usr/bin/env bash
# The same work with two fca binaries, then a comparison of everything that must not change in a
# refactor (docs/adding-a-family.md): for every family, checkpoints and training state from the same
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
data=${4:-$here/../data/nlp-corpus}
for v in old new; do
  fca=$([ $v = old ] && echo "$old" || echo "$new")
  rm -rf "$work/$v" && mkdir -p "$work/$v"
  cd "$work"
  printf '[[1,2,3,4,5],[9,8,7,6,5]]' > ids.json
  # exit only where both builds know it (builds before issue 27 do not).
  archs="gated mudd moe mod shc dhc mhc"
  # (help captured first: grep -q closing the pipe early would fail it under pipefail)
  old_help=$("$old" train --help 2>/dev/null || true)
  new_help=$("$new" train --help 2>/dev/null || true)
  if [[ "$old_help" == *exit-head-steps* && "$new_help" == *exit-head-steps* ]]; then
    archs="$archs exit"
  fi
  for arch in $archs; do
    case $arch in
      gated) flags="--gate featuregate" ;;
      shc | dhc | mhc) flags="--arch hyper --hc-variant $arch --hc-streams 3" ;;
      exit) flags="--arch exit --exit-head-steps 10 --exit-threshold 0.95" ;;
      *) flags="--arch $arch" ;;
    esac
    out=$v/$arch.safetensors; [ $arch = mudd ] && out=$v/mudd
    $fca train --layers 2 --dim 64 --heads 2 --seq 64 --steps 30 --warmup 5 --eval-every 10 --eval-windows 8 --no-progress \
      --threads 2 --seed 3 --data "$data" --out $out $flags > $v/train_$arch.log 2>&1
    $fca eval --model $out --data "$data" --windows 16 --no-progress --threads 2 --out $v/eval_$arch.json > /dev/null
    $fca info --model $out > $v/info_$arch.txt
    $fca trace --model $out --text "The frozen controller, replayed." --threads 2 --out $v/trace_$arch.safetensors > /dev/null
    $fca trace --model $out --text "The frozen controller, replayed." --replay old/trace_$arch.safetensors --threads 2 \
      --out $v/replay_$arch.safetensors > /dev/null
    $fca trace --model $out --ids ids.json --threads 2 --out $v/ids_$arch.safetensors > /dev/null
    $fca audit --model $out --data "$data" --eval-windows 32 --calib-windows 32 --reps 3 --seed 1 --threads 2 --no-progress \
      --batch 8 --out $v/audit_$arch > $v/audit_$arch.log 2>&1
  done
  $fca exec --model $v/gated.safetensors --model $v/mudd --model $v/moe.safetensors --model $v/mod.safetensors \
    --model $v/dhc.safetensors --model $v/mhc.safetensors $([ -f $v/exit.safetensors ] && echo "--model $v/exit.safetensors") --data "$data" \
    --runs 3 --max-runs 3 --warmup 1 --eval-windows 8 --calib-windows 8 --skip-threshold 0.3,0.6 --threads 2 --no-progress \
    --out $v/exec > $v/exec.log 2>&1
done
/usr/bin/python3 "$here/compare_builds.py" "$work"
