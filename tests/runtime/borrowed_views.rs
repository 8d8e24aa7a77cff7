//! Borrowed inputs and outputs (`Compiled::run_views`, `ovl::views`): an array or view in any
//! layout feeds a compiled graph and receives its outputs. Values are checked against the
//! reference interpreter on a row-major copy made index by index, for every layout kind (C
//! order, Fortran order, transposed, stepped, reversed, permuted, broadcast, a block of whole
//! rows), each as a borrowed array and as a view; and the observable of "no copy": a row-major
//! contiguous feed hands the kernels the array's own address (`FeedView::data_ptr`), a
//! row-major output is written where it lies, and an owned array moved into a `Lazy` keeps
//! its buffer.

use ndarray::{s, Array, Array2, ArrayD, ArrayViewD, IxDyn, ShapeBuilder};
use ovl::prelude::*;
use ovl::{FeedView, OutputView};
use ovl_core::lazy::Node;

/// The array's elements in row-major order, read index by index (no iterator, no layout).
fn standard_copy(a: &ArrayViewD<'_, f32>) -> ArrayD<f32> {
    let values: Vec<f32> = ndarray::indices(a.raw_dim())
        .into_iter()
        .map(|i| a[i])
        .collect();
    ArrayD::from_shape_vec(a.raw_dim(), values).expect("shape")
}

/// The graph: `softmax(x)` and `x * 2 + y` for `x` of `shape` (`y` a second placeholder).
fn graph(shape: &[usize]) -> (Vec<Lazy<f32>>, Vec<Lazy<f32>>) {
    let x = ovl::placeholder::<f32>("x", shape);
    let y = ovl::placeholder::<f32>("y", shape);
    let two = ovl_stdlib::mul(&x, ndarray::arr0(2.0f32));
    let outs = vec![ovl_stdlib::softmax(&x), &two + &y];
    (vec![x, y], outs)
}

/// The second input: values depending on the index only.
fn second(shape: &[usize]) -> ArrayD<f32> {
    ArrayD::from_shape_fn(IxDyn(shape), |i: IxDyn| {
        (ndarray::Dimension::slice(&i).iter().sum::<usize>() % 7) as f32 - 3.0
    })
}

/// The interpreter's results for `x` (row-major) and `y`.
fn interpreted(x: &ArrayD<f32>, y: &ArrayD<f32>) -> Vec<ArrayD<f32>> {
    let (ins, outs) = graph(x.shape());
    let step = ovl::compile(&ins, &outs, &Options::interpreter()).expect("compile");
    let mut got = vec![ArrayD::<f32>::zeros(x.raw_dim()); 2];
    step.run_into((&Lazy::from(x.clone()), &Lazy::from(y.clone())), &mut got)
        .expect("interpreter");
    got
}

fn close(got: &ArrayD<f32>, want: &ArrayD<f32>, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-6 * w.abs().max(1.0),
            "{what}: {g} vs the interpreter's {w}"
        );
    }
}

/// Runs the graph on `feed` through `run_views` on the CPU and on the interpreter, into a C-order
/// output and a Fortran-order one, and checks the values.
fn check(name: &str, feed: FeedView<'_>, want: &ArrayD<f32>) {
    let shape = want.shape().to_vec();
    let y = second(&shape);
    let expected = interpreted(want, &y);
    let (ins, outs) = graph(&shape);
    for (target, options) in [
        ("cpu", Options::cpu()),
        ("interpreter", Options::interpreter()),
    ] {
        let step = ovl::compile(&ins, &outs, &options).expect("compile");
        let mut c_order = ArrayD::<f32>::zeros(IxDyn(&shape));
        let mut fortran = ArrayD::<f32>::zeros(IxDyn(&shape).f());
        {
            let mut dests = [
                OutputView::from(&mut c_order),
                OutputView::from(&mut fortran),
            ];
            assert!(dests[0].in_place(), "a C-order output is written in place");
            assert_eq!(
                dests[1].in_place(),
                shape.iter().filter(|&&d| d > 1).count() <= 1,
                "a Fortran-order output of more than one axis goes through a buffer"
            );
            let feeds = [feed.reborrow(), FeedView::from(&y)];
            step.run_views(&feeds, &mut dests).expect("run_views");
        }
        close(
            &c_order,
            &expected[0],
            &format!("{name} on {target}: softmax"),
        );
        close(
            &fortran,
            &expected[1],
            &format!("{name} on {target}: x * 2 + y"),
        );
    }
}

#[test]
fn views_in_every_layout_feed_a_compiled_graph_with_the_interpreters_values() {
    // 300 x 170: several tiles and groups of the tiled copy, with partial ones.
    let c = Array2::from_shape_fn((300, 170), |(i, j)| ((i * 37 + j * 11) % 101) as f32 * 0.1);
    let f = Array2::from_shape_fn((300, 170).f(), |(i, j)| {
        ((i * 37 + j * 11) % 101) as f32 * 0.1
    });
    let cube = Array::from_shape_fn((4, 50, 70), |(i, j, k)| {
        (i * 5000 + j * 70 + k) as f32 * 1e-3
    });
    let row = ndarray::Array1::from_shape_fn(170, |j| j as f32 * 0.01);
    let views: Vec<(&str, ArrayViewD<'_, f32>, bool)> = vec![
        ("C order", c.view().into_dyn(), true),
        (
            "whole rows 10..50",
            c.slice(s![10..50, ..]).into_dyn(),
            true,
        ),
        ("Fortran order", f.view().into_dyn(), false),
        ("transposed", c.t().into_dyn(), false),
        ("stepped rows", c.slice(s![..;3, ..]).into_dyn(), false),
        ("stepped columns", c.slice(s![.., 1..;2]).into_dyn(), false),
        (
            "stepped Fortran",
            f.slice(s![2..;5, ..;3]).into_dyn(),
            false,
        ),
        ("reversed", c.slice(s![..;-1, ..;-1]).into_dyn(), false),
        (
            "permuted 3-d",
            cube.view().permuted_axes([2, 0, 1]).into_dyn(),
            false,
        ),
        ("3-d C order", cube.view().into_dyn(), true),
        (
            "broadcast row",
            row.broadcast((300, 170)).expect("broadcast").into_dyn(),
            false,
        ),
    ];
    for (name, v, in_place) in views {
        let want = standard_copy(&v);
        for (how, feed) in [
            ("view", FeedView::from(v.clone())),
            ("&view", FeedView::from(&v)),
        ] {
            assert_eq!(feed.in_place(), in_place, "{name}, {how}: read in place");
            if in_place {
                assert_eq!(
                    feed.data_ptr(),
                    v.as_ptr().cast(),
                    "{name}, {how}: the kernels get the array's own address"
                );
            } else {
                assert_ne!(feed.data_ptr(), v.as_ptr().cast(), "{name}, {how}: a copy");
            }
            check(&format!("{name}, {how}"), feed, &want);
        }
    }
    // A borrowed owned array (`&array`), C order and Fortran order.
    let feed = FeedView::from(&c);
    assert!(feed.in_place() && feed.data_ptr() == c.as_ptr().cast());
    check("&array, C order", feed, &c.clone().into_dyn());
    let feed = FeedView::from(&f);
    assert!(!feed.in_place());
    check(
        "&array, Fortran order",
        feed,
        &standard_copy(&f.view().into_dyn()),
    );
}

#[test]
fn outputs_that_are_views_are_written_in_place_or_through_a_buffer() {
    let shape = [64usize, 48];
    let x = Array2::from_shape_fn(shape, |(i, j)| ((i * 7 + j * 3) % 19) as f32 * 0.25 - 2.0);
    let y = second(&shape)
        .into_dimensionality::<ndarray::Ix2>()
        .expect("2-d");
    let expected = interpreted(&x.clone().into_dyn(), &y.clone().into_dyn());
    let (ins, outs) = graph(&shape);
    let step = ovl::compile(&ins, &outs, &Options::cpu()).expect("compile");
    // A block of whole rows of a larger array (in place), and every other column of a wider
    // one (through a buffer): the elements outside the views keep their values.
    let mut tall = Array2::<f32>::from_elem((100, 48), 7.0);
    let mut wide = Array2::<f32>::from_elem((64, 96), 9.0);
    let tall_ptr = tall.slice(s![20..84, ..]).as_ptr();
    {
        let rows = tall.slice_mut(s![20..84, ..]);
        let every_other = wide.slice_mut(s![.., ..;2]);
        let mut dests = [OutputView::from(rows), OutputView::from(every_other)];
        assert!(dests[0].in_place() && !dests[1].in_place());
        step.run_views(&[FeedView::from(&x), FeedView::from(&y)], &mut dests)
            .expect("run_views");
    }
    close(
        &tall.slice(s![20..84, ..]).to_owned().into_dyn(),
        &expected[0],
        "softmax into rows 20..84",
    );
    close(
        &wide.slice(s![.., ..;2]).to_owned().into_dyn(),
        &expected[1],
        "x * 2 + y into every other column",
    );
    assert!(tall.slice(s![..20, ..]).iter().all(|&v| v == 7.0));
    assert!(tall.slice(s![84.., ..]).iter().all(|&v| v == 7.0));
    assert!(wide.slice(s![.., 1..;2]).iter().all(|&v| v == 9.0));
    assert_eq!(
        tall.slice(s![20..84, ..]).as_ptr(),
        tall_ptr,
        "written where it lies"
    );
}

#[test]
fn an_owned_array_moved_into_a_lazy_keeps_its_buffer() {
    let x = Array2::from_shape_fn((30, 40), |(i, j)| (i * 40 + j) as f32);
    let ptr = x.as_ptr();
    let lazy = Lazy::from(x);
    match &*lazy.untyped().node {
        Node::Host(h) => assert_eq!(h.data.as_ptr().cast::<f32>(), ptr, "no copy"),
        _ => panic!("host data"),
    }
}

#[test]
fn feeds_and_outputs_that_do_not_match_are_errors_naming_them() {
    let (ins, outs) = graph(&[4, 5]);
    let step = ovl::compile(&ins, &outs, &Options::cpu()).expect("compile");
    let x = Array2::<f32>::zeros((4, 5));
    let wrong_shape = Array2::<f32>::zeros((5, 4));
    let wrong_dtype = Array2::<f64>::zeros((4, 5));
    let mut a = Array2::<f32>::zeros((4, 5));
    let mut b = Array2::<f32>::zeros((4, 5));
    let mut small = Array2::<f32>::zeros((2, 5));
    let run = |feeds: &[FeedView<'_>], dests: &mut [OutputView<'_>]| {
        step.run_views(feeds, dests)
            .expect_err("a mismatch")
            .to_string()
    };
    let e = run(
        &[FeedView::from(&x)],
        &mut [OutputView::from(&mut a), OutputView::from(&mut b)],
    );
    assert!(e.contains("1 tensors given for 2 placeholders"), "{e}");
    let e = run(
        &[FeedView::from(&x), FeedView::from(&wrong_shape)],
        &mut [OutputView::from(&mut a), OutputView::from(&mut b)],
    );
    assert!(
        e.contains("placeholder 1 (`y`)") && e.contains("f32[5, 4]"),
        "{e}"
    );
    let e = run(
        &[FeedView::from(&wrong_dtype), FeedView::from(&x)],
        &mut [OutputView::from(&mut a), OutputView::from(&mut b)],
    );
    assert!(
        e.contains("placeholder 0 (`x`)") && e.contains("f64[4, 5]"),
        "{e}"
    );
    let e = run(
        &[FeedView::from(&x), FeedView::from(&x)],
        &mut [OutputView::from(&mut a), OutputView::from(&mut small)],
    );
    assert!(e.contains("f32[2, 5]"), "{e}");
    let e = run(
        &[FeedView::from(&x), FeedView::from(&x)],
        &mut [OutputView::from(&mut a)],
    );
    assert!(e.contains('2') && e.contains('1'), "{e}");
}

#[test]
fn evaluate_into_views_writes_lazy_results_into_views() {
    let x = Array2::from_shape_fn((40, 30), |(i, j)| ((i * 5 + j) % 13) as f32 * 0.5 - 3.0);
    let lazy = ovl_stdlib::softmax(&x);
    let want: ArrayD<f32> = ovl::evaluate_with(&lazy, &Options::interpreter()).expect("interp");
    for options in [Options::cpu(), Options::interpreter()] {
        let mut block = Array2::<f32>::from_elem((50, 30), -1.0);
        let mut fortran = Array2::<f32>::zeros((40, 30).f());
        {
            let mut dests = [OutputView::from(block.slice_mut(s![5..45, ..]))];
            assert!(dests[0].in_place());
            ovl::evaluate_into_views(&lazy, &mut dests, &options).expect("evaluate");
            let mut dests = [OutputView::from(&mut fortran)];
            assert!(!dests[0].in_place());
            ovl::evaluate_into_views(&lazy, &mut dests, &options).expect("evaluate");
        }
        close(
            &block.slice(s![5..45, ..]).to_owned().into_dyn(),
            &want,
            "rows 5..45",
        );
        close(&fortran.clone().into_dyn(), &want, "Fortran order");
        assert!(block.slice(s![..5, ..]).iter().all(|&v| v == -1.0));
        assert!(block.slice(s![45.., ..]).iter().all(|&v| v == -1.0));
    }
}
