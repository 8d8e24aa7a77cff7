#!/usr/bin/env bash
# The jacobian benchmark (ovl-tf-bridge/python/bench_jacobian.py): tape.batch_jacobian of the
# LSTM cell's new_h with respect to z at batch 20 and 256 (hidden 200), inside tf.function:
# the ovl cell (DynamicLib) vectorized by pfor and through the while-loop fallback, and the cell
# in TensorFlow ops (pfor and while loop). Exports the cells it needs, checks every jacobian,
# and writes target/jacobian-bench/{jacobian.md,jacobian.json}.
#
#   scripts/bench-jacobian.sh [--reps N]     (default 10 timed calls per variant)
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== Python environment"
python="$(scripts/python-env.sh)"

echo "== building the TensorFlow bridge"
cargo build --locked --release -p ovl-tf-bridge
export OVL_TF_LIBRARY="$PWD/target/release/libovl_tf_bridge.so"

out="$PWD/target/jacobian-bench"
echo "== exporting the LSTM cells"
cargo run --locked --release -p ovl-tf-bridge --example make_bundles -- "$out/bundles" \
    --lstm 20x200 --lstm 256x200

echo "== batch_jacobian benchmark"
"$python" ovl-tf-bridge/python/bench_jacobian.py --bundles "$out/bundles" --out "$out" "$@"
