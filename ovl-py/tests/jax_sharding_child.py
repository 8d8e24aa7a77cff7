"""Run by ``test_jax_sharding.py`` with 4 CPU devices:
``python jax_sharding_child.py BUNDLE_DIR``."""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import ovl
import ovl.jax as oj


def close(a, b, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def main(bundles: Path) -> None:
    devices = jax.devices()
    assert len(devices) == 4 and {d.platform for d in devices} == {"cpu"}, devices
    mesh = Mesh(np.array(devices), ("batch",))
    rows = NamedSharding(mesh, P("batch"))
    rng = np.random.default_rng(3)

    # Rows scaled by a factor each (every input and the output split).
    f = oj.op(ovl.load(bundles / "scale_rows_grad.json"))
    x = jax.device_put(rng.standard_normal((16, 5)).astype(np.float32), rows)
    s = jax.device_put(rng.standard_normal(16).astype(np.float32), rows)
    sf = jax.jit(oj.shard(f, mesh, "batch"))
    y = sf(x, s)
    close(y, x * s[:, None])
    assert y.sharding.spec == P("batch"), y.sharding
    assert {sh.data.shape for sh in y.addressable_shards} == {(4, 5)}
    # Each device runs its 4 rows: the custom call sees f32[4,5].
    text = sf.lower(x, s).compile().as_text()
    assert "f32[4,5]" in text and "ovl_program" in text, text[:2000]
    gx, gs = jax.jit(jax.grad(lambda x, s: jnp.sum(sf(x, s) ** 2), argnums=(0, 1)))(x, s)
    wx, ws = jax.grad(lambda x, s: jnp.sum((x * s[:, None]) ** 2), argnums=(0, 1))(x, s)
    close(gx, wx)
    close(gs, ws)

    # Plain jit on split inputs: XLA gathers them for the custom call; same values.
    close(jax.jit(f)(x, s), x * s[:, None])

    # Training: a weight shared by every row (replicated), the batch split; its gradient is
    # summed over the devices by shard_map.
    g = oj.op(ovl.load(bundles / "scale_cols_grad.json"))
    sg = oj.shard(g, mesh, "batch")
    xs = jax.device_put(rng.standard_normal((32, 5)).astype(np.float32), rows)
    target = jax.device_put((np.asarray(xs) * np.arange(1, 6, dtype=np.float32)), rows)

    def train(fn, w):
        loss = lambda w: jnp.mean((fn(xs, w) - target) ** 2)  # noqa: E731
        step = jax.jit(lambda w: w - 0.1 * jax.grad(loss)(w))
        for _ in range(25):
            w = step(w)
        return w, loss(w)

    w0 = jnp.zeros(5, jnp.float32)
    w_ovl, loss_ovl = train(sg, w0)
    w_jnp, loss_jnp = train(lambda x, w: x * w, w0)
    close(w_ovl, w_jnp, rtol=1e-4, atol=1e-5)
    assert float(loss_ovl) < 0.5 * float(jnp.mean(target**2)), (loss_ovl, w_ovl)
    print("sharding checks passed on 4 devices")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
