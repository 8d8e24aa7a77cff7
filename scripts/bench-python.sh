#!/usr/bin/env bash
# The Python package's benchmarks on the CPU: builds the `ovl` wheel and installs it into a
# fresh virtual environment that sees the project's .venv (as scripts/test.sh does), exports
# the benchmark's bundles, and runs benches/python_torch.py (ovl.torch.op eager and inside
# torch.compile against torch eager and torch.compile, and the per-call cost), writing
# target/python-bench/torch.json. Other frameworks' benchmarks can be added below it.
#
#   scripts/bench-python.sh            every repetition (for the record; a quiet machine)
#   scripts/bench-python.sh --quick    fewer repetitions
set -euo pipefail
cd "$(dirname "$0")/.."

mode=""
for arg in "$@"; do
    case "$arg" in
        --quick) mode="--quick" ;;
        *)
            echo "usage: scripts/bench-python.sh [--quick]" >&2
            exit 2
            ;;
    esac
done
out="$PWD/target/python-bench"
export OVL_CACHE_DIR="${OVL_CACHE_DIR:-$PWD/target/ovl-bench-cache}"

echo "== Python environment"
python="$(scripts/python-env.sh)"

echo "== the ovl wheel, installed in a fresh virtual environment"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
    -w "$work/dist" ./ovl-py
base_python="$("$python" -c 'import sys; print(sys._base_executable)')"
"$base_python" -m venv "$work/venv"
site="$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
"$python" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))' \
    >"$site/ovl_project.pth"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    "$work"/dist/ovl-*-abi3-*.whl

echo "== bundles"
cargo run --locked --release -p ovl-py --example bench_bundles -- "$out/bundles"

echo "== PyTorch (CPU)"
(cd "$work" && "$work/venv/bin/python" "$OLDPWD/benches/python_torch.py" \
    --bundles "$out/bundles" --out "$out/torch.json" $mode)
