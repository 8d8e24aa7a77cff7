"""Every bad bundle file is an `ovl_tf.BundleError` (a ValueError) whose message names the file
and says what is wrong; a file that cannot be read is an OSError."""

import json
import re

import pytest

import ovl_tf


def _good(bundle_dir) -> dict:
    return json.loads((bundle_dir / "square.json").read_text())


def _load_text(tmp_path, text, name="bad.json"):
    path = tmp_path / name
    path.write_text(text) if isinstance(text, str) else path.write_bytes(text)
    return path


def _expect(path, message):
    with pytest.raises(ovl_tf.BundleError) as e:
        ovl_tf.load(path)
    assert isinstance(e.value, ValueError)
    text = str(e.value)
    assert text.startswith(f'bundle "{path}": '), text
    assert re.search(message, text), text
    return text


def test_binary_bytes(tmp_path):
    path = _load_text(tmp_path, bytes([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0xFF]))
    _expect(
        path,
        r"not text \(byte 0 is 0x89, invalid in UTF-8; a binary file\?\): it is not an ovl "
        r"TensorFlow bundle",
    )


def test_not_json(tmp_path):
    _expect(_load_text(tmp_path, "{ not json"), r"not JSON \(.*\): it is not an ovl TensorFlow")
    _expect(_load_text(tmp_path, ""), r"not JSON")
    # Valid UTF-8 but binary: NUL bytes.
    _expect(_load_text(tmp_path, b"\x00\x01\x02"), r"not JSON")


@pytest.mark.parametrize(
    "value, kind",
    [("[1, 2, 3]", "an array"), ("42", "a number"), ('"square"', "a string"), ("null", "null")],
)
def test_json_of_the_wrong_type(tmp_path, value, kind):
    _expect(
        _load_text(tmp_path, value),
        rf"the file holds {kind}, not an object: it is not an ovl TensorFlow bundle",
    )


def test_another_format_or_version(tmp_path, bundle_dir):
    _expect(
        _load_text(tmp_path, json.dumps({"format": "something else"})),
        r"it is not an ovl TensorFlow bundle \(its \"format\" is 'something else'",
    )
    old = dict(_good(bundle_dir), version=1)
    _expect(
        _load_text(tmp_path, json.dumps(old)),
        r"it has bundle version 1, this ovl_tf reads version 2: export it again",
    )


@pytest.mark.parametrize("field", ["name", "inputs", "outputs", "program"])
def test_missing_fields(tmp_path, bundle_dir, field):
    bundle = _good(bundle_dir)
    del bundle[field]
    _expect(_load_text(tmp_path, json.dumps(bundle)), rf'the field "{field}" is missing$')


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda b: b.update(name=7), r'the field "name" must be a string, not a number'),
        (lambda b: b.update(inputs={}), r'the field "inputs" must be an array, not an object'),
        (lambda b: b.update(inputs=[7]), r'the field "inputs\[0\]" must be an object'),
        (lambda b: b["inputs"][0].pop("dtype"), r'the field "inputs\[0\].dtype" is missing'),
        (lambda b: b["inputs"][0].pop("name"), r'the field "inputs\[0\].name" is missing'),
        (
            lambda b: b["inputs"][0].update(dtype="float99"),
            r"the field \"inputs\[0\].dtype\" is 'float99', not a TensorFlow dtype",
        ),
        (
            lambda b: b["outputs"][0].update(shape=[6, -1]),
            r'the field "outputs\[0\].shape" must hold sizes \(integers >= 0, or null for a '
            r"size known only at run time\), not \[6, -1\]",
        ),
        (
            lambda b: b["outputs"][0].update(shape=[None]),
            r'the field "outputs\[0\].shape" has a null size that "outputs\[0\].symbolic" does '
            r"not describe",
        ),
        (
            lambda b: b["outputs"][0].update(shape="6"),
            r'the field "outputs\[0\].shape" must be an array of sizes, not a string',
        ),
        (lambda b: b.update(outputs=[]), r'the field "outputs" is empty'),
        (lambda b: b.update(program=None), r'the field "program" must be a base64 string'),
        (lambda b: b.update(program=12), r'the field "program" must be a base64 string, not a'),
        (lambda b: b.update(program="!!!"), r'the field "program" is not valid base64'),
        (lambda b: b.update(gradient="a"), r'the field "gradient" is not valid base64'),
        (lambda b: b.update(kernels="1"), r'the field "kernels" must be an integer'),
        (
            lambda b: b.update(program=b["gradient"][:-8] + "AAAAAAA="),
            r"the program was modified or corrupted: its SHA-256 digest does not match",
        ),
    ],
)
def test_fields_of_the_wrong_type(tmp_path, bundle_dir, edit, message):
    bundle = _good(bundle_dir)
    edit(bundle)
    _expect(_load_text(tmp_path, json.dumps(bundle)), message)


def test_the_same_errors_from_program(bundle_dir):
    with pytest.raises(ovl_tf.BundleError, match=r'^bundle "<bundle>": the file holds an array'):
        ovl_tf.Program([1, 2])
    bundle = _good(bundle_dir)
    del bundle["inputs"]
    with pytest.raises(ovl_tf.BundleError, match=r'^bundle "mine": the field "inputs" is missing'):
        ovl_tf.Program(bundle, "mine")


def test_a_file_that_cannot_be_read_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        ovl_tf.load(tmp_path / "missing.json")
    with pytest.raises(IsADirectoryError):
        ovl_tf.load(tmp_path)


def test_a_good_bundle_still_loads(bundle_dir):
    f = ovl_tf.load(bundle_dir / "square.json")
    assert f.name == "square" and f.has_gradient and len(f.inputs) == 1
