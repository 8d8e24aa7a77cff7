#!/usr/bin/env bash
# The GPU benchmarks, ovl against its peers in one run, and one report.
#
#   scripts/bench-gpu.sh [--quick] [--out DIR] [--bin BINDIR] [--limit SECONDS]
#
# Runs, each under its own timeout within SECONDS in all (default 600):
#   1. benches/lstm.rs --gpu-only: the fused LSTM cell's kernel time (ovl::profile) and its
#      time per call compiled once on device tensors (Compiled::run_device_into: the GPU's
#      time from CUDA events, and the wall time with a synchronization), forward and
#      forward + backward;
#   2. benches/reductions.rs --gpu: softmax, layer norm, RMS norm and logsumexp likewise,
#      along the last axis and along axis 0 (down the columns, with a sum over axis 0:
#      benches/reductions/columns.rs);
#   3. benches/lstm_layer_gpu.rs: a whole LSTM layer (products through cuBLAS, the cells
#      fused) on device tensors, forward and forward + backward, in f32 and with TF32 products;
#   4. the peers on the same GPU, inputs already there, checked against NumPy first:
#      benches/lstm_gpu_peers.py, benches/lstm_layer_gpu_peers.py and
#      benches/reductions_gpu_peers.py (PyTorch eager, nn.LSTM, torch.compile, JAX jit;
#      whichever the Python has: $PYTHON, else python3);
#   5. benches/gpu_report.py: DIR/gpu-report.md, the tables (the layer's appended).
# The ovl benchmarks are built and run with cargo, or, with --bin, taken prebuilt from BINDIR
# (ovl--bench-lstm, ovl--bench-lstm_layer_gpu, ovl--bench-reductions: what
# scripts/gpu-check.sh packs). Without a GPU
# every part says that it did not run, and the report says so too.
set -uo pipefail
cd "$(dirname "$0")/.."

mode="" out="target/gpu-bench" bin="" limit=600
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) mode="--quick" ;;
        --out) out="$2"; shift ;;
        --bin) bin="$2"; shift ;;
        --limit) limit="$2"; shift ;;
        *) echo "usage: scripts/bench-gpu.sh [--quick] [--out DIR] [--bin BINDIR] [--limit SECONDS]" >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$out/lstm" "$out/layer" "$out/reductions"
python="${PYTHON:-python3}"
started="$(date +%s)"
failed=0

# Runs "$@" under what is left of the time, at most $share percent of it; logs to $out/$name.log.
step() {
    local name="$1" share="$2"
    shift 2
    local left=$((limit - ($(date +%s) - started)))
    if [ "$left" -le 15 ]; then
        echo "== $name: not run, out of time" | tee "$out/$name.log"
        failed=1
        return
    fi
    local t=$((left * share / 100))
    [ "$t" -lt 15 ] && t=$((left - 5))
    echo "== $name (limit ${t}s)"
    local rc=0
    timeout -k 5 "$t" "$@" </dev/null >"$out/$name.log" 2>&1 || rc=$?
    cat "$out/$name.log"
    if [ "$rc" != 0 ]; then
        echo "== $name: exit $rc$([ "$rc" = 124 ] && echo ', timed out')" | tee -a "$out/$name.log"
        failed=1
    fi
}

if [ -n "$bin" ]; then
    lstm=("$bin/ovl--bench-lstm" --bench)
    layer=("$bin/ovl--bench-lstm_layer_gpu" --bench)
    reductions=("$bin/ovl--bench-reductions" --bench)
else
    echo "== building the benchmarks"
    cargo bench --locked --no-run --bench lstm --bench lstm_layer_gpu --bench reductions || exit 1
    lstm=(cargo bench --locked --bench lstm --)
    layer=(cargo bench --locked --bench lstm_layer_gpu --)
    reductions=(cargo bench --locked --bench reductions --)
fi
# shellcheck disable=SC2086 # $mode is one word or none
step ovl-lstm 35 "${lstm[@]}" $mode --gpu-only --out "$out/lstm"
# shellcheck disable=SC2086
step ovl-lstm-layer 20 "${layer[@]}" $mode --out "$out/layer"
# shellcheck disable=SC2086
step ovl-lstm-layer-tf32 20 "${layer[@]}" $mode --tf32 --out "$out/layer"
# shellcheck disable=SC2086
step ovl-reductions 45 "${reductions[@]}" $mode --gpu --out "$out/reductions"
# shellcheck disable=SC2086
step peers-lstm 40 "$python" benches/lstm_gpu_peers.py $mode --out "$out/lstm"
# shellcheck disable=SC2086
step peers-lstm-layer 40 "$python" benches/lstm_layer_gpu_peers.py $mode --out "$out/layer"
# shellcheck disable=SC2086
step peers-reductions 90 "$python" benches/reductions_gpu_peers.py $mode --out "$out/reductions"
"$python" benches/gpu_report.py --lstm "$out/lstm" --reductions "$out/reductions" \
    --out "$out/gpu-report.md" >/dev/null || failed=1
if [ -f "$out/layer/lstm_layer_gpu.md" ]; then
    { echo; echo "## A whole LSTM layer"; echo; cat "$out/layer/lstm_layer_gpu.md"; } >>"$out/gpu-report.md"
fi
echo "== $out/gpu-report.md ($(($(date +%s) - started)) s)"
cat "$out/gpu-report.md"
exit "$failed"
