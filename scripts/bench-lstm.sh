#!/usr/bin/env bash
# The main demo: defines, compiles and runs operators on the CPU (examples/demo.rs), then runs
# the LSTM-cell benchmark against TensorFlow and the memory-bandwidth limit (benches/lstm.rs,
# benches/lstm_tf.py; on a machine with a GPU also the CUDA backend and benches/lstm_torch.py)
# and writes target/lstm-bench/{lstm.md,lstm.json,lstm.png}.
#
#   scripts/bench-lstm.sh            quick mode (a few minutes)
#   scripts/bench-lstm.sh --full     every size, more repetitions (for the record)
set -euo pipefail
cd "$(dirname "$0")/.."

mode="--quick"
if [ "${1:-}" = "--full" ]; then mode=""; fi
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
echo "== LSTM benchmark: PyTorch on the GPU (where PyTorch and a GPU are present)"
torch_python="$python"
if ! "$python" -c "import torch" 2>/dev/null && python3 -c "import torch" 2>/dev/null; then
    torch_python=python3
fi
"$torch_python" benches/lstm_torch.py $mode --out "$out"
echo "== LSTM benchmark: TensorFlow and DynamicLib"
"$python" benches/lstm_tf.py $mode --out "$out"
echo "== report"
"$python" benches/lstm_report.py --out "$out"
