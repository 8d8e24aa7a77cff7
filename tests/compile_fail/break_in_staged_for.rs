use ovl::prelude::*;

#[operator]
fn f(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let row = position_in([rows])[0];
    let out = output_like(&x);
    for j in 0..cols {
        if x[[row, j]] < 0.0 {
            break;
        }
        out[[row, j]] = x[[row, j]];
    }
    out
}

fn main() {}
