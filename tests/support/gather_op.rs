//! The operator and printing helper the device tests share (`tests/cuda/cuda_graphs.rs`,
//! `tests/device_tensors.rs`).

use ovl::prelude::*;
use std::io::Write as _;

/// out[i] = x[idx[i]]: a checked index, so the kernel can fault.
#[operator]
pub fn gather(x: Tensor<f32>, idx: Tensor<i32>) -> Tensor<f32> {
    let i = position_in(idx.shape())[0];
    let out = output::<f32>(idx.shape());
    out[[i]] = x[[idx[[i]]]];
    out
}

/// A line on stderr (a test's "did not run" and its findings), ignoring a closed stream.
pub fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}
