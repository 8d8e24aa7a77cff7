use ovl::prelude::*;

// `-x` on an unsigned element would wrap (2 becomes 254): a compile error, as in Rust.
#[operator]
fn negate(x: Tensor<u8>) -> Tensor<u8> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = -x[[i]];
    out
}

// Generic code says which types it negates.
#[operator]
fn negate_generic<T: Num>(x: Tensor<T>) -> Tensor<T> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = -x[[i]];
    out
}

fn main() {
    // And on lazy handles.
    let x = Lazy::from(ndarray::array![1u32, 2]);
    let _ = -&x;
}
