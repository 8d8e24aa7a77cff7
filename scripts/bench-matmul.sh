#!/usr/bin/env bash
# Matrix products (issue 32, item 6): ovl_stdlib::matmul compiled once (benches/matmul.rs)
# against NumPy's BLAS (benches/matmul_numpy.py) in the same minutes, f32 at 512, 1024 and
# 2048; writes target/matmul-bench/matmul.md. OPENBLAS_* overrides of the environment are
# removed for NumPy, so that OpenBLAS picks its kernels for this CPU.
#
#   scripts/bench-matmul.sh [--full]     (quick: 5 repetitions; --full: 20)
set -euo pipefail
cd "$(dirname "$0")/.."
mode="--quick"
[ "${1:-}" = "--full" ] && mode=""
out="$PWD/target/matmul-bench"
mkdir -p "$out"
cargo bench --locked --bench matmul -- $mode --out "$out"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$(scripts/python-env.sh)" benches/matmul_numpy.py $mode --out "$out"
