//! A matrix product as a user writes it without the library: a worker per element of the
//! result, a fold over `k` (shared by tests/fuse/fusion_memory.rs and benches/fusion_menu.rs).
use ovl::prelude::*;

#[operator]
pub fn product_per_element(a: Tensor<f32>, b: Tensor<f32>) -> Tensor<f32> {
    let [m, k] = a.dims::<2>();
    let [_, n] = b.dims::<2>();
    let p = position_in([m, n]);
    let out = output([m, n]);
    let mut acc = variable(0.0f32);
    for t in 0..k {
        acc += a[[p[0], t]] * b[[t, p[1]]];
    }
    out[[p[0], p[1]]] = acc;
    out
}
