#!/usr/bin/env bash
# Creates or updates the optional peer environment for the benchmarks in .venv-peers (git-ignored)
# and prints its python's path: JAX (CPU) and PyTorch (torch.compile with inductor), each in a
# version that runs on this machine's CPU. Only the benchmark scripts call this, and only when asked
# (`--peers`); the test command never does. PyTorch's default wheel downloads about 3 GB.
#
#   scripts/peer-env.sh            create or update, print the python path
set -euo pipefail
cd "$(dirname "$0")/.."

venv="$PWD/.venv-peers"
requirements="$PWD/scripts/peer-requirements.txt"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"

if [ ! -x "$venv/bin/python" ]; then
    echo "== creating the peer environment in .venv-peers" >&2
    python3 -m venv "$venv" >&2
fi
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
    echo "== installing scripts/peer-requirements.txt into .venv-peers (JAX, PyTorch)" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2
    echo "$want" >"$stamp"
fi
echo "$venv/bin/python"
