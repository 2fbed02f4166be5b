#!/usr/bin/env bash
# make bench: kernel benchmarks, fca's model benchmarks, and the side-by-side PyTorch comparison,
# at the default shape (L 6, D 256, H 4, T 256, B 8; featuregate, then shc, dhc and mhc) on 2 threads,
# then the audit.
set -euo pipefail
build=${1:-build}
"$build/fca_kernels_bench"
"$build/fca_blas_bench"
"$build/fca" bench forward --threads 2
"$build/fca" bench train --threads 2
/usr/bin/python3 bench/compare_pytorch.py --fca "$build/fca" --threads 2
# Hyper-connections at the same shape, n 4 (docs/hyper.md#speed).
for variant in shc dhc mhc; do
  /usr/bin/python3 bench/compare_pytorch.py --fca "$build/fca" --threads 2 --arch hyper --hc-variant $variant --hc-streams 4
done
# The audit itself against a hand-written PyTorch audit (L 4, D 128, H 4, T 128, 128 + 128 windows,
# 5 repetitions): featuregate and MUDD, trained for a few seconds by fca first.
/usr/bin/python3 bench/compare_audit_pytorch.py --fca "$build/fca" --threads 2
