#!/usr/bin/env bash
# Creates or updates the project's git-ignored Python environment in .venv and prints its
# python's path. The packages are listed in scripts/requirements.txt; the environment is only
# touched again when that file changes (its hash is stamped inside the environment).
set -euo pipefail
cd "$(dirname "$0")/.."

venv="$PWD/.venv"
requirements="$PWD/scripts/requirements.txt"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"

if [ ! -x "$venv/bin/python" ]; then
    echo "== creating the Python environment in .venv" >&2
    python3 -m venv "$venv" >&2
fi
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
    echo "== installing scripts/requirements.txt into .venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2
    echo "$want" >"$stamp"
fi
echo "$venv/bin/python"
