#!/usr/bin/env bash
# bf16 and f16 beside f32 on the CPU (benches/half.rs): the LSTM cell and the four row
# reductions, compiled once, best of each measurement's repetitions and the minimum over
# rounds. Writes target/half-bench/half.json and prints the table docs/benchmarks.md records.
#
#   scripts/bench-half.sh            quick mode (one size per kernel)
#   scripts/bench-half.sh --full     every size, more repetitions (for the record)
set -euo pipefail
cd "$(dirname "$0")/.."

mode="--quick"
for arg in "$@"; do
    case "$arg" in
        --full) mode="" ;;
        *)
            echo "usage: scripts/bench-half.sh [--full]" >&2
            exit 2
            ;;
    esac
done
cargo bench --locked --bench half -- $mode --out "$PWD/target/half-bench"
