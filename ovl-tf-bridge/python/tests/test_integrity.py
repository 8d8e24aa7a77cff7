"""Tamper evidence: a bundle's programs and the op's `program` and `gradient` attributes carry a
SHA-256 digest, checked before anything decodes them, so that any edit is a clear error instead
of another program (issue 17: flipping bits of a program turned a MUL into a DIV)."""

import base64
import json

import pytest
import tensorflow as tf

import ovl_tf


def _flip(data: bytes, bit: int) -> bytes:
    b = bytearray(data)
    b[bit // 8] ^= 1 << (bit % 8)
    return bytes(b)


def _write_with(tmp_path, bundle_dir, name, field, data):
    bundle = json.loads((bundle_dir / f"{name}.json").read_text())
    bundle[field] = base64.b64encode(data).decode()
    path = tmp_path / f"{name}-edited.json"
    path.write_text(json.dumps(bundle))
    return path


def test_every_bit_flip_of_a_bundle_program_is_a_clear_error(bundle_dir, tmp_path):
    bundle = json.loads((bundle_dir / "add_one.json").read_text())
    program = base64.b64decode(bundle["program"])
    assert program.startswith(b"ovl.ir.Program sha256 v1\n")
    path = tmp_path / "add_one-edited.json"
    for bit in range(len(program) * 8):
        bundle["program"] = base64.b64encode(_flip(program, bit)).decode()
        path.write_text(json.dumps(bundle))
        with pytest.raises(ovl_tf.BundleError) as e:
            ovl_tf.load(path)
        assert str(e.value).startswith(
            f'bundle "{path}": the program was modified or corrupted: '
        ), (bit, str(e.value))
        assert "export it again" in str(e.value)


def test_bit_flips_of_a_gradient_program_are_clear_errors(bundle_dir, tmp_path):
    gradient = base64.b64decode(json.loads((bundle_dir / "square.json").read_text())["gradient"])
    for bit in range(0, len(gradient) * 8, 7):
        path = _write_with(tmp_path, bundle_dir, "square", "gradient", _flip(gradient, bit))
        with pytest.raises(
            ovl_tf.BundleError,
            match=r"the gradient program was modified or corrupted: .*export it again",
        ):
            ovl_tf.load(path)


def test_the_kernel_refuses_a_modified_program_attribute(bundle):
    f = bundle("add_one")
    x = tf.zeros(4)
    # Header, digest and protobuf bytes: every part is covered by the check.
    for bit in list(range(0, len(f.program) * 8, 37)) + [len(f.program) * 8 - 1]:
        with pytest.raises(
            tf.errors.InvalidArgumentError,
            match=r"DynamicLib `.*`: the `program` attribute: the program was modified or "
            r"corrupted",
        ):
            ovl_tf.dynamic_lib([x], _flip(f.program, bit), [tf.float32], [[4]])
    # Unmodified, it runs.
    assert ovl_tf.dynamic_lib([x], f.program, [tf.float32], [[4]])[0].shape == (4,)


def test_the_kernel_refuses_a_modified_gradient_attribute(bundle):
    f = bundle("square")
    x = tf.ones(6)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"the `gradient` attribute: the program was modified or corrupted: its SHA-256",
    ):
        ovl_tf.dynamic_lib(
            [x], f.program, [tf.float32], [[6]], gradient=_flip(f.gradient, len(f.gradient) * 4)
        )
