#!/usr/bin/env bash
# Creates or updates the optional peer environment for the benchmarks in .venv-peers (git-ignored)
# and prints its python's path: JAX (CPU), PyTorch (torch.compile with inductor), NumPyro and
# TensorFlow Probability (for NUTS), each in a version that runs on this machine's CPU. Only the
# benchmark scripts call this, and only when asked (`--peers`); the test command never does.
# PyTorch's default wheel downloads about 3 GB.
#
#   scripts/peer-env.sh            create or update with every peer, print the python path
#   scripts/peer-env.sh jax        only JAX (and numpy) from scripts/peer-requirements.txt
#   scripts/peer-env.sh torch      only PyTorch (and numpy)
#   scripts/peer-env.sh nuts       the NUTS benchmark's peers: JAX, NumPyro, TensorFlow
#                                  Probability (its JAX substrate) and numpy
set -euo pipefail
cd "$(dirname "$0")/.."

venv="$PWD/.venv-peers"
requirements="$PWD/scripts/peer-requirements.txt"
peer="${1:-all}"
case "$peer" in
    all) selected="$(grep -v '^[[:space:]]*#' "$requirements" | grep -v '^[[:space:]]*$')" ;;
    nuts)
        selected="$(grep -E "^[[:space:]]*(numpy|jax|numpyro|tfp-nightly)([^A-Za-z0-9_-]|$)" "$requirements")"
        ;;
    jax | torch)
        # The peer's own lines and numpy, which every peer's benchmark script uses.
        selected="$(grep -E "^[[:space:]]*(numpy|$peer)([^A-Za-z0-9_-]|$)" "$requirements" || true)"
        if ! grep -qE "^[[:space:]]*$peer([^A-Za-z0-9_-]|$)" <<<"$selected"; then
            echo "scripts/peer-env.sh: scripts/peer-requirements.txt lists no $peer" >&2
            exit 2
        fi
        ;;
    *)
        echo "usage: scripts/peer-env.sh [jax|torch|nuts] (no argument: every peer)" >&2
        exit 2
        ;;
esac
want="$(sha256sum <<<"$selected" | cut -d' ' -f1)"
stamp="$venv/.requirements-$peer.sha256"
all_want="$(sha256sum <<<"$(grep -v '^[[:space:]]*#' "$requirements" | grep -v '^[[:space:]]*$')" | cut -d' ' -f1)"

if [ ! -x "$venv/bin/python" ]; then
    echo "== creating the peer environment in .venv-peers" >&2
    python3 -m venv "$venv" >&2
fi
# Up to date when this selection, or everything, was installed from the current file.
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ] &&
    [ "$(cat "$venv/.requirements-all.sha256" 2>/dev/null || true)" != "$all_want" ]; then
    echo "== installing $peer from scripts/peer-requirements.txt into .venv-peers" >&2
    list="$(mktemp)"
    trap 'rm -f "$list"' EXIT
    echo "$selected" >"$list"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$list" >&2
    echo "$want" >"$stamp"
fi
echo "$venv/bin/python"
