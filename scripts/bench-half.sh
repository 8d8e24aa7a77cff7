#!/usr/bin/env bash
# bf16 and f16 beside f32 on the CPU (benches/half.rs): the LSTM cell, the four row reductions
# and a matrix product, compiled once, best of each measurement's repetitions and the minimum
# over rounds; then the peers in f32 and bf16 (benches/half_peers.py: PyTorch eager and
# nn.LSTM, JAX under jit; the LSTM layer too) from the project's .venv when it has them. Writes
# target/half-bench/half.json, half-peers.json and half.md (one Markdown table with the
# machine line) and prints the tables docs/benchmarks.md records.
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
out="$PWD/target/half-bench"
cargo bench --locked --bench half -- $mode --out "$out"
if [ -x .venv/bin/python ]; then
    .venv/bin/python benches/half_peers.py $mode --out "$out"
    .venv/bin/python benches/half_peers.py --report --out "$out"
else
    echo "half peers (PyTorch, JAX) DID NOT RUN: no .venv (scripts/python-env.sh creates it)"
fi
