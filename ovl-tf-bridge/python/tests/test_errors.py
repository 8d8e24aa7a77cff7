"""Bad input is a TensorFlow (or Python) error with a clear message, never a crash."""

import json

import pytest
import tensorflow as tf

import ovl_tf


def test_wrong_dtype_in_the_wrapper(bundle):
    f = bundle("scale_add")
    with pytest.raises(TypeError, match=r"input 0 \(`x`\) has dtype float64.*exported for float32"):
        f(tf.zeros((4, 5), tf.float64))


def test_wrong_dtype_in_the_kernel(bundle):
    f = bundle("scale_add")
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"input 0 \(`x`\) has dtype int32, but program `scale_add` was exported for float32",
    ):
        ovl_tf.dynamic_lib([tf.zeros((4, 5), tf.int32)], f.program, [tf.float32], [[4, 5]])


def test_unsupported_dtype_in_the_kernel(bundle):
    f = bundle("scale_add")
    with pytest.raises(tf.errors.InvalidArgumentError, match="not supported by ovl"):
        ovl_tf.dynamic_lib([tf.zeros((4, 5), tf.complex64)], f.program, [tf.float32], [[4, 5]])


def test_a_half_tensor_where_float32_is_expected_names_both(bundle):
    f = bundle("scale_add")
    for half in (tf.float16, tf.bfloat16):
        with pytest.raises(
            tf.errors.InvalidArgumentError,
            match=rf"input 0 \(`x`\) has dtype {half.name}, but program `scale_add` was exported for float32",
        ):
            ovl_tf.dynamic_lib([tf.zeros((4, 5), half)], f.program, [tf.float32], [[4, 5]])


def test_wrong_shape_in_the_wrapper(bundle):
    f = bundle("scale_add")
    with pytest.raises(ValueError, match=r"input 0 \(`x`\) has shape \(4, 6\)"):
        f(tf.zeros((4, 6)))


def test_wrong_shape_in_the_kernel_eager(bundle):
    f = bundle("scale_add")
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"input 0 \(`x`\) is float32\[4, 6\], but the program was exported for "
        r"float32\[4, 5\]",
    ):
        ovl_tf.dynamic_lib([tf.zeros((4, 6))], f.program, [tf.float32], [[4, 5]])


def test_wrong_shape_at_run_time_inside_tf_function(bundle):
    f = bundle("scale_add")
    g = tf.function(f.__call__, input_signature=[tf.TensorSpec([None, 5], tf.float32)])
    g(tf.zeros((4, 5)))  # fine
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"is float32\[3, 5\]"):
        g(tf.zeros((3, 5)))


def test_wrong_number_of_inputs(bundle):
    f = bundle("min_max")
    with pytest.raises(TypeError, match=r"takes 2 inputs \(a, b\), 1 given"):
        f(tf.zeros(7))
    with pytest.raises(tf.errors.InvalidArgumentError, match="1 inputs given, program `min_max` takes 2"):
        ovl_tf.dynamic_lib([tf.zeros(7)], f.program, [tf.float32] * 2, [[7], [7]])


def test_output_attributes_that_do_not_fit_the_program(bundle):
    f = bundle("scale_add")
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"the attributes declare outputs \[\"float32\[4, 6\]\"\], but program `scale_add` "
        r"makes \[\"float32\[4, 5\]\"\]",
    ):
        ovl_tf.dynamic_lib([tf.zeros((4, 5))], f.program, [tf.float32], [[4, 6]])


@pytest.mark.parametrize("damage", ["garbage", "truncated", "bit flip"])
def test_corrupt_program(bundle, damage):
    program = bundle("fused_chain").program
    bad = {
        "garbage": b"\xff\xfe not a program",
        "truncated": program[: len(program) // 2],
        "bit flip": program[:40] + bytes([program[40] ^ 0x5A]) + program[41:],
    }[damage]
    x = tf.zeros(64)
    # The digest is checked before decoding: every damage is refused, a flipped bit included.
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"DynamicLib `.*`: the `program` attribute: the program was modified or corrupted",
    ):
        ovl_tf.dynamic_lib([x, x], bad, [tf.float32], [[64]])


def test_bundle_that_is_not_a_bundle(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="not an ovl TensorFlow bundle"):
        ovl_tf.load(p)
    p.write_text("{ not json")
    with pytest.raises(ValueError, match="not JSON"):
        ovl_tf.load(p)


def test_call_errors_are_typed_consistently(bundle):
    """TypeError: the wrong number of arguments or the wrong dtype (or a value that does not
    convert); ValueError: the right dtype with a static shape that does not fit. The same inside
    tf.function (raised while tracing)."""
    import numpy as np

    f = bundle("scale_add")
    good = tf.zeros((4, 5))
    cases = [
        (TypeError, r"takes 1 inputs \(x\), 0 given", ()),
        (TypeError, r"takes 1 inputs \(x\), 2 given", (good, good)),
        (TypeError, r"input 0 \(`x`\) has dtype int32, the program was exported for float32",
         (tf.zeros((4, 5), tf.int32),)),
        (TypeError, r"input 0 \(`x`\) has dtype float64", (np.zeros((4, 5)),)),
        (TypeError, r"input 0 \(`x`\): str value cannot be converted to a float32 tensor",
         ("text",)),
        (TypeError, r"input 0 \(`x`\): list value cannot be converted to a float32 tensor",
         ([[1.0, 2.0], [3.0]],)),
        (ValueError, r"input 0 \(`x`\) has shape \(4, 6\), the program was exported for \(4, 5\)",
         (tf.zeros((4, 6)),)),
        (ValueError, r"input 0 \(`x`\) has shape \(2,\)", ([1.0, 2.0],)),
    ]
    for error, message, args in cases:
        with pytest.raises(error, match=r"^ovl program `scale_add`.*" + message):
            f(*args)
    for error, message, args in cases:
        if all(isinstance(a, tf.Tensor) for a in args):
            with pytest.raises(error, match=message):
                tf.function(lambda *xs: f(*xs))(*args)
    assert f(good).shape == (4, 5)


def test_a_nested_gradient_tape_names_the_program_whose_gradient_has_none(bundle):
    f = bundle("square")
    x = tf.Variable([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            y = tf.reduce_sum(f(x))
        g = inner.gradient(y, x)
        s = tf.reduce_sum(g * g)
    assert g.numpy().tolist() == [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    with pytest.raises(LookupError) as e:
        outer.gradient(s, x)
    assert str(e.value) == (
        "DynamicLib: the gradient program of `square` has no gradient; ovl exports first "
        "derivatives only, so a nested tf.GradientTape cannot differentiate `square` twice"
    )


def test_a_program_without_gradient_is_named(bundle):
    f = bundle("square_no_grad")
    x = tf.Variable(tf.ones(6))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(f(x))
    with pytest.raises(LookupError) as e:
        tape.gradient(loss, x)
    assert str(e.value) == (
        "DynamicLib: ovl program `square` has no gradient; export it with `TfExport::gradient` "
        "to differentiate through it"
    )


def test_compiling_prints_no_build_tool_output(bundle_dir, tmp_path):
    """cc's `cargo:warning=` lines (here: a compiler whose family cc cannot detect) must not
    reach the user's process; run in a fresh process with a fresh operator cache, so that the
    bridge finds the compiler and compiles."""
    import os
    import shutil
    import subprocess
    import sys

    real = shutil.which(os.environ.get("CXX", "c++"))
    assert real, "a C++ compiler is needed to compile operators"
    wrapper = tmp_path / "c++"
    wrapper.write_text(
        "#!/bin/sh\n"
        "# Empty preprocessor output: the build tool cannot tell which compiler this is.\n"
        'for a in "$@"; do [ "$a" = "-E" ] && exit 0; done\n'
        f'exec "{real}" "$@"\n'
    )
    wrapper.chmod(0o755)
    script = (
        "import sys, tensorflow as tf, ovl_tf\n"
        f"f = ovl_tf.load({str(bundle_dir / 'add_one.json')!r})\n"
        "print('result', f(tf.constant([1.0, 2.0, 3.0, 4.0])).numpy().tolist())\n"
    )
    env = dict(os.environ, CXX=str(wrapper), OVL_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert "result [2.0, 3.0, 4.0, 5.0]" in done.stdout
    assert list((tmp_path / "cache").rglob("*.so")), "the operator was compiled"
    for stream in (done.stdout, done.stderr):
        assert "cargo:" not in stream, stream
