use ovl::prelude::*;

// A function of your own named like a DSL function shadows the prelude's glob import (Rust's
// rule: a name defined in the module wins over a glob import), so `log(..)` below is this one.
fn log(message: impl AsRef<str>) {
    println!("{}", message.as_ref());
}

#[operator]
fn log_op(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = log(x[[i]]);
    out
}

// The fix: name the DSL function by its path (or import it under another name).
#[operator]
fn log_op_fixed(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = ovl::prelude::log(x[[i]]);
    out
}

fn main() {
    log("ok");
}
