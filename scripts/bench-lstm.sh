#!/usr/bin/env bash
# The main demo: defines, compiles and runs operators on the CPU (examples/demo.rs), then runs
# the LSTM-cell benchmark against TensorFlow and the memory-bandwidth limit (benches/lstm.rs,
# benches/lstm_tf.py; on a machine with a GPU also the CUDA backend and benches/lstm_gpu_peers.py)
# and writes target/lstm-bench/{lstm.md,lstm.json,lstm.png}.
#
# With --peers it also runs JAX jit and torch.compile (CPU, inductor) on the same inputs
# (benches/lstm_peers.py), in the optional peer environment that scripts/peer-env.sh creates
# (.venv-peers; PyTorch's wheel is about 3 GB); without it the report says they did not run.
#
#   scripts/bench-lstm.sh            quick mode (a few minutes)
#   scripts/bench-lstm.sh --full     every size, more repetitions (for the record)
#   scripts/bench-lstm.sh --peers    also JAX and torch.compile (installs them the first time)
set -euo pipefail
cd "$(dirname "$0")/.."

mode="--quick"
peers=0
for arg in "$@"; do
    case "$arg" in
        --full) mode="" ;;
        --peers) peers=1 ;;
        *)
            echo "usage: scripts/bench-lstm.sh [--full] [--peers]" >&2
            exit 2
            ;;
    esac
done
out="$PWD/target/lstm-bench"

echo "== Python environment"
python="$(scripts/python-env.sh)"

echo "== demo"
cargo run --locked --release --example demo

echo "== building the TensorFlow bridge"
cargo build --locked --release -p ovl-tf-bridge
export OVL_TF_LIBRARY="$PWD/target/release/libovl_tf_bridge.so"

echo "== LSTM benchmark: ovl"
cargo bench --locked --bench lstm -- $mode --out "$out"
echo "== LSTM benchmark: PyTorch and JAX on the GPU (where they and a GPU are present)"
peer_python=""
if [ "$peers" = 1 ]; then
    echo "== peer environment (JAX, PyTorch)"
    peer_python="$(scripts/peer-env.sh)"
fi
torch_python="$python"
if [ -n "$peer_python" ]; then
    torch_python="$peer_python"
elif ! "$python" -c "import torch" 2>/dev/null && python3 -c "import torch" 2>/dev/null; then
    torch_python=python3
fi
"$torch_python" benches/lstm_gpu_peers.py $mode --out "$out"
echo "== LSTM benchmark: JAX jit and torch.compile on the CPU"
if [ -n "$peer_python" ]; then
    "$peer_python" benches/lstm_peers.py $mode --out "$out"
else
    echo "JAX JIT AND TORCH.COMPILE DID NOT RUN: not requested (scripts/bench-lstm.sh --peers)"
    rm -f "$out/peers.json"
fi
echo "== LSTM benchmark: TensorFlow and DynamicLib"
"$python" benches/lstm_tf.py $mode --out "$out"
echo "== report"
"$python" benches/lstm_report.py --out "$out"
