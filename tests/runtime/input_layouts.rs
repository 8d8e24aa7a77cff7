//! A user's array in any layout is an input: owned (C order, Fortran order, from a transpose),
//! borrowed (`&array`), or a view (transposed, stepped, reversed, permuted, broadcast). Each is
//! brought into row-major order (`ovl_core::lazy::layout`) and every kernel sees the same
//! values: checked element by element against the array read index by index, and through an
//! operator (softmax along the last axis, and a sum with a second input) against the same
//! computation on a standard-layout copy made index by index.

use ndarray::{s, Array, Array2, ArrayD, ArrayViewD, ShapeBuilder};
use ovl::prelude::*;

/// The array's elements in row-major order, read index by index (no iterator, no layout).
fn standard_copy(a: &ArrayViewD<'_, f32>) -> ArrayD<f32> {
    let values: Vec<f32> = ndarray::indices(a.raw_dim())
        .into_iter()
        .map(|i| a[i])
        .collect();
    ArrayD::from_shape_vec(a.raw_dim(), values).expect("shape")
}

fn targets() -> Vec<(&'static str, Options)> {
    vec![
        ("interpreter", Options::interpreter()),
        ("cpu", Options::cpu()),
    ]
}

/// Evaluates `softmax(x)` and `x + 2 * y` for `x` given as `lazy`, and checks both against the
/// same on `want` (a standard-layout copy of `x`).
fn check(name: &str, lazy: Lazy<f32>, want: &ArrayD<f32>) {
    assert_eq!(lazy.shape(), want.shape(), "{name}: shape");
    let y = ArrayD::from_shape_fn(want.raw_dim(), |i: ndarray::IxDyn| {
        (ndarray::Dimension::slice(&i).iter().sum::<usize>() % 7) as f32 - 3.0
    });
    let standard = Lazy::from(want.clone());
    for (target, options) in targets() {
        let got: ArrayD<f32> = ovl::evaluate_with(&lazy, &options).expect("identity");
        assert_eq!(
            &got, want,
            "{name} on {target}: the input as the graph holds it"
        );
        let pairs = [
            (ovl_stdlib::softmax(&lazy), ovl_stdlib::softmax(&standard)),
            (
                &lazy + &(ovl_stdlib::mul(&y, ndarray::arr0(2.0f32))),
                &standard + &(ovl_stdlib::mul(&y, ndarray::arr0(2.0f32))),
            ),
        ];
        for (k, (a, b)) in pairs.iter().enumerate() {
            let got: ArrayD<f32> = ovl::evaluate_with(a, &options).expect("evaluate");
            let expected: ArrayD<f32> = ovl::evaluate_with(b, &options).expect("evaluate");
            assert_eq!(got, expected, "{name} on {target}: computation {k}");
        }
    }
}

#[test]
fn inputs_in_every_layout_give_the_values_of_their_standard_copy() {
    // 300 x 170: several tiles and groups of the tiled copy, with partial ones.
    let c = Array2::from_shape_fn((300, 170), |(i, j)| ((i * 37 + j * 11) % 101) as f32 * 0.1);
    let f = Array2::from_shape_fn((300, 170).f(), |(i, j)| {
        ((i * 37 + j * 11) % 101) as f32 * 0.1
    });
    assert!(!f.is_standard_layout());
    let cube = Array::from_shape_fn((4, 50, 70), |(i, j, k)| {
        (i * 5000 + j * 70 + k) as f32 * 1e-3
    });
    let row = ndarray::Array1::from_shape_fn(170, |j| j as f32 * 0.01);

    let views: Vec<(&str, ArrayViewD<'_, f32>)> = vec![
        ("C order", c.view().into_dyn()),
        ("Fortran order", f.view().into_dyn()),
        ("transposed", c.t().into_dyn()),
        ("stepped rows", c.slice(s![..;3, ..]).into_dyn()),
        ("stepped columns", c.slice(s![.., 1..;2]).into_dyn()),
        ("stepped Fortran", f.slice(s![2..;5, ..;3]).into_dyn()),
        ("reversed", c.slice(s![..;-1, ..;-1]).into_dyn()),
        (
            "permuted 3-d",
            cube.view().permuted_axes([2, 0, 1]).into_dyn(),
        ),
        (
            "middle axis last",
            cube.view().permuted_axes([0, 2, 1]).into_dyn(),
        ),
        (
            "broadcast row",
            row.broadcast((300, 170)).expect("broadcast").into_dyn(),
        ),
    ];
    for (name, v) in views {
        let want = standard_copy(&v);
        // A view by value, a borrowed array, and an owned array in the view's own layout
        // (`to_owned` keeps a contiguous view's memory order: Fortran stays Fortran).
        check(&format!("{name}, view"), Lazy::from(v.clone()), &want);
        check(&format!("{name}, &view"), Lazy::from(&v), &want);
        check(&format!("{name}, owned"), Lazy::from(v.to_owned()), &want);
        let as_input: Lazy<f32> = ovl_stdlib::softmax(v.view());
        let expected: ArrayD<f32> =
            ovl::evaluate_with(&ovl_stdlib::softmax(&want), &Options::cpu()).expect("evaluate");
        let got: ArrayD<f32> = ovl::evaluate_with(&as_input, &Options::cpu()).expect("evaluate");
        assert_eq!(got, expected, "{name}: a view passed to a stdlib function");
    }
    // Owned arrays made from a transpose, as a user makes a Fortran-order array.
    let from_t = c.t().to_owned();
    assert!(!from_t.is_standard_layout());
    check(
        "owned transpose",
        Lazy::from(from_t.clone()),
        &standard_copy(&from_t.view().into_dyn()),
    );
}
