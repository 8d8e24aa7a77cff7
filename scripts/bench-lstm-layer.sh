#!/usr/bin/env bash
# A whole LSTM layer (issue 32): ovl (benches/lstm_layer.rs) against TensorFlow's
# keras.layers.LSTM with and without jit_compile, JAX lax.scan under jit, PyTorch nn.LSTM and
# torch.compile of the cell's loop (benches/lstm_layer_peers.py), each checked against a NumPy
# reference first; writes target/lstm-layer-bench/lstm_layer.md.
#
# JAX and PyTorch run from the optional peer environment (.venv-peers, scripts/peer-env.sh),
# created only with --peers; without it and without an existing .venv-peers the report says
# they did not run.
#
#   scripts/bench-lstm-layer.sh            quick mode: the first size, 3 repetitions
#   scripts/bench-lstm-layer.sh --full     every size, 7 repetitions (for the record)
#   scripts/bench-lstm-layer.sh --peers    also install JAX and PyTorch when missing
#   scripts/bench-lstm-layer.sh --isa avx2 ovl and its peers held to AVX2 (scripts/isa-env.sh);
#                                          writes target/lstm-layer-bench-avx2
set -euo pipefail
cd "$(dirname "$0")/.."

mode="--quick"
peers=0
isa=native
while [ $# -gt 0 ]; do
    arg="$1"
    shift
    case "$arg" in
        --isa)
            isa="${1:-}"
            shift
            ;;
        --full) mode="" ;;
        --peers) peers=1 ;;
        *)
            echo "usage: scripts/bench-lstm-layer.sh [--full] [--peers] [--isa avx2|native]" >&2
            exit 2
            ;;
    esac
done
source scripts/isa-env.sh "$isa"
out="$PWD/target/lstm-layer-bench$ISA_SUFFIX"
mkdir -p "$out"
rm -f "$out"/tf.json "$out"/jax.json "$out"/torch.json

echo "== Python environment"
python="$(scripts/python-env.sh)"

echo "== LSTM layer: ovl"
cargo bench --locked --bench lstm_layer -- $mode --out "$out"

echo "== LSTM layer: NumPy reference check of ovl, then TensorFlow"
"$python" benches/lstm_layer_peers.py --peer tf $mode --out "$out"

for peer in jax torch; do
    echo "== LSTM layer: $peer"
    peer_python=""
    if [ "$peers" = 1 ]; then
        peer_python="$(scripts/peer-env.sh "$peer")"
    elif [ -x .venv-peers/bin/python ] && .venv-peers/bin/python -c "import $peer" 2>/dev/null; then
        peer_python="$PWD/.venv-peers/bin/python"
    fi
    if [ -n "$peer_python" ]; then
        "$peer_python" benches/lstm_layer_peers.py --peer "$peer" $mode --out "$out"
    else
        echo "$peer DID NOT RUN: no .venv-peers with $peer (scripts/bench-lstm-layer.sh --peers)"
    fi
done

echo "== report"
"$python" benches/lstm_layer_peers.py --report --out "$out"
