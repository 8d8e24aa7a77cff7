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
        ovl_tf.dynamic_lib([tf.zeros((4, 5), tf.float16)], f.program, [tf.float32], [[4, 5]])


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
