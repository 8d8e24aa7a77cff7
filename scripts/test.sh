#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine. Installs what it needs by itself:
# the Rust components below and the project's git-ignored Python environment (.venv, made by
# scripts/python-env.sh from scripts/requirements.txt).
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v rustup >/dev/null 2>&1; then
    rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi

# A one-off build: incremental artifacts would only take disk (about 2 GB).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# Keep the operators the tests compile out of the user's cache.
export OVL_CACHE_DIR="${OVL_CACHE_DIR:-$PWD/target/ovl-test-cache}"

echo "== Python environment"
OVL_PYTHON="$(scripts/python-env.sh)"
export OVL_PYTHON

echo "== structure (no import circles between sibling modules, no source over 800 lines)"
python3 scripts/check-structure.py
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo doc (a broken or private intra-doc link is an error)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
echo "== cargo test"
# The CUDA 12 and 13 NVRTC wheels are both in .venv: the CUDA tests compile with each.
OVL_REQUIRE_NVRTC=12,13 cargo test --workspace --locked
echo "== CUDA backend with NVRTC 13 (what a CUDA-13-only machine has)"
nvidia="$("$OVL_PYTHON" -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))')/nvidia"
OVL_NVRTC_LIB="$nvidia/cu13/lib/libnvrtc.so.13" OVL_PTXAS="$nvidia/cu13/bin/ptxas" \
    cargo test --locked -p ovl-codegen --test cuda
echo "== demo (smoke)"
cargo run --locked --release --example demo >/dev/null
echo "== TensorFlow bridge: build, export the test bundles, run the Python tests"
cargo build --locked --release -p ovl-tf-bridge
bundles="$PWD/target/ovl-tf-bundles"
cargo run --locked --release -p ovl-tf-bridge --example make_bundles -- "$bundles" >/dev/null
# The tests import the package from the checkout (their conftest.py puts it on sys.path).
OVL_TF_LIBRARY="$PWD/target/release/libovl_tf_bridge.so" OVL_TF_BUNDLE_DIR="$bundles" \
    TF_CPP_MIN_LOG_LEVEL=2 "$OVL_PYTHON" -m pytest -q -p no:cacheprovider ovl-tf-bridge/python/tests

echo "== TensorFlow bridge: the wheel, installed in a fresh virtual environment"
# The wheel carries the bridge library (setuptools-rust builds it into target/release, where
# the build above left it). The fresh environment sees TensorFlow through a .pth line naming
# .venv's site-packages (.pth files in those are not
# read, so an editable ovl_tf installed there stays out).
wheelhouse="$(mktemp -d)"
trap 'rm -rf "$wheelhouse"' EXIT
"$OVL_PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
    -w "$wheelhouse/dist" ./ovl-tf-bridge/python
base_python="$("$OVL_PYTHON" -c 'import sys; print(sys._base_executable)')"
"$base_python" -m venv "$wheelhouse/venv"
site="$("$wheelhouse/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
"$OVL_PYTHON" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))' \
    >"$site/ovl_tensorflow.pth"
"$wheelhouse/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    "$wheelhouse"/dist/ovl_tf-*.whl
cp ovl-tf-bridge/python/tests/installed_check.py "$wheelhouse/"
(cd "$wheelhouse" && env -u OVL_TF_LIBRARY TF_CPP_MIN_LOG_LEVEL=2 \
    "$wheelhouse/venv/bin/python" installed_check.py "$bundles")

echo "== Python package ovl: the wheel, installed in a fresh virtual environment, and its tests"
# setuptools-rust builds the native module (ovl-py, PyO3 on the stable ABI) with cargo into
# the wheel; it goes into the fresh environment above (NumPy and pytest come from .venv
# through its .pth line), and the tests run from outside the checkout against it.
"$OVL_PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
    -w "$wheelhouse/dist" ./ovl-py
"$wheelhouse/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    "$wheelhouse"/dist/ovl-*-abi3-*.whl
py_bundles="$PWD/target/ovl-py-bundles" py_tests="$PWD/ovl-py/tests"
cargo run --locked --release -p ovl-py --example py_bundles -- "$py_bundles" >/dev/null
(cd "$wheelhouse" && OVL_PY_BUNDLE_DIR="$py_bundles" \
    "$wheelhouse/venv/bin/python" -m pytest -q -rs -p no:cacheprovider "$py_tests")
echo "== all tests passed"
