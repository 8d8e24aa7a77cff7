#!/usr/bin/env bash
# What a batch size given at run time costs (issue 15): the fused LSTM cell forward kernel
# compiled specialised for the batch and with the batch as a symbol, timed in interleaved
# repetitions at B=20,H=650 and B=1024,H=4096; prints the time per element of each and how much
# faster the specialised kernel is, and writes target/dynamic-batch-bench/dynamic_batch.md.
#
#   scripts/bench-dynamic-batch.sh            15 repetitions per size
#   scripts/bench-dynamic-batch.sh --full     60 repetitions per size (for the record)
set -euo pipefail
cd "$(dirname "$0")/.."

mode="--quick"
for arg in "$@"; do
    case "$arg" in
        --full) mode="" ;;
        *)
            echo "usage: scripts/bench-dynamic-batch.sh [--full]" >&2
            exit 2
            ;;
    esac
done
cargo bench --locked --bench dynamic_batch -- $mode --out "$PWD/target/dynamic-batch-bench"
