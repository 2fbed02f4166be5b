#!/usr/bin/env bash
# Runs every libFuzzer target of fuzz/ for a set time from seeds made of the test data.
#   scripts/fuzz.sh BUILD_DIR SECONDS_PER_TARGET [TARGET ...]
# With FCA_FUZZ_RUNS=N set, each target stops after N executions instead (SECONDS is then the
# upper bound on its time). With FCA_FUZZ_MUTANTS=N set, no libFuzzer: each target's replay driver
# (BUILD_DIR/<target>_replay, fuzz/replay_main.cpp; built by every test build) runs its seeds and N
# deterministic mutants of each (what `make test` and `make test-sanitize` do).
# Seeds are written under BUILD_DIR/fuzz-seeds/<target> (small on purpose: libFuzzer's speed falls
# with input size), the growing corpus under BUILD_DIR/fuzz-corpus/<target>, and anything that
# crashed, leaked, hit a sanitizer or timed out under BUILD_DIR/findings/<target>/. Prints one line
# per target with its executions; exits nonzero when a target found something.
set -euo pipefail
build=$(cd "$1" && pwd); seconds=$2; shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
testdata="$root/tests/data"
seeds="$build/fuzz-seeds"
fca="$build/fca"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(fuzz_safetensors fuzz_checkpoint fuzz_mudd_config fuzz_mudd_index fuzz_tokenizer fuzz_cache_manifest
           fuzz_study_config fuzz_report_inputs fuzz_data_folder fuzz_adapter_protocol)
fi

make_seeds() {
  [ -f "$seeds/.done" ] && return
  rm -rf "$seeds"; mkdir -p "$seeds"/{models,data}
  local work="$seeds/work"; mkdir -p "$work"
  # A tiny corpus and tiny checkpoints of every single-file family, an audit, its cache, an exec.
  python3 - "$work/data" <<'PY'
import os, random, sys
d = sys.argv[1]; os.makedirs(d, exist_ok=True)
random.seed(1)
words = "the of and to in a is that for it as was with be by on not he this are or his from at".split()
for name, n in (("train", 4000), ("valid", 1500), ("test", 1500)):
    with open(os.path.join(d, name + ".txt"), "w") as f:
        f.write(" ".join(random.choice(words) for _ in range(n // 3)))
PY
  for arch in gated moe mod; do
    extra=()
    [ "$arch" = moe ] && extra=(--experts 2 --top-k 1)
    [ "$arch" = mod ] && extra=(--capacity 0.5)
    "$fca" train --arch "$arch" "${extra[@]}" --layers 2 --dim 8 --heads 2 --seq 8 --steps 2 --batch 2 --eval-every 0 \
      --eval-windows 2 --data "$work/data" --no-progress --out "$work/$arch.safetensors" >/dev/null
  done
  "$fca" audit --model "$work/gated.safetensors" --data "$work/data" --eval-windows 4 --calib-windows 4 --reps 2 \
    --bootstrap 20 --no-progress --out "$work/audit" >/dev/null
  # Degenerate models (no coefficient variation at all): their audits hold undefined statistics
  # (retention 0/0, variance shares of a constant tensor), valid as null with the reason; two
  # Uniform checkpoints aggregate into undefined figures.
  for gate in uniform dense fixed; do
    for seed in 1 2; do
      [ "$gate" != uniform ] && [ "$seed" = 2 ] && continue
      "$fca" train --gate "$gate" --layers 2 --dim 8 --heads 2 --seq 8 --steps 2 --batch 2 --eval-every 0 --eval-windows 2 \
        --seed "$seed" --data "$work/data" --no-progress --out "$work/$gate-s$seed.safetensors" >/dev/null
      "$fca" audit --model "$work/$gate-s$seed.safetensors" --data "$work/data" --eval-windows 4 --calib-windows 4 --reps 2 \
        --bootstrap 20 --no-progress --out "$work/$gate-s$seed-audit" >/dev/null
    done
  done
  "$fca" aggregate "$work"/uniform-s{1,2}-audit/audit.json --bootstrap 20 --out "$work/uniform-aggregate" >/dev/null
  "$fca" exec --model "$work/gated.safetensors" --data "$work/data" --runs 1 --max-runs 1 --warmup 0 --batch 2 --eval-windows 2 \
    --calib-windows 2 --out "$work/exec" >/dev/null 2>&1 || true
  mkdir -p "$seeds"/{fuzz_safetensors,fuzz_checkpoint,fuzz_mudd_config,fuzz_mudd_index,fuzz_tokenizer,fuzz_cache_manifest,fuzz_study_config,fuzz_report_inputs,fuzz_data_folder}
  cp "$work"/{gated,moe,mod}.safetensors "$seeds/fuzz_checkpoint/"
  cp "$work"/{gated,moe,mod}.safetensors "$root/tests/fixtures/gated_tiny.safetensors" "$seeds/fuzz_safetensors/" 2>/dev/null || true
  cp "$testdata/muddpythia-tiny/config.json" "$seeds/fuzz_mudd_config/"
  cp "$testdata/muddpythia-tiny-sharded/model.safetensors.index.json" "$seeds/fuzz_mudd_index/"
  cp "$work/audit/cache.safetensors" "$seeds/fuzz_cache_manifest/cache.safetensors"
  python3 -c "import json,sys; from struct import unpack; b=open(sys.argv[1],'rb').read(); n=unpack('<Q',b[:8])[0]; print(json.loads(b[8:8+n])['__metadata__']['manifest'])" \
    "$work/audit/cache.safetensors" > "$seeds/fuzz_cache_manifest/manifest.json"
  cp "$root/configs/demo-quick.json" "$root/configs/demo.json" "$seeds/fuzz_study_config/"
  cp "$work/audit/audit.json" "$seeds/fuzz_report_inputs/"
  for gate in uniform dense fixed; do cp "$work/$gate-s1-audit/audit.json" "$seeds/fuzz_report_inputs/$gate-audit.json"; done
  cp "$work/uniform-aggregate/aggregate.json" "$seeds/fuzz_report_inputs/uniform-aggregate.json"
  [ -f "$work/exec/exec.json" ] && cp "$work/exec/exec.json" "$seeds/fuzz_report_inputs/"
  head -c 3000 "$work/data/train.txt" > "$seeds/fuzz_data_folder/text"
  # A small tokenizer.json: the GPT-NeoX file's settings and added tokens, the byte alphabet and
  # its first merges (the whole 2 MB file makes every execution slow).
  python3 - "$testdata/gpt-neox-tokenizer/tokenizer.json" "$seeds/fuzz_tokenizer/tokenizer.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
vocab = t["model"]["vocab"]
merges = t["model"]["merges"][:40]
keep = {k: v for k, v in vocab.items() if v < 256}
for m in merges:
    a, b = m.split(" ") if isinstance(m, str) else m
    for piece in (a, b, a + b):
        if piece in vocab: keep[piece] = vocab[piece]
t["model"]["vocab"] = keep
t["model"]["merges"] = merges
t["added_tokens"] = [a for a in t["added_tokens"] if a["id"] < 5 or a["content"].strip() == ""][:8]
json.dump(t, open(sys.argv[2], "w"))
PY
  touch "$seeds/.done"
}

# What fca_adapter adapters answer to fuzz_adapter_protocol's requests (Debian's python3 has torch;
# its own marker, so a seed folder made before this target gets them too).
make_adapter_seeds() {
  [ -f "$seeds/.adapter-done" ] && return
  rm -rf "$seeds/fuzz_adapter_protocol"
  "${FCA_PYTHON:-/usr/bin/python3}" "$root/scripts/fuzz_adapter_seeds.py" "$seeds/fuzz_adapter_protocol"
  touch "$seeds/.adapter-done"
}

make_seeds
make_adapter_seeds
status=0
for t in "${targets[@]}"; do
  corpus="$build/fuzz-corpus/$t"; findings="$build/findings/$t"
  mkdir -p "$corpus" "$findings"
  log="$build/findings/$t.log"
  if [ -n "${FCA_FUZZ_MUTANTS:-}" ]; then
    set +e
    timeout "$seconds" "$build/${t}_replay" --mutants "$FCA_FUZZ_MUTANTS" "$seeds/$t" >"$log" 2>&1
    rc=$?
    set -e
    printf '%-22s %s\n' "$t" "$(tail -n 1 "$log")"
    if [ $rc -ne 0 ]; then status=1; echo "  exit $rc; the last lines of $log:"; tail -n 20 "$log" | sed 's/^/  /'; fi
    continue
  fi
  set +e
  "$build/$t" -max_total_time="$seconds" ${FCA_FUZZ_RUNS:+-runs=$FCA_FUZZ_RUNS} -timeout=20 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$findings/" "$corpus" "$seeds/$t" >"$log" 2>&1
  rc=$?
  set -e
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  found=$(ls "$findings" | wc -l)
  took=$(grep -o 'Done [0-9]* runs in [0-9]*' "$log" | grep -o '[0-9]*$' || echo "$seconds")
  printf '%-22s %12s executions in %ss, %s finding(s)%s\n' "$t" "$runs" "$took" "$found" \
    "$([ $rc -ne 0 ] && echo " (exit $rc; see $log)")"
  [ $rc -ne 0 ] || [ "$found" -ne 0 ] && status=1
done
exit $status
