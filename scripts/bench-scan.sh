#!/usr/bin/env bash
# The selective scan (issue 52): ovl's operator with its derived backward
# (benches/selective_scan.rs, the operator of examples/selective_scan.rs) against PyTorch (an
# eager loop over time and torch.compile of it) and JAX (lax.scan under jit)
# (benches/selective_scan_peers.py), each checked first; writes target/scan-bench/scan.md with
# the machine line.
#
#   scripts/bench-scan.sh            quick mode: the first size, 3 repetitions
#   scripts/bench-scan.sh --full     every size, 7 repetitions (for the record)
#   scripts/bench-scan.sh --peers    the peers from the optional peer environment (.venv-peers,
#                                    scripts/peer-env.sh); otherwise from the project's .venv
set -euo pipefail
cd "$(dirname "$0")/.."

mode="--quick"
peers=0
for arg in "$@"; do
    case "$arg" in
        --quick) mode="--quick" ;;
        --full) mode="" ;;
        --peers) peers=1 ;;
        *)
            echo "usage: scripts/bench-scan.sh [--quick|--full] [--peers]" >&2
            exit 2
            ;;
    esac
done
out="$PWD/target/scan-bench"
mkdir -p "$out"
rm -f "$out"/torch.json "$out"/jax.json

echo "== Python environment"
python="$(scripts/python-env.sh)"

echo "== selective scan: ovl"
cargo bench --locked --bench selective_scan -- $mode --out "$out"

for peer in torch jax; do
    echo "== selective scan: $peer"
    peer_python="$python"
    if [ "$peers" = 1 ]; then
        peer_python="$(scripts/peer-env.sh "$peer")"
    fi
    if "$peer_python" -c "import $peer" 2>/dev/null; then
        "$peer_python" benches/selective_scan_peers.py --peer "$peer" $mode --out "$out"
    else
        echo "$peer DID NOT RUN: $peer_python cannot import it (scripts/bench-scan.sh --peers)"
    fi
done

echo "== report"
"$python" benches/selective_scan_peers.py --report --out "$out"
