#!/usr/bin/env bash
# One-shot GPU check, for a GPU machine that has no Rust, no network and little time.
#
#   scripts/gpu-check.sh pack [ARCHIVE]   here (no GPU needed): builds every GPU test binary and
#                                         GPU benchmark in release mode, strips them, and packs
#                                         them with the git-tracked source tree into ARCHIVE
#                                         (default target/gpu-check.tar.xz), with the Python
#                                         package `ovl` as an abi3 wheel, its test and benchmark
#                                         bundles, and pytest (pure Python) for a machine
#                                         without it
#   scripts/gpu-check.sh run ARCHIVE      there: unpacks, puts the source tree at the path the
#                                         binaries were built in (a symlink: test binaries read
#                                         files through CARGO_MANIFEST_DIR), runs every test
#                                         binary under its own timeout, then the benchmarks
#                                         and their PyTorch and JAX peers through
#                                         scripts/bench-gpu.sh (5 minutes in all), and writes one report,
#                                         gpu-check-report.md, to $OUT if set, else to the
#                                         current directory.
#
# `GPU_CHECK_BENCH=0 scripts/gpu-check.sh run ARCHIVE` runs the tests only.
# `GPU_CHECK_PARTS` picks the parts of `pack` and `run` (default: all, in this order, each under its own
# time limit, a failure of one not stopping the others): `rust` (the test binaries, then the
# GPU benchmarks unless GPU_CHECK_BENCH=0: TOTAL_SECONDS), `python` (the package's GPU tests,
# ovl-py/tests/test_gpu.py, then its other tests on that Python: PY_TEST_SECONDS each) and
# `pybench` (scripts/bench-python*.sh's benchmarks on the GPU, quick: PY_BENCH_SECONDS each).
# All parts take at most about 17 minutes; a 10-minute command runs `GPU_CHECK_PARTS=rust` and
# `GPU_CHECK_PARTS=python,pybench` apart (the report of a subset is named after it:
# gpu-check-report-python-pybench.md).
# The Python is `$GPU_CHECK_PYTHON` (default python3, with PyTorch and JAX with CUDA).
#
# `run` works without a GPU too (a dry run): the tests then print which GPU parts did not run,
# and the report says there was no GPU. It exits non-zero when a test failed or timed out.
set -euo pipefail

# The GPU test binaries: package, test target, and the name filters of the tests to run when
# not all (a binary of several test files, tests/<group>.rs, also holds CPU-only tests).
TESTS=(
    "ovl cuda"
    "ovl device_tensors"
    "ovl stream"
    "ovl fuse reductions::"
    "ovl core vmap::"
    "ovl core autodiff::recurrences::recurrences_on_cuda"
    "ovl runtime gemm::"
    "ovl-runtime dlpack"
    "ovl-codegen cuda"
    "ovl-codegen codegen"
    "ovl-stdlib stdlib"
)
# The benchmarks with a GPU part (scripts/bench-gpu.sh runs them): package, bench target.
BENCHES=(
    "ovl lstm"
    "ovl lstm_layer_gpu"
    "ovl reductions"
)
TOTAL_SECONDS=300
PY_TEST_SECONDS="${PY_TEST_SECONDS:-240}"
PY_BENCH_SECONDS="${PY_BENCH_SECONDS:-240}"

# Whether GPU_CHECK_PARTS (default: all) names part $1 (`rust`, `python`, `pybench`).
has_part() { [[ ",${GPU_CHECK_PARTS:-rust,python,pybench}," == *",$1,"* ]]; }

usage() {
    echo "usage: scripts/gpu-check.sh pack [ARCHIVE] | run ARCHIVE" >&2
    exit 2
}

# The executables cargo built, from its JSON messages on stdin: "target-name path" lines.
executables() {
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])
'
}

pack() {
    cd "$(dirname "$0")/.."
    local root="$PWD"
    local archive="${1:-$root/target/gpu-check.tar.xz}"
    case "$archive" in /*) ;; *) archive="$PWD/$archive" ;; esac
    local stage
    stage="$(mktemp -d)"
    trap 'rm -rf "$stage"' RETURN
    mkdir -p "$stage/gpu-check/bin" "$stage/gpu-check/src"

    local spec
    # One cargo call per package keeps `--test` names unambiguous.
    local built="$stage/built.txt"
    : >"$built"
    # Without the `rust` part (GPU_CHECK_PARTS=python,pybench: a quick pack of the Python
    # package alone) no Rust test binary is built or packed.
    local rust_packages=""
    has_part rust && rust_packages="$(printf '%s\n' "${TESTS[@]}" | cut -d' ' -f1 | sort -u)"
    [ -n "$rust_packages" ] && echo "== building the GPU test binaries (release)" >&2
    for pkg in $rust_packages; do
        local targets=()
        for spec in "${TESTS[@]}"; do
            read -r p t _ <<<"$spec"
            [ "$p" = "$pkg" ] && targets+=(--test "$t")
        done
        cargo test --locked --release --no-run --message-format=json -p "$pkg" "${targets[@]}" \
            | executables | sed "s/^/test $pkg /" >>"$built"
    done
    for spec in "${BENCHES[@]}"; do
        has_part rust || break
        read -r pkg target _ <<<"$spec"
        cargo bench --locked --no-run --message-format=json -p "$pkg" --bench "$target" \
            | executables | sed "s/^/bench $pkg /" >>"$built"
    done

    local manifest="$stage/gpu-check/manifest"
    {
        echo "root $root"
        echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- || echo ' (with uncommitted changes)')"
    } >"$manifest"
    local kind pkg target exe name filters
    while read -r kind pkg target exe; do
        # A benchmark may share its name with a test (`reductions`): the kind keeps them apart.
        name="$pkg--$target"
        [ "$kind" = bench ] && name="$pkg--bench-$target"
        # Only the targets asked for (cargo also reports dependencies' build scripts).
        if [ "$kind" = test ]; then
            spec="$(printf '%s\n' "${TESTS[@]}" | grep -m1 -E "^$pkg $target( |\$)" || true)"
            [ -n "$spec" ] || continue
            read -r _ _ filters <<<"$spec"
        fi
        if [ "$kind" = bench ]; then
            printf '%s\n' "${BENCHES[@]}" | grep -qx "$pkg $target" || continue
            echo "bench $name" >>"$manifest"
        else
            echo "test $name $filters" >>"$manifest"
        fi
        cp "$exe" "$stage/gpu-check/bin/$name"
        strip "$stage/gpu-check/bin/$name"
    done <"$built"

    if has_part python || has_part pybench; then
    echo "== the Python package: the abi3 wheel, its bundles, pytest" >&2
    local python
    python="$(scripts/python-env.sh)"
    mkdir -p "$stage/gpu-check/python/site"
    "$python" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
        -w "$stage/gpu-check/python" ./ovl-py
    cargo run --locked --release -q -p ovl-py --example py_bundles -- \
        "$stage/gpu-check/python/bundles" >/dev/null
    cargo run --locked --release -q -p ovl-py --example bench_bundles -- \
        "$stage/gpu-check/python/bench-bundles" >/dev/null
    # pytest and what it imports, pure Python: used there only when that Python lacks pytest.
    local pkg
    for pkg in pytest _pytest pluggy iniconfig packaging pygments py.py; do
        "$python" -c "import importlib.util, os, sys
spec = importlib.util.find_spec(sys.argv[1].removesuffix('.py'))
origin = spec.origin if spec else ''
print(os.path.dirname(origin) if origin.endswith('__init__.py') else origin)" "$pkg" \
            | xargs -r -I{} cp -r {} "$stage/gpu-check/python/site/"
    done
    find "$stage/gpu-check/python/site" -name __pycache__ -prune -exec rm -rf {} +
    fi

    echo "== packing the git-tracked source tree" >&2
    git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$stage/gpu-check/src"
    cp "$0" "$stage/gpu-check/gpu-check.sh"
    mkdir -p "$(dirname "$archive")"
    tar -C "$stage" -cJf "$archive" gpu-check
    local bytes
    bytes="$(stat -c %s "$archive")"
    echo "== $archive: $((bytes / 1024 / 1024)) MiB ($(grep -c '^test ' "$manifest") test binaries, $(grep -c '^bench ' "$manifest") benchmarks)" >&2
    if [ "$bytes" -gt $((60 * 1024 * 1024)) ]; then
        echo "error: the archive is over 60 MB; the device tool carries at most 64 MiB" >&2
        exit 1
    fi
    echo "on the GPU machine: bash scripts/gpu-check.sh run $(basename "$archive")" >&2
    echo "  (or: tar -xJf $(basename "$archive") && bash gpu-check/gpu-check.sh run $(basename "$archive"))" >&2
}

run() {
    local archive="${1:?usage: scripts/gpu-check.sh run ARCHIVE}"
    local started
    started="$(date +%s)"
    local out="${OUT:-$PWD}"
    mkdir -p "$out"
    local parts="${GPU_CHECK_PARTS:-rust,python,pybench}"
    local suffix=""
    [ "$parts" = "rust,python,pybench" ] || suffix="-${parts//,/-}"
    local report="$out/gpu-check-report$suffix.md"
    local logs="$out/gpu-check-logs"
    mkdir -p "$logs"
    local work
    work="$(mktemp -d)"
    tar -C "$work" -xJf "$archive"
    local dir="$work/gpu-check"
    local root
    root="$(sed -n 's/^root //p' "$dir/manifest")"

    # Test binaries read files at their build-time paths: put the source tree there.
    local linked=""
    if [ -e "$root" ]; then
        echo "note: $root exists; the tests read their files from there" >&2
    else
        mkdir -p "$(dirname "$root")"
        ln -s "$dir/src" "$root"
        linked="$root"
    fi

    export OVL_CACHE_DIR="$work/cache"
    export XLA_PYTHON_CLIENT_PREALLOCATE=false
    local gpu="no GPU"
    if command -v nvidia-smi >/dev/null 2>&1; then
        gpu="$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "nvidia-smi failed")"
    fi
    local nvrtc
    nvrtc="$(ls /usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.* /usr/local/cuda/lib64/libnvrtc.so.* 2>/dev/null | head -3 | tr '\n' ' ' || true)"
    {
        echo "# ovl GPU check"
        echo
        echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "- host: $(hostname), $(nproc) CPU cores"
        echo "- GPU: $gpu"
        echo "- NVRTC in the toolkit: ${nvrtc:-none found}"
        echo "- $(sed -n 's/^commit /commit: /p' "$dir/manifest")"
        echo "- parts: $parts"
        echo
    } >"$report"

    local failed=0 kind name rest remaining limit log rc
    if has_part rust; then
    {
        echo "## Tests"
        echo
        echo "| binary | passed | failed | result | did not run (GPU parts) |"
        echo "|---|---|---|---|---|"
    } >>"$report"
    while read -r kind name rest; do
        [ "$kind" = test ] || continue
        remaining=$((TOTAL_SECONDS - ($(date +%s) - started)))
        log="$logs/$name.log"
        if [ "$remaining" -le 10 ]; then
            echo "| $name | - | - | not run: out of time | |" >>"$report"
            failed=1
            continue
        fi
        limit=$((remaining < 120 ? remaining - 5 : 120))
        echo "== $name (limit ${limit}s)" >&2
        rc=0
        # As cargo runs it: from its package's directory, with CARGO_MANIFEST_DIR naming it
        # (golden-file tests resolve their paths through the variable at run time).
        local package="${name%%--*}" package_dir="$root"
        [ "$package" = ovl ] || package_dir="$root/$package"
        # `rest`: the test name filters of the manifest line (word-split on purpose).
        # shellcheck disable=SC2086
        (cd "$package_dir" && CARGO_MANIFEST_DIR="$package_dir" \
            timeout -k 5 "$limit" "$dir/bin/$name" $rest </dev/null >"$log" 2>&1) || rc=$?
        local passed nfailed result skipped
        passed="$(grep -o '[0-9]* passed' "$log" | awk '{s+=$1} END {print s+0}' || true)"
        nfailed="$(grep -o '[0-9]* failed' "$log" | awk '{s+=$1} END {print s+0}' || true)"
        case "$rc" in
            0) result="ok" ;;
            124 | 137) result="TIMED OUT after ${limit}s"; failed=1 ;;
            *) result="FAILED (exit $rc)"; failed=1 ;;
        esac
        skipped="$(grep -ci 'did not run' "$log" || true)"
        echo "| $name | $passed | $nfailed | $result | $skipped |" >>"$report"
        echo "   $result: $passed passed, $nfailed failed" >&2
    done <"$dir/manifest"

    # What failed, and what did not run, in detail.
    {
        echo
        for log in "$logs"/*.log; do
            [ -e "$log" ] || continue
            if grep -q -- '^---- .* stdout ----$\|^failures:$' "$log"; then
                echo "### failures in $(basename "$log" .log)"
                echo
                echo '```'
                sed -n '/^failures:$/,$p' "$log" | head -80
                echo '```'
                echo
            fi
        done
        echo "### GPU parts that did not run"
        echo
        echo '```'
        grep -hi 'did not run' "$logs"/*.log 2>/dev/null | cut -c1-200 | sort | uniq -c | head -40 || true
        echo '```'
        echo
    } >>"$report"

    # The benchmarks and their peers (PyTorch, JAX, where python3 has them with a GPU) in one
    # run, with what is left of the time: scripts/bench-gpu.sh writes the tables.
    remaining=$((TOTAL_SECONDS - ($(date +%s) - started)))
    if [ "${GPU_CHECK_BENCH:-1}" = 0 ]; then
        echo "## Benchmarks: not run (GPU_CHECK_BENCH=0)" >>"$report"
    elif [ "$remaining" -le 30 ]; then
        echo "## Benchmarks: not run, out of time" >>"$report"
    else
        echo "== benchmarks: scripts/bench-gpu.sh --quick (limit $((remaining - 5))s)" >&2
        rc=0
        (cd "$root" && bash scripts/bench-gpu.sh --quick --bin "$dir/bin" --out "$out/bench" \
            --limit "$((remaining - 5))" </dev/null >"$logs/bench-gpu.log" 2>&1) || rc=$?
        {
            echo "## Benchmarks: scripts/bench-gpu.sh --quick (exit $rc)"
            echo
            cat "$out/bench/gpu-report.md" 2>/dev/null || echo "(no report written)"
            echo
            for log in "$out"/bench/*.log; do
                [ -e "$log" ] || continue
                echo "### $(basename "$log" .log)"
                echo
                echo '```'
                tail -60 "$log"
                echo '```'
                echo
            done
        } >>"$report"
    fi
    fi  # rust

    has_part python && { python_tests "$dir" "$root" "$work" "$report" "$logs" || failed=1; }
    has_part pybench && { python_benches "$dir" "$root" "$work" "$report" "$logs" "$out" || true; }

    echo "total: $(($(date +%s) - started)) s" >>"$report"
    [ -n "$linked" ] && rm -f "$linked"
    rm -rf "$work"
    echo "== report: $report" >&2
    cat "$report"
    return "$failed"
}

# The Python package there: the wheel unpacked into WORK/py (an abi3 wheel is a zip; no pip
# needed), pytest from the archive when that Python lacks it. Prints the PYTHONPATH to use.
python_setup() {
    local dir="$1" work="$2" python="${GPU_CHECK_PYTHON:-python3}"
    if [ ! -d "$work/py" ]; then
        mkdir -p "$work/py"
        "$python" -m zipfile -e "$dir"/python/ovl-*-abi3-*.whl "$work/py" >&2
    fi
    if "$python" -c 'import pytest' 2>/dev/null; then
        echo "$work/py"
    else
        echo "$work/py:$dir/python/site"
    fi
}

# Runs `timeout LIMIT` on the rest, its output in LOG, and appends a report section TITLE with
# the exit status and the log's tail. Returns the command's status.
python_step() {
    local title="$1" limit="$2" log="$3" report="$4"
    shift 4
    local rc=0
    echo "== $title (limit ${limit}s)" >&2
    timeout -k 5 "$limit" "$@" </dev/null >"$log" 2>&1 || rc=$?
    local result="ok"
    case "$rc" in
        0) ;;
        124 | 137) result="TIMED OUT after ${limit}s" ;;
        *) result="FAILED (exit $rc)" ;;
    esac
    {
        echo "## $title: $result"
        echo
        echo '```'
        grep -i 'did not run' "$log" | sort | uniq -c | head -20 || true
        tail -40 "$log"
        echo '```'
        echo
    } >>"$report"
    echo "   $result" >&2
    return "$rc"
}

# The package's tests on that Python: its GPU tests first, then the rest (CPU, values and
# errors: the wheel built here imports and works there), each under PY_TEST_SECONDS.
python_tests() {
    local dir="$1" root="$2" work="$3" report="$4" logs="$5"
    local python="${GPU_CHECK_PYTHON:-python3}" path failed=0
    path="$(python_setup "$dir" "$work")" || {
        echo "## Python: the wheel could not be unpacked" >>"$report"
        return 1
    }
    local tests="$root/ovl-py/tests"
    # From $work: the checkout's ovl-py/ovl (without the native module) must not shadow it.
    local run=(env PYTHONPATH="$path" OVL_PY_BUNDLE_DIR="$dir/python/bundles"
        XLA_PYTHON_CLIENT_PREALLOCATE=false "$python" -m pytest -q -rs -s -p no:cacheprovider)
    (cd "$work" && python_step "Python: the package's GPU tests (test_gpu.py)" \
        "$PY_TEST_SECONDS" "$logs/python-gpu.log" "$report" "${run[@]}" "$tests/test_gpu.py") \
        || failed=1
    (cd "$work" && python_step "Python: the package's other tests" "$PY_TEST_SECONDS" \
        "$logs/python-rest.log" "$report" "${run[@]}" "$tests" --ignore="$tests/test_gpu.py" \
        --ignore="$tests/test_torch_distributed.py") || failed=1
    return "$failed"
}

# The Python benchmarks (scripts/bench-python.sh's and bench-python-jax.sh's) on the GPU,
# quick, each under PY_BENCH_SECONDS; their tables go to OUT/python-bench.
python_benches() {
    local dir="$1" root="$2" work="$3" report="$4" logs="$5" out="$6"
    local python="${GPU_CHECK_PYTHON:-python3}" path
    path="$(python_setup "$dir" "$work")" || return 1
    mkdir -p "$out/python-bench"
    if ! "$python" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
        echo "## Python benchmarks: did not run: no GPU for PyTorch ($python)" >>"$report"
        return 0
    fi
    (cd "$work" && python_step "Python benchmark: PyTorch on CUDA (quick)" "$PY_BENCH_SECONDS" \
        "$logs/python-bench-torch.log" "$report" env PYTHONPATH="$path:$root/benches" \
        "$python" "$root/benches/python_torch.py" --bundles "$dir/python/bench-bundles" \
        --out "$out/python-bench/torch-cuda.json" --quick --device cuda) || true
    (cd "$work" && python_step "Python benchmark: JAX on the GPU (quick)" "$PY_BENCH_SECONDS" \
        "$logs/python-bench-jax.log" "$report" env PYTHONPATH="$path:$root/benches" \
        XLA_PYTHON_CLIENT_PREALLOCATE=false "$python" "$root/benches/python_jax.py" \
        --bundles "$dir/python/bench-bundles" --out "$out/python-bench" --quick --device gpu) \
        || true
}

case "${1:-}" in
    pack) shift; pack "$@" ;;
    run) shift; run "$@" ;;
    *) usage ;;
esac
