#!/usr/bin/env bash
# The reductions benchmark (issue 14): layer norm, softmax, RMS norm and logsumexp along the last
# axis, forward and forward + backward, f32, in ovl written three ways (from stdlib ops, as one
# hand-written operator, the stdlib function; each evaluated per call and compiled once) against
# TensorFlow (eager, tf.function, XLA) and, when installed, JAX jit, with a triad bandwidth
# measured in the same run. Writes target/reductions-bench/{reductions.md,reductions.json,
# reductions.png}.
#
#   scripts/bench-reductions.sh              quick mode: 256x1024 and 1024x4096, 5 repetitions
#   scripts/bench-reductions.sh --full       every size, 20 repetitions (for the record)
#   scripts/bench-reductions.sh --peers      also install JAX into .venv-peers first
#                                            (scripts/peer-env.sh jax); without it JAX runs only
#                                            when .venv-peers already has it
#   scripts/bench-reductions.sh --layouts    only the layout cases (issue 34: the kernels along
#                                            axis 0, and a Fortran-order input against C order),
#                                            ovl, JAX and TensorFlow's XLA; they also run at the
#                                            end of every run. Writes
#                                            target/reductions-bench/layouts.md.
#   --isa avx2                               holds ovl and its peers to AVX2 (scripts/isa-env.sh:
#                                            OVL_CPU_ISA=avx2, XLA's and oneDNN's limits); writes
#                                            target/reductions-bench-avx2
#   OVL_LAYOUT_RUNS=N                        repeats the layout cases N times (ovl, JAX and XLA
#                                            alternating) and keeps each time's minimum
set -euo pipefail
cd "$(dirname "$0")/.."

mode="--quick"
peers=0
layouts_only=0
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
        --layouts) layouts_only=1 ;;
        *)
            echo "usage: scripts/bench-reductions.sh [--full] [--peers] [--layouts] [--isa avx2|native]" >&2
            exit 2
            ;;
    esac
done
source scripts/isa-env.sh "$isa"
out="$PWD/target/reductions-bench$ISA_SUFFIX"
mkdir -p "$out"
rm -rf "$out/data" "$out/jax.json" "$out/jax_layouts.json"
peer_python=""
if [ "$peers" = 1 ]; then
    peer_python="$(scripts/peer-env.sh jax)"
elif [ -x .venv-peers/bin/python ]; then
    peer_python="$PWD/.venv-peers/bin/python"
fi

layouts() {
    # OVL_LAYOUT_RUNS=N repeats the ovl, JAX and XLA parts N times, alternating; the report
    # keeps each time's minimum over the runs.
    local runs="${OVL_LAYOUT_RUNS:-1}" run tf_python
    tf_python="$(scripts/python-env.sh)"
    rm -f "$out"/ovl_layouts*.json "$out"/jax_layouts*.json "$out"/tf_layouts*.json
    for run in $(seq 1 "$runs"); do
        echo "== layout cases: ovl (run $run of $runs)"
        cargo bench --locked --bench reductions_layouts -- $mode --out "$out"
        echo "== layout cases: JAX (run $run of $runs)"
        if [ -n "$peer_python" ]; then
            "$peer_python" benches/reductions_layouts_jax.py $mode --out "$out"
        else
            echo "JAX LAYOUT PART DID NOT RUN: no .venv-peers (scripts/bench-reductions.sh --peers installs JAX)"
        fi
        echo "== layout cases: TensorFlow XLA (run $run of $runs)"
        "$tf_python" benches/reductions_layouts_tf.py $mode --out "$out"
        if [ "$runs" -gt 1 ]; then
            for part in ovl jax tf; do
                if [ -f "$out/${part}_layouts.json" ]; then
                    mv "$out/${part}_layouts.json" "$out/${part}_layouts.$run.json"
                fi
            done
        fi
    done
    python3 benches/reductions_layouts_report.py --out "$out"
}
if [ "$layouts_only" = 1 ]; then
    layouts
    exit 0
fi

echo "== Python environment"
python="$(scripts/python-env.sh)"

echo "== reductions benchmark: TensorFlow (writes the inputs and reference results)"
"$python" benches/reductions_tf.py $mode --out "$out"
echo "== reductions benchmark: ovl (checked against TensorFlow's results)"
cargo bench --locked --bench reductions -- $mode --out "$out"
echo "== reductions benchmark: JAX"
if [ -n "$peer_python" ]; then
    "$peer_python" benches/reductions_jax.py $mode --out "$out"
else
    echo "JAX PART DID NOT RUN: no .venv-peers (scripts/bench-reductions.sh --peers installs JAX)"
    printf '{"skipped": "JAX is not installed (.venv-peers does not exist; scripts/bench-reductions.sh --peers installs it)"}\n' \
        >"$out/jax.json"
fi
# The inputs and reference results (hundreds of MB in the full run) are no longer needed.
rm -rf "$out/data"
echo "== report"
"$python" benches/reductions_report.py --out "$out"
layouts
