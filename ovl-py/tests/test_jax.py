"""``ovl.jax.op``: ovl programs as XLA custom calls (the FFI handler of ``ovl._native``), checked
against the same computations in ``jax.numpy``: eagerly, under ``jit``, ``grad`` and ``vmap``,
and the errors. Sharding across 4 CPU devices: ``test_jax_sharding.py``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ovl
import ovl.jax as oj

RNG = np.random.default_rng(5)


def f32(*shape):
    return jnp.asarray(RNG.standard_normal(shape).astype(np.float32))


def layernorm(x, eps=1e-5):
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps)


@pytest.fixture(scope="module")
def op(bundle):
    made = {}

    def make(name, **kw):
        key = (name, tuple(sorted(kw.items())))
        if key not in made:
            made[key] = oj.op(bundle(name), **kw)
        return made[key]

    return make


def close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def test_eager_and_jit_values(op):
    f = op("scale_add")
    x, b = f32(4, 5), f32(4, 5)
    y = f(x, b)
    assert isinstance(y, jax.Array) and y.shape == (4, 5) and y.dtype == jnp.float32
    close(y, 2 * x + b)
    close(jax.jit(f)(x, b), 2 * x + b)
    # Inside a larger jitted function, with other ops around it.
    g = jax.jit(lambda x, b: jnp.tanh(f(x * 3, b)) + 1)
    close(g(x, b), jnp.tanh(2 * (x * 3) + b) + 1)
    assert "ovl_program" in jax.jit(f).lower(x, b).as_text()


def test_several_outputs_and_other_dtypes(op):
    lo, hi = jax.jit(op("min_max"))(f32(7), f32(7))
    a, b = f32(7), f32(7)
    lo, hi = jax.jit(op("min_max"))(a, b)
    close(lo, jnp.minimum(a, b))
    close(hi, jnp.maximum(a, b))
    ia = jnp.arange(9, dtype=jnp.int32) - 4
    ib = jnp.arange(9, dtype=jnp.int32) * 3
    np.testing.assert_array_equal(jax.jit(op("mul_add_i32"))(ia, ib), ia * ib + 7)
    m = jnp.array([True, False, True, True, False, False])
    a = f32(6)
    neg, flipped = jax.jit(op("masked_negate"))(m, a)
    close(neg, jnp.where(m, a, -a))
    np.testing.assert_array_equal(flipped, ~m)
    sums, soft = jax.jit(op("row_stats"))(x := f32(3, 8))
    close(sums, x.sum(axis=1), rtol=1e-5, atol=1e-5)
    close(soft, jax.nn.softmax(x, axis=1), rtol=1e-5, atol=1e-6)


def test_polymorphic_batch_bound_at_trace_time(op):
    f = op("scale_rows_grad")
    fj = jax.jit(f)
    for batch in (1, 3, 17):
        x, s = f32(batch, 5), f32(batch)
        y = fj(x, s)
        assert y.shape == (batch, 5)
        close(y, x * s[:, None])


def test_grad_against_jax_grad(op):
    f = op("scale_rows_grad")
    x, s, w = f32(6, 5), f32(6), f32(6, 5)

    def loss(fn):
        return lambda x, s: jnp.sum(jnp.sin(fn(x, s)) * w)

    got = jax.jit(jax.grad(loss(f), argnums=(0, 1)))(x, s)
    want = jax.grad(loss(lambda x, s: x * s[:, None]), argnums=(0, 1))(x, s)
    close(got[0], want[0], rtol=1e-5, atol=1e-5)
    close(got[1], want[1], rtol=1e-5, atol=1e-5)
    # value_and_grad, and the layer norm's derived gradient.
    ln = op("layernorm_grad")
    x, w = f32(6, 33), f32(6, 33)
    val, g = jax.value_and_grad(lambda x: jnp.sum(ln(x) * w))(x)
    want_val, want_g = jax.value_and_grad(lambda x: jnp.sum(layernorm(x) * w))(x)
    close(val, want_val, rtol=1e-4, atol=1e-4)
    close(g, want_g, rtol=1e-3, atol=2e-4)


def test_grad_with_a_shared_input(op):
    f = op("scale_cols_grad")
    x, w, u = f32(7, 5), f32(5), f32(7, 5)
    got = jax.jit(jax.grad(lambda x, w: jnp.sum(f(x, w) * u), argnums=(0, 1)))(x, w)
    want = jax.grad(lambda x, w: jnp.sum(x * w * u), argnums=(0, 1))(x, w)
    close(got[0], want[0])
    close(got[1], want[1], rtol=1e-5, atol=1e-5)


def test_a_program_without_gradient_is_a_type_error(op):
    f = op("scale_add")
    with pytest.raises(TypeError, match="`scale_add` has no gradient program"):
        jax.grad(lambda x: f(x, x).sum())(f32(4, 5))


def test_vmap_folds_into_the_batch(op):
    f = op("scale_rows_grad")
    assert f.vmap == "fold"
    xs, ss = f32(3, 4, 5), f32(3, 4)
    want = xs * ss[..., None]
    vf = jax.jit(jax.vmap(f))
    close(vf(xs, ss), want)
    # One custom call over the 12 rows: no loop.
    text = vf.lower(xs, ss).as_text()
    assert text.count("ovl_program") == 1 and "while" not in text
    # An unmapped input that carries the batch is broadcast to every example.
    s = f32(4)
    close(jax.vmap(f, in_axes=(0, None))(xs, s), xs * s[None, :, None])
    # Nested vmap, and the mapped axis elsewhere.
    xss = f32(2, 3, 4, 5)
    sss = f32(2, 3, 4)
    close(jax.vmap(jax.vmap(f))(xss, sss), xss * sss[..., None])
    close(jax.vmap(f, in_axes=(1, 1))(xs, ss), jnp.swapaxes(xs, 0, 1) * ss.T[..., None])
    # Empty: no examples, or examples of no rows.
    assert jax.vmap(f)(f32(0, 4, 5), f32(0, 4)).shape == (0, 4, 5)
    assert jax.vmap(f)(f32(3, 0, 5), f32(3, 0)).shape == (3, 0, 5)


def test_vmap_with_a_shared_input_and_ovl_batching(op):
    f = op("scale_cols_grad")
    xs, w = f32(3, 4, 5), f32(5)
    close(jax.jit(jax.vmap(f, in_axes=(0, None)))(xs, w), xs * w)
    # w mapped: it has no batch dimension to fold into, so ovl batches the program over the
    # mapped axis (one call, no loop).
    ws = f32(3, 5)
    vf = jax.jit(jax.vmap(f))
    close(vf(xs, ws), xs * ws[:, None, :])
    text = vf.lower(xs, ws).as_text()
    assert text.count("ovl_program") == 1 and "while" not in text
    # A program with fixed shapes is batched by ovl too, shared inputs staying shared.
    g = op("scale_add")
    assert g.vmap == "batch"
    a, b = f32(3, 4, 5), f32(3, 4, 5)
    vg = jax.jit(jax.vmap(g))
    close(vg(a, b), 2 * a + b)
    assert "while" not in vg.lower(a, b).as_text()
    close(jax.vmap(g, in_axes=(0, None))(a, b[0]), 2 * a + b[0])
    aa, bb = f32(2, 3, 4, 5), f32(2, 3, 4, 5)
    close(jax.vmap(jax.vmap(g))(aa, bb), 2 * aa + bb)
    # Several outputs, an input shared.
    xs7, c = f32(3, 7), f32(7)
    lo, hi = jax.vmap(op("min_max"), in_axes=(0, None))(xs7, c)
    close(lo, jnp.minimum(xs7, c))
    close(hi, jnp.maximum(xs7, c))


def test_vmap_sequential_runs_once_per_example(bundle):
    f = oj.op(bundle("scale_add"), vmap="sequential")
    a, b = f32(3, 4, 5), f32(3, 4, 5)
    vf = jax.jit(jax.vmap(f))
    close(vf(a, b), 2 * a + b)
    assert "while" in vf.lower(a, b).as_text()


def test_vmap_of_grad_of_a_fixed_shape_program(op):
    ln = op("layernorm_grad")
    xs, ws = f32(3, 6, 33), f32(3, 6, 33)
    got = jax.jit(jax.vmap(jax.grad(lambda x, w: jnp.sum(ln(x) * w))))(xs, ws)
    want = jax.vmap(jax.grad(lambda x, w: jnp.sum(layernorm(x) * w)))(xs, ws)
    close(got, want, rtol=1e-3, atol=2e-4)
    # And grad of a vmapped call.
    got = jax.grad(lambda x: jnp.sum(jax.vmap(ln)(x) * ws))(xs)
    want = jax.grad(lambda x: jnp.sum(jax.vmap(layernorm)(x) * ws))(xs)
    close(got, want, rtol=1e-3, atol=2e-4)


def test_vmap_and_grad_compose(op):
    f = op("scale_rows_grad")
    xs, ss = f32(3, 4, 5), f32(3, 4)

    def loss(fn):
        return lambda x, s: jnp.sum(fn(x, s) ** 2)

    ref = lambda x, s: x * s[:, None]  # noqa: E731
    got = jax.jit(jax.vmap(jax.grad(loss(f), argnums=(0, 1))))(xs, ss)
    want = jax.vmap(jax.grad(loss(ref), argnums=(0, 1)))(xs, ss)
    close(got[0], want[0], rtol=1e-5, atol=1e-5)
    close(got[1], want[1], rtol=1e-5, atol=1e-5)
    got = jax.grad(lambda x, s: jnp.sum(jax.vmap(f)(x, s) ** 2))(xs, ss)
    want = jax.grad(lambda x, s: jnp.sum(jax.vmap(ref)(x, s) ** 2))(xs, ss)
    close(got, want, rtol=1e-5, atol=1e-5)


def test_fold_refused_where_it_cannot_apply(bundle):
    with pytest.raises(ValueError, match="cannot fold"):
        oj.op(bundle("scale_add"), vmap="fold")
    with pytest.raises(ValueError, match="must be 'fold', 'batch' or 'sequential'"):
        oj.op(bundle("scale_add"), vmap="loop")
    # A fold-capable program may still ask for one call per example.
    f = oj.op(bundle("scale_rows_grad"), vmap="sequential")
    xs, ss = f32(3, 4, 5), f32(3, 4)
    close(jax.vmap(f)(xs, ss), xs * ss[..., None])


@pytest.mark.parametrize("jit", [False, True])
def test_bad_inputs_name_the_input(op, jit):
    f = op("scale_rows_grad")
    call = jax.jit(f) if jit else f
    count = r"takes 2 inputs \(x: float32\[\?, 5\], s: float32\[\?\]\), 1 given"
    with pytest.raises(TypeError, match=count):
        call(f32(2, 5))
    dtype = r"input 1 \(`s`\) is int32\[2\], the program takes float32\[\?\]"
    with pytest.raises(TypeError, match=dtype):
        call(f32(2, 5), jnp.zeros(2, jnp.int32))
    with pytest.raises(ValueError, match=r"input 1 \(`s`\).*batch = 3"):
        call(f32(2, 5), f32(3))
    with pytest.raises(ValueError, match=r"input 0 \(`x`\)"):
        call(f32(2, 4), f32(2))
    g = op("scale_add")
    with pytest.raises(ValueError, match=r"input 1 \(`b`\)"):
        (jax.jit(g) if jit else g)(f32(4, 5), f32(5, 4))
    # The next call works.
    close(call(f32(2, 5) * 0 + 1, jnp.ones(2)), jnp.ones((2, 5)))


def test_run_time_failure_is_an_xla_error_and_the_next_call_works(op):
    f = jax.jit(op("first_negative"))
    x = jnp.asarray(np.array([3, 1, -2, 5, 4, 0, 1, 2], np.float32))
    close(f(x), [-2.0])
    # JAX raises XLA's error as `jax.errors.JaxRuntimeError` (a RuntimeError) on a jitted
    # function's first call and as a ValueError from its fast path afterwards (jax 0.10).
    for _ in range(2):
        with pytest.raises((RuntimeError, ValueError), match="ovl program `first_negative`"):
            jax.block_until_ready(f(jnp.ones(8)))
        close(f(x), [-2.0])
    g = jax.jit(lambda x: op("first_negative")(x) * 1)  # a new function: a first call
    with pytest.raises(RuntimeError, match=r"index out of bounds.*index 8 on axis 0"):
        jax.block_until_ready(g(jnp.ones(8)))


def test_op_takes_programs_only():
    with pytest.raises(TypeError, match="takes an ovl.Program"):
        oj.op("scale_add.json")


def test_float64_with_x64_enabled(op):
    f = op("affine_f64")
    with jax.enable_x64(True):
        x = jnp.arange(9, dtype=jnp.float64) / 3
        y = jax.jit(f)(x)
        assert y.dtype == jnp.float64
        np.testing.assert_array_equal(np.asarray(y), np.asarray(x) * 0.5 - 3.0)
    # Without x64, JAX makes float32 arrays: the dtype check names the input.
    with pytest.raises(TypeError, match=r"input 0 \(`x`\) is float32\[9\]"):
        f(jnp.arange(9, dtype=jnp.float32))


def test_grad_with_a_bool_input(op):
    # The bool input gets a float0 cotangent (JAX's zero for non-float inputs); the float one
    # the gradient program's.
    f = op("masked_scale_grad")
    m = jnp.array([True, False, False, True, True, False])
    x, w = f32(6), f32(6)
    close(jax.jit(f)(m, x), jnp.where(m, 2 * x, x))
    got = jax.jit(jax.grad(lambda m, x: jnp.sum(f(m, x) * w), argnums=1))(m, x)
    close(got, jnp.where(m, 2 * w, w))
    _, vjp = jax.vjp(f, m, x)
    dm, dx = vjp(w)
    assert dm.dtype == jax.dtypes.float0 and dm.shape == (6,)
    close(dx, jnp.where(m, 2 * w, w))


def test_the_handler_checks_what_xla_hands_it(op):
    # The custom call made by hand, past ovl.jax's trace-time checks: the handler refuses
    # with an XLA error naming the problem, and the next call works.
    f = op("add_one")
    x = jnp.arange(16, dtype=jnp.float32)

    def raw(*args, out=jax.ShapeDtypeStruct((16,), jnp.float32), **attrs):
        return jax.ffi.ffi_call(oj.TARGET, out)(*args, **attrs)

    errors = (RuntimeError, ValueError)
    with pytest.raises(errors, match="no ovl program is registered as 1000000"):
        jax.block_until_ready(raw(x, program=np.int64(1_000_000)))
    with pytest.raises(errors, match="no int64 `program` attribute"):
        jax.block_until_ready(raw(x))
    with pytest.raises(errors, match=r"input 0 \(`x`\) is an XLA buffer of dtype 4 and rank 1"):
        jax.block_until_ready(raw(jnp.arange(16, dtype=jnp.int32), program=np.int64(f._id)))
    with pytest.raises(errors, match=r"input 0 \(`x`\) has shape \[8\]"):
        jax.block_until_ready(raw(x[:8], program=np.int64(f._id)))
    with pytest.raises(errors, match=r"output 0 is an XLA buffer of dtype 11 and shape \[8\]"):
        out = jax.ShapeDtypeStruct((8,), jnp.float32)
        jax.block_until_ready(raw(x, out=out, program=np.int64(f._id)))
    counts = r"has 1 input\(s\) and 1 output\(s\); the custom call has 2 operand\(s\)"
    with pytest.raises(errors, match=counts):
        jax.block_until_ready(raw(x, x, program=np.int64(f._id)))
    close(raw(x, program=np.int64(f._id)), x + 1)


def test_calls_from_several_threads(op):
    # Each thread binds its own batch sizes (the handler keeps one binding per thread).
    from concurrent.futures import ThreadPoolExecutor

    f = jax.jit(op("scale_rows_grad"))

    def work(k):
        for i in range(20):
            batch = 1 + (k * 7 + i) % 9
            x, s = jnp.full((batch, 5), float(k)), jnp.full((batch,), float(i))
            y = f(x, s)
            np.testing.assert_array_equal(np.asarray(y), np.full((batch, 5), float(k * i)))
        return k

    with ThreadPoolExecutor(4) as pool:
        assert sorted(pool.map(work, range(4))) == [0, 1, 2, 3]
