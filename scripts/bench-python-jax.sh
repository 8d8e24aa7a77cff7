#!/usr/bin/env bash
# ovl programs from JAX on the CPU (issue 49, item 8, the JAX half): the LSTM cell (20x200,
# 1024x4096) and layer norm (1024x4096), forward and forward + backward, through ovl.jax.op
# inside jax.jit against the same computation in jax.numpy under jax.jit, and the per-call
# cost of `x + 1` on f32[16] (ovl.jax.op in jit against jnp.add in jit). Builds the ovl wheel
# into a fresh virtual environment (NumPy and JAX from .venv), exports the bundles, runs
# benches/python_jax.py and writes target/python-jax-bench/jax.json.
#
#   scripts/bench-python-jax.sh            5 repeats of each case, the minimum kept
#   scripts/bench-python-jax.sh --quick    2 repeats, fewer calls at 1024x4096
set -euo pipefail
cd "$(dirname "$0")/.."

extra=()
for arg in "$@"; do
    case "$arg" in
        --quick) extra+=(--quick) ;;
        *)
            echo "usage: scripts/bench-python-jax.sh [--quick]" >&2
            exit 2
            ;;
    esac
done
export OVL_CACHE_DIR="${OVL_CACHE_DIR:-$PWD/target/ovl-bench-cache}"
OVL_PYTHON="$(scripts/python-env.sh)"
out="$PWD/target/python-jax-bench"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$OVL_PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
    -w "$work/dist" ./ovl-py
base_python="$("$OVL_PYTHON" -c 'import sys; print(sys._base_executable)')"
"$base_python" -m venv "$work/venv"
site="$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
"$OVL_PYTHON" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))' \
    >"$site/ovl_base.pth"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    "$work"/dist/ovl-*-abi3-*.whl
cargo run --locked --release -q -p ovl-py --example bench_bundles -- "$out/bundles"
repo="$PWD"
(cd "$work" && "$work/venv/bin/python" "$repo/benches/python_jax.py" \
    --bundles "$out/bundles" --out "$out" "${extra[@]}")
