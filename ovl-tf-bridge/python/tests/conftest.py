"""Fixtures of the ovl_tf tests: the bridge library and the bundles the Rust example
`make_bundles` exports (built here with cargo unless the environment names them)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PACKAGE_DIR = str(REPO / "ovl-tf-bridge" / "python")
sys.path.insert(0, PACKAGE_DIR)
# The fresh Python processes some tests start import this checkout's ovl_tf too.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in [PACKAGE_DIR, os.environ.get("PYTHONPATH", "")] if p
)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _cargo(*args):
    subprocess.run(["cargo", *args], cwd=REPO, check=True)


def pytest_configure(config):
    # The library must be known before ovl_tf loads it.
    if not os.environ.get("OVL_TF_LIBRARY"):
        _cargo("build", "--release", "-p", "ovl-tf-bridge")
        os.environ["OVL_TF_LIBRARY"] = str(REPO / "target" / "release" / "libovl_tf_bridge.so")
    # Keep the operators the tests compile out of the user's cache.
    os.environ.setdefault("OVL_CACHE_DIR", str(REPO / "target" / "ovl-test-cache"))


@pytest.fixture(scope="session")
def bundle_dir(tmp_path_factory) -> Path:
    given = os.environ.get("OVL_TF_BUNDLE_DIR")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("bundles")
    _cargo("run", "--release", "-p", "ovl-tf-bridge", "--example", "make_bundles", "--", str(out))
    return out


@pytest.fixture(scope="session")
def bundle(bundle_dir):
    import ovl_tf

    def load(name):
        return ovl_tf.load(bundle_dir / f"{name}.json")

    return load
