"""``ovl.jax`` with the batch split across 4 CPU devices (``jax.sharding``): in a subprocess, as
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` must be set before JAX starts.

The child (``jax_sharding_child.py``) checks values and gradients of ``ovl.jax.shard`` (the
program under ``jax.shard_map``, each device running it on its rows) against ``jax.numpy``,
that the outputs stay split, that ``jit`` of the plain op on split inputs is right too, and
trains a small model (a few steps of gradient descent on a shared weight, the batch split
over the devices) to the same weights as the ``jax.numpy`` version."""

import os
import subprocess
import sys
from pathlib import Path


def test_batch_split_across_four_cpu_devices(bundle_dir):
    env = dict(os.environ)
    flags = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    env["XLA_FLAGS"] = flags.strip()
    env["JAX_PLATFORMS"] = "cpu"
    child = Path(__file__).with_name("jax_sharding_child.py")
    done = subprocess.run(
        [sys.executable, str(child), str(bundle_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"child failed:\n{done.stdout}\n{done.stderr}"
    assert "sharding checks passed on 4 devices" in done.stdout, done.stdout
