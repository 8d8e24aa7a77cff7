use ovl::prelude::*;

#[operator]
fn f(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let v = match x.rank() {
        1 => x[[i]],
        _ => x[[i]] * 2.0,
    };
    out[[i]] = v;
    out
}

fn main() {}
