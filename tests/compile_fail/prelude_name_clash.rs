use ovl::prelude::*;

// A function of your own named like a DSL function would shadow the prelude's glob import
// silently (Rust's rule: a name defined in the module wins over a glob import). In an operator
// or helper body, a bare call of a prelude name that means something else in the module is the
// error "`log` is ambiguous", at the call.
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

// The fix: name the DSL function by its path (`self::log(..)` would be your own).
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
