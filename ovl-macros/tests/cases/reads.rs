// An array-literal index is a tensor READ; any other index is Rust's `Index`.
#[operator]
fn f(x: Tensor<f32>, ys: Vec<Tensor<f32>>, s: Tensor<f32>) -> Tensor<f32> {
    let [r, c] = x.dims::<2>();
    let pos = position_in([r, c]);
    let (i, j) = (pos[0], pos[1]);
    let out = output_like(&x);
    let a = x[[i, j]];
    let b = ys[1][[i, j]] + ys[0][[j, i]];
    let d = x[pos];
    let e = x[[i, j]].abs().max(x[[j, i]]);
    let g = x[[ys[0][[i, 0]] as i64, j]];
    let h = s[[]];
    out[[i, j]] = a + b + d + e + g + h;
    out
}
