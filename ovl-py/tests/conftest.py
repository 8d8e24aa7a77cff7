"""Fixtures of the tests of the package `ovl`: the bundles the Rust example `py_bundles`
writes (`$OVL_PY_BUNDLE_DIR`, else made here with cargo).

The tests import the installed package (`pip install ./ovl-py`; scripts/test.sh installs the
wheel into a fresh virtual environment): the checkout's `ovl-py/ovl` lacks the native module."""

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def pytest_configure(config):
    # Keep the operators the tests compile out of the user's cache.
    os.environ.setdefault("OVL_CACHE_DIR", str(REPO / "target" / "ovl-test-cache"))


@pytest.fixture(scope="session")
def bundle_dir(tmp_path_factory) -> Path:
    given = os.environ.get("OVL_PY_BUNDLE_DIR")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("bundles")
    subprocess.run(
        ["cargo", "run", "--release", "-p", "ovl-py", "--example", "py_bundles", "--", str(out)],
        cwd=REPO,
        check=True,
    )
    return out


@pytest.fixture(scope="session")
def bundle(bundle_dir):
    """`bundle("scale_add")`: the program of that bundle, loaded once per session."""
    import ovl

    loaded = {}

    def load(name):
        if name not in loaded:
            loaded[name] = ovl.load(bundle_dir / f"{name}.json")
        return loaded[name]

    return load


class Legacy:
    """A DLPack producer from before DLPack 1.0: `__dlpack__` takes no `max_version` and
    returns a legacy `dltensor` capsule."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class Capsule:
    """An object whose `__dlpack__` returns a given capsule (or anything else)."""

    def __init__(self, capsule, device=(1, 0)):
        self.capsule = capsule
        self.device = device

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return self.device
