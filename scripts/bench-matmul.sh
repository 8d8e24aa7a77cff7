#!/usr/bin/env bash
# Matrix products (issues 32 and 51): ovl_stdlib::matmul compiled once (benches/matmul.rs)
# against NumPy's BLAS (benches/matmul_numpy.py), f32, at 512, 1024 and 2048 and the LSTM
# layer's shapes, the two alternating for N rounds (each shape's best over the rounds, so that
# other jobs on a shared machine weigh on both alike); writes target/matmul-bench[-avx2]/matmul.md.
# OPENBLAS_* overrides of the environment are removed for NumPy, so that OpenBLAS picks its
# kernels for this CPU; with --isa avx2, ovl is held to AVX2 (OVL_CPU_ISA=avx2) and OpenBLAS to
# its Haswell (AVX2) kernels.
#
#   scripts/bench-matmul.sh [--full] [--isa avx2|native] [--rounds N]
#                           (quick: 5 repetitions; --full: 20; rounds: 3)
set -euo pipefail
cd "$(dirname "$0")/.."
mode="--quick" isa="native" rounds=3
while [ $# -gt 0 ]; do
    case "$1" in
        --full) mode="" ;;
        --isa) isa="$2"; shift ;;
        --rounds) rounds="$2"; shift ;;
        *) echo "usage: scripts/bench-matmul.sh [--full] [--isa avx2|native] [--rounds N]" >&2; exit 2 ;;
    esac
    shift
done
source scripts/isa-env.sh "$isa"
out="$PWD/target/matmul-bench$ISA_SUFFIX"
mkdir -p "$out"
rm -f "$out"/ovl*.json "$out"/numpy*.json
python="$(scripts/python-env.sh)"
cargo build --locked --release --bench matmul
for round in $(seq 1 "$rounds"); do
    echo "== round $round of $rounds: ovl ($isa)"
    cargo bench --locked --bench matmul -- $mode --out "$out"
    mv "$out/ovl.json" "$out/ovl.$round.json"
    echo "== round $round of $rounds: NumPy ($isa)"
    (cd benches && env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $NUMPY_ISA_ENV \
        "$python" matmul_numpy.py $mode --out "$out")
    mv "$out/numpy.json" "$out/numpy.$round.json"
done
(cd benches && "$python" matmul_numpy.py --out "$out" --report)
