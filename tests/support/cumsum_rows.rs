//! The README's first operator, a running sum along each row (one worker per row, a staged loop
//! with a loop-carried variable), shared by `tests/programs/program.rs` and
//! `tests/core/ir_dump.rs` (`tests/programs.rs` and `tests/core.rs` include this file with
//! `#[path]`).

use ovl::prelude::*;

/// Running sum along each row.
#[operator]
pub fn cumsum_rows(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let row = position_in([rows])[0];
    let out = output_like(&x);
    let mut acc = variable(0.0f32);
    for j in 0..cols {
        acc += x[[row, j]];
        out[[row, j]] = acc;
    }
    out
}
