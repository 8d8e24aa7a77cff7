"""Checks an installed ovl_tf (a wheel in a fresh virtual environment): run by scripts/test.sh
as `python installed_check.py BUNDLE_DIR` from a directory outside the repository, without
OVL_TF_LIBRARY. Not a pytest module: it must not see the repository's copy of the package.

It checks that ovl_tf and its bridge library come from the installed package, that it runs
the C++ kernel (its source is package data), then runs a bundle forward and through
tf.GradientTape and compares with TensorFlow's own arithmetic."""

import os
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

import ovl_tf


def main() -> int:
    bundles = Path(sys.argv[1])
    assert "OVL_TF_LIBRARY" not in os.environ, "run without OVL_TF_LIBRARY"
    package = Path(ovl_tf.__file__).resolve().parent
    prefix = Path(sys.prefix).resolve()
    assert prefix in package.parents, f"ovl_tf imported from {package}, not from {prefix}"
    library = ovl_tf.library_path()
    assert library.parent == package, f"the bridge library is {library}, not in {package}"

    square = ovl_tf.load(bundles / "square.json")
    x = tf.constant(np.array([-2.0, -0.5, 0.0, 0.5, 1.5, 3.0], dtype=np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = square(x)
        loss = tf.reduce_sum(y * tf.range(1.0, 7.0))
    dx = tape.gradient(loss, x)
    np.testing.assert_array_equal(y.numpy(), (x * x).numpy())
    np.testing.assert_allclose(dx.numpy(), (2.0 * x * tf.range(1.0, 7.0)).numpy(), rtol=1e-6)
    # The package carries the C++ kernel's source, and it compiles here (a C++ compiler is
    # on the test machines).
    assert ovl_tf.kernel_kind() == "c++", ovl_tf.kernel_kind()
    print(f"installed ovl_tf OK: {package}, library {library.name}, {ovl_tf.kernel_kind()} kernel")
    return 0


if __name__ == "__main__":
    sys.exit(main())
