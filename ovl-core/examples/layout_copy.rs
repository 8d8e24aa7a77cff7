//! Times bringing a 16 MB f32 array of each layout into row-major order (`standard_order`)
//! against a plain copy of the same bytes from a C-order array: Fortran order (the tiled
//! transpose), and layouts copied row by row (a sub-block of a larger matrix, stepped and
//! reversed rows and columns, broadcast rows and columns); then row-major elements written into
//! mutable views of those layouts (`assign_standard_order`) against ndarray's `assign`. Minimum
//! of 30 runs each.
//! `cargo run --release -p ovl-core --example layout_copy [ROWS COLS]`
use ndarray::{s, Array1, Array2, ArrayView2, ArrayViewMut2, ShapeBuilder};
use ovl_core::lazy::layout::{assign_standard_order, standard_order};
use std::time::Instant;

fn best(runs: usize, mut f: impl FnMut() -> Vec<f32>) -> f64 {
    let mut t = f64::INFINITY;
    for _ in 0..runs {
        let s = Instant::now();
        let v = f();
        t = t.min(s.elapsed().as_secs_f64());
        std::hint::black_box(v);
    }
    t * 1e3
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (r, c) = (
        *args.first().unwrap_or(&1024),
        *args.get(1).unwrap_or(&4096),
    );
    let value = |i: usize, j: usize| (i * c + j) as f32;
    let fortran = Array2::from_shape_fn((r, c).f(), |(i, j)| value(i, j));
    let c_order = fortran.as_standard_layout().to_owned();
    assert_eq!(standard_order(fortran.view()), c_order.as_slice().unwrap());
    let big = Array2::from_shape_fn((2 * r, 2 * c), |(i, j)| value(i, j));
    let row = Array1::from_shape_fn(c, |j| j as f32);
    let column = Array2::from_shape_fn((r, 1), |(i, _)| i as f32);
    let cases: Vec<(&str, ArrayView2<'_, f32>)> = vec![
        ("Fortran order", fortran.view()),
        (
            "sub-block of a matrix twice as large",
            big.slice(s![..r, ..c]),
        ),
        ("every other row", big.slice(s![..;2, ..c])),
        ("every other column", big.slice(s![..r, ..;2])),
        ("rows reversed", c_order.slice(s![..;-1, ..])),
        ("columns reversed", c_order.slice(s![.., ..;-1])),
        ("a row broadcast", row.broadcast((r, c)).unwrap()),
        ("a column broadcast", column.broadcast((r, c)).unwrap()),
    ];
    let copy = best(30, || standard_order(c_order.view()));
    let mb = (r * c * 4) as f64 / 1e6;
    println!(
        "[{r}, {c}] f32 ({mb:.1} MB): a plain copy of a C-order array {copy:.3} ms ({:.1} GB/s read+write)",
        2.0 * mb / copy
    );
    for (name, view) in cases {
        assert_eq!(view.shape(), [r, c]);
        let t = best(30, || standard_order(view));
        println!("{name:<38} {t:7.3} ms  {:5.2}x the plain copy", t / copy);
    }
    // The other way: row-major elements into a view, against ndarray's `assign`.
    let src = c_order.as_slice().unwrap();
    let mut c_out = Array2::<f32>::zeros((r, c));
    let mut fortran_out = Array2::<f32>::zeros((r, c).f());
    let mut big_out = Array2::<f32>::zeros((2 * r, 2 * c));
    let report = |name: &str, ours: f64, theirs: f64| {
        println!(
            "into {name:<33} {ours:7.3} ms  {:5.2}x the plain copy (ndarray's assign {theirs:.3} ms)",
            ours / copy
        )
    };
    let into = |mut v: ArrayViewMut2<'_, f32>| {
        let ours = best(30, || {
            assert!(assign_standard_order(&mut v, src));
            Vec::new()
        });
        let theirs = best(30, || {
            v.assign(&c_order);
            Vec::new()
        });
        (ours, theirs)
    };
    let (o, t) = into(c_out.view_mut());
    report("a C-order array", o, t);
    let (o, t) = into(fortran_out.view_mut());
    report("a Fortran-order array", o, t);
    let (o, t) = into(big_out.slice_mut(s![..r, ..c]));
    report("a sub-block of a matrix twice as large", o, t);
}
