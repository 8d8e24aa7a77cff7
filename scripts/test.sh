#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine. Installs what it needs by itself:
# the Rust components below; later issues add the project's Python environment (.venv,
# git-ignored) with TensorFlow and the NVRTC wheels, created here when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v rustup >/dev/null 2>&1; then
    rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi

# Keep the operators the tests compile out of the user's cache.
export OVL_CACHE_DIR="${OVL_CACHE_DIR:-$PWD/target/ovl-test-cache}"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
echo "== demo (smoke)"
cargo run --locked --release --example demo >/dev/null
echo "== all tests passed"
