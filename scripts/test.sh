#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine. Installs what it needs by itself:
# the Rust components below and the project's git-ignored Python environment (.venv, made by
# scripts/python-env.sh from scripts/requirements.txt).
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v rustup >/dev/null 2>&1; then
    rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi

# Keep the operators the tests compile out of the user's cache.
export OVL_CACHE_DIR="${OVL_CACHE_DIR:-$PWD/target/ovl-test-cache}"

echo "== Python environment"
OVL_PYTHON="$(scripts/python-env.sh)"
export OVL_PYTHON

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
echo "== demo (smoke)"
cargo run --locked --release --example demo >/dev/null
echo "== TensorFlow bridge: build, export the test bundles, run the Python tests"
cargo build --locked --release -p ovl-tf-bridge
"$OVL_PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
    -e ovl-tf-bridge/python
bundles="$PWD/target/ovl-tf-bundles"
cargo run --locked --release -p ovl-tf-bridge --example make_bundles -- "$bundles" >/dev/null
OVL_TF_LIBRARY="$PWD/target/release/libovl_tf_bridge.so" OVL_TF_BUNDLE_DIR="$bundles" \
    TF_CPP_MIN_LOG_LEVEL=2 "$OVL_PYTHON" -m pytest -q -p no:cacheprovider ovl-tf-bridge/python/tests
echo "== all tests passed"
