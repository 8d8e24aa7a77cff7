#!/usr/bin/env bash
# NUTS (issue 53): leapfrog steps of all chains per second and effective samples per second of
# ovl's one-worker-per-chain NUTS operator on the CPU (examples/nuts.rs) at 1, 16, 256 and 4,096
# chains, on a 100-dimensional AR(1) Gaussian and a Bayesian logistic regression; with --peers,
# NumPyro's NUTS (chain_method="vectorized") and TensorFlow Probability's NUTS on JAX, installed
# into the optional peer environment (.venv-peers, scripts/peer-env.sh nuts). Each row keeps the
# fastest of the repeats. Writes target/nuts-bench/{nuts.json,nuts.md}.
#
#   scripts/bench-nuts.sh [--quick] [--peers] [--repeats N] [--peer-chains N,N,..]
#     --quick: 1, 16 and 256 chains, 2 repeats
#     --peer-chains: the peers' chain counts, a subset of ovl's (default: all of them); 4,096 lock-step chains of the
#       Gaussian take NumPyro several minutes a run on 2 shared cores
set -euo pipefail
cd "$(dirname "$0")/.."

chains="1,16,256,4096"
repeats=3
peers=0
peer_chains=""
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) chains="1,16,256"; repeats=2 ;;
        --peers) peers=1 ;;
        --repeats) repeats="$2"; shift ;;
        --peer-chains) peer_chains="$2"; shift ;;
        *)
            echo "usage: scripts/bench-nuts.sh [--quick] [--peers] [--repeats N] [--peer-chains N,N]" >&2
            exit 2
            ;;
    esac
    shift
done
out="$PWD/target/nuts-bench"
mkdir -p "$out"
rm -f "$out"/nuts-*.json
cargo run --locked --release --example nuts -- --bench --chains "$chains" --repeats "$repeats" \
    --out "$out"
if [ "$peers" = 1 ]; then
    py="$(scripts/peer-env.sh nuts)"
    for impl in numpyro tfp; do
        "$py" benches/nuts_peers.py "$out" --impl "$impl" --chains "${peer_chains:-$chains}" \
            --repeats "$repeats"
    done
fi
machine="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores"
if grep -qm1 avx512f /proc/cpuinfo; then machine="$machine, AVX-512"; fi
python3 benches/nuts_report.py "$out" "$machine"
