#!/usr/bin/env bash
# make bench: kernel benchmarks, fca's model benchmarks, and the side-by-side PyTorch comparison,
# all at the default shape (L 6, D 256, H 4, T 256, B 8, featuregate) on 2 threads.
set -euo pipefail
build=${1:-build}
"$build/fca_kernels_bench"
"$build/fca_blas_bench"
"$build/fca" bench forward --threads 2
"$build/fca" bench train --threads 2
/usr/bin/python3 bench/compare_pytorch.py --fca "$build/fca" --threads 2
