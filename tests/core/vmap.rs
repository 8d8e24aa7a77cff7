//! `ovl::vmap`: a vmapped graph gives, for every example, exactly what the per-example graph
//! gives (bit for bit, on the interpreter and C++); shared inputs, every DSL construct, batch 0,
//! clear errors, fusion (the same kernel count as the unbatched graph) and gradients (the
//! gradient of a vmapped graph equals the stacked per-example gradients; the gradient of a
//! shared input is their sum).

use ndarray::{Array1, Array2, Array3, ArrayD, Axis, IxDyn};
use ovl::prelude::*;
use ovl::{Batched, LazyTensor, Shared, VmapError, VmapInput};
use ovl_stdlib as ops;

use crate::lstm_small_ops;
use lstm_small_ops::{lstm_cell, pseudo_random};

fn targets() -> [(&'static str, Options); 2] {
    [
        ("interpreter", Options::interpreter()),
        ("cpu", Options::cpu()),
    ]
}

/// Example `i` (slice `i` of the leading axis).
fn example<T: Clone>(a: &ArrayD<T>, i: usize) -> ArrayD<T> {
    a.index_axis(Axis(0), i).to_owned()
}

fn assert_same_bits(what: &str, got: &ArrayD<f32>, want: &ArrayD<f32>) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    for (k, (g, w)) in got.iter().zip(want.iter()).enumerate() {
        assert!(
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
            "{what}: element {k}: got {g:?}, want {w:?}"
        );
    }
}

#[operator]
fn scale_cols(x: Tensor<f32>, w: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = x[[p[0], p[1]]] * w[[p[1]]];
    out
}

#[test]
fn batched_and_shared_inputs() {
    let x = Array3::from_shape_fn((4, 2, 3), |(b, r, c)| (b * 100 + r * 10 + c) as f32 * 0.5);
    let w = Array1::from(vec![1.0f32, -2.0, 0.25]);
    let (xl, wl) = (Lazy::from(x.clone()), Lazy::from(w.clone()));
    // The closure's argument types follow from the arguments.
    let y = ovl::vmap(|(x, w)| scale_cols(&x, &w), (Batched(&xl), Shared(&wl))).unwrap();
    assert_eq!(y.shape(), &[4, 2, 3]);
    for (target, options) in targets() {
        let got = ovl::evaluate_with(&y, &options).unwrap();
        for b in 0..4 {
            for r in 0..2 {
                for c in 0..3 {
                    assert_eq!(got[[b, r, c]], x[[b, r, c]] * w[c], "{target}");
                }
            }
        }
    }
    // The batched operator: workgroup [4, 2, 3], x read with a leading index, w as before.
    let dag = y.operator_ir().unwrap();
    assert_eq!(dag.workgroup_shape, vec![4, 2, 3]);
    assert_eq!(dag.inputs[0].shape, vec![4, 2, 3]);
    assert_eq!(dag.inputs[1].shape, vec![3]);
    assert_eq!(dag.name, "scale_cols");
    // A repeated vmap reuses the batched IR (and its key: the plan cache sees the same graph).
    let again = ovl::vmap(|(x, w)| scale_cols(&x, &w), (Batched(&xl), Shared(&wl))).unwrap();
    assert!(std::ptr::eq(dag, again.operator_ir().unwrap()));
}

/// Every construct at once: a staged loop with a variable, accumulators, `if`/`else`, a local
/// tensor, a data-dependent index, a `while` loop and several outputs.
#[operator]
fn row_stats(x: Tensor<f32>, pick: Tensor<i32>) -> (Tensor<f32>, Tensor<f32>, Tensor<i32>) {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let cum = output_like(&x);
    let stats = output([rows, 3]);
    let steps = output([rows]);
    let mut run = variable(0.0f32);
    let mut total = sum_of(0.0f32);
    let mut biggest = max_of(f32::NEG_INFINITY);
    let seen = zeros::<f32>([cols]);
    for j in 0..cols {
        let v = x[[r, j]];
        run += v;
        cum[[r, j]] = run;
        total += v;
        biggest.update(v);
        if v > 0.0 {
            seen[[j]] = v;
        } else {
            seen[[j]] = -v;
        }
    }
    stats[[r, 0]] = total;
    stats[[r, 1]] = biggest;
    stats[[r, 2]] = x[[r, pick[[r]]]] + seen[[pick[[r]]]];
    let mut m = variable(abs(run) + 1.0);
    let mut k = variable(0i32);
    while m >= 1.0 && k < 200 {
        m = m / 2.0;
        k += 1;
    }
    steps[[r]] = k;
    (cum, stats, steps)
}

#[test]
fn every_construct_matches_the_per_example_operator() {
    let (n, rows, cols) = (5, 3, 11);
    let x = pseudo_random((n * rows, cols), 7)
        .into_shape_with_order((n, rows, cols))
        .unwrap()
        .into_dyn();
    let pick =
        Array2::from_shape_fn((n, rows), |(b, r)| ((b * 7 + r * 3) % cols) as i32).into_dyn();
    let (xl, pl) = (Lazy::from(x.clone()), Lazy::from(pick.clone()));
    let (cum, stats, steps) = ovl::vmap(
        |(x, p): (Lazy<f32>, Lazy<i32>)| row_stats(&x, &p),
        (Batched(&xl), Batched(&pl)),
    )
    .unwrap();
    for (target, options) in targets() {
        let (cum, stats, steps) = ovl::evaluate_with((&cum, &stats, &steps), &options).unwrap();
        for b in 0..n {
            let one = row_stats(example(&x, b), example(&pick, b));
            let (c1, s1, k1) = ovl::evaluate_with((&one.0, &one.1, &one.2), &options).unwrap();
            assert_same_bits(&format!("{target} cum[{b}]"), &example(&cum, b), &c1);
            assert_same_bits(&format!("{target} stats[{b}]"), &example(&stats, b), &s1);
            assert_eq!(example(&steps, b), k1, "{target} steps[{b}]");
        }
    }
}

#[test]
fn batch_zero_gives_empty_outputs() {
    let x = Lazy::from(ArrayD::<f32>::zeros(IxDyn(&[0, 2, 3])));
    let w = Lazy::from(Array1::from(vec![1.0f32, 2.0, 3.0]));
    let y = ovl::vmap(
        |(x, w): (Lazy<f32>, Lazy<f32>)| ovl_stdlib::softmax(scale_cols(&x, &w)),
        (Batched(&x), Shared(&w)),
    )
    .unwrap();
    for (target, options) in targets() {
        let got = ovl::evaluate_with(&y, &options).unwrap();
        assert_eq!(got.shape(), &[0, 2, 3], "{target}");
    }
}

#[test]
fn an_output_that_does_not_depend_on_the_batch_is_broadcast() {
    let x = Lazy::from(Array2::from_shape_fn((3, 2), |(b, c)| (b * 2 + c) as f32));
    let w = Lazy::from(Array1::from(vec![5.0f32, 7.0]));
    let (y, shared, same) = ovl::vmap(
        |(x, w): (Lazy<f32>, Lazy<f32>)| (&x + &w, &w * 2.0f32, x),
        (Batched(&x), Shared(&w)),
    )
    .unwrap();
    assert_eq!(shared.shape(), &[3, 2]);
    // A batched input returned as it is is that input.
    assert!(std::sync::Arc::ptr_eq(
        &same.untyped().node,
        &x.untyped().node
    ));
    for (target, options) in targets() {
        let (y, shared) = ovl::evaluate_with((&y, &shared), &options).unwrap();
        for b in 0..3 {
            assert_eq!(
                shared
                    .index_axis(Axis(0), b)
                    .iter()
                    .copied()
                    .collect::<Vec<_>>(),
                vec![10.0, 14.0],
                "{target}"
            );
            assert_eq!(
                y.index_axis(Axis(0), b).iter().copied().collect::<Vec<_>>(),
                vec![(b * 2) as f32 + 5.0, (b * 2 + 1) as f32 + 7.0],
                "{target}"
            );
        }
    }
}

#[test]
fn shared_only_operators_stay_unbatched() {
    let x = Lazy::from(Array2::from_shape_fn((4, 3), |(b, c)| (b + c) as f32));
    let w = Lazy::from(Array1::from(vec![1.0f32, 2.0, 3.0]));
    let y = ovl::vmap(
        |(x, w): (Lazy<f32>, Lazy<f32>)| &x * &(&w + 1.0f32),
        (Batched(&x), Shared(&w)),
    )
    .unwrap();
    let graph = ovl::graph(&y).unwrap();
    let workgroups: Vec<Vec<u64>> = graph
        .dag
        .operators
        .iter()
        .map(|o| o.workgroup_shape.clone())
        .collect();
    // `w + 1` runs once over [3]; the product over [4, 3].
    assert_eq!(workgroups, vec![vec![3], vec![4, 3]]);
    let got = ovl::evaluate_with(&y, &Options::cpu()).unwrap();
    assert_eq!(got[[2, 1]], 3.0 * 3.0);
}

#[test]
fn untyped_inputs_and_outputs() {
    let x = Lazy::from(Array2::from_shape_fn((2, 3), |(b, c)| (b * 3 + c) as f32));
    let w = Lazy::from(Array1::from(vec![2.0f32, 3.0, 4.0]));
    let outs: Vec<LazyTensor> = ovl::vmap(
        |xs: Vec<LazyTensor>| {
            let x = Lazy::<f32>::try_from(xs[0].clone()).unwrap();
            let w = Lazy::<f32>::try_from(xs[1].clone()).unwrap();
            vec![(&x * &w).into_untyped(), x.less(&w).into_untyped()]
        },
        vec![
            VmapInput::Batched(x.untyped()),
            VmapInput::Shared(w.untyped()),
        ],
    )
    .unwrap();
    let got = ovl::evaluate_with(&outs, &Options::interpreter()).unwrap();
    assert_eq!(got[0].shape, vec![2, 3]);
    assert_eq!(
        got[0].as_slice::<f32>().unwrap(),
        &[0.0, 3.0, 8.0, 6.0, 12.0, 20.0]
    );
    assert_eq!(
        got[1].as_slice::<bool>().unwrap(),
        &[true, true, true, false, false, false]
    );
}

#[test]
fn bad_arguments_are_clear_errors() {
    let x = Lazy::from(Array2::<f32>::zeros((3, 2)));
    let y = Lazy::from(Array2::<f32>::zeros((4, 2)));
    let s = Lazy::from(ndarray::arr0(1.0f32).into_dyn());

    let e = ovl::vmap(|x: Lazy<f32>| -&x, Shared(&x)).unwrap_err();
    assert_eq!(e, VmapError::NoBatchedInput);
    assert!(
        e.to_string().contains("at least one `Batched` input"),
        "{e}"
    );

    let e = ovl::vmap(
        |(a, b): (Lazy<f32>, Lazy<f32>)| &a + &b,
        (Batched(&x), Batched(&y)),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("batched input 1 has shape [4, 2], whose leading dimension is not the batch size 3 of batched input 0"),
        "{e}"
    );

    let e = ovl::vmap(|s: Lazy<f32>| -&s, Batched(&s)).unwrap_err();
    assert!(
        e.to_string()
            .contains("input 0 is marked `Batched` but is a 0-d tensor"),
        "{e}"
    );

    // A trace error inside the function is reported by vmap, naming the operator.
    let e = ovl::vmap(
        |a: Lazy<f32>| row_stats(&a, Lazy::from(Array1::<i32>::zeros(2))),
        Batched(&Lazy::from(Array2::<f32>::zeros((3, 2)))),
    )
    .unwrap_err();
    assert!(
        matches!(e, VmapError::Trace(_)) && e.to_string().contains("row_stats"),
        "{e}"
    );

    // A batch too large for memory: the batched operator cannot exist.
    let w = Lazy::from(Array1::from(vec![1.0f32, 2.0, 3.0]));
    let huge = Lazy::<f32>::placeholder("huge", &[usize::MAX / 4, 2, 3]);
    let e = ovl::vmap(
        |(x, w): (Lazy<f32>, Lazy<f32>)| scale_cols(&x, &w),
        (Batched(&huge), Shared(&w)),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("cannot batch operator `scale_cols` (defined at tests/core/vmap.rs:"),
        "{msg}"
    );
    let ovl_error: ovl::Error = e.into();
    assert!(ovl_error.to_string().contains("scale_cols"));
}

/// A softmax-like graph from small operators: a row maximum, exp of the difference, a row sum,
/// a division (two reductions and two elementwise operators).
#[operator]
fn row_max(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows]);
    let mut m = max_of(f32::NEG_INFINITY);
    for j in 0..cols {
        m.update(x[[r, j]]);
    }
    out[[r]] = m;
    out
}

#[operator]
fn exp_minus(x: Tensor<f32>, m: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = exp(x[[p[0], p[1]]] - m[[p[0]]]);
    out
}

#[operator]
fn row_sum(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows]);
    let mut s = sum_of(0.0f32);
    for j in 0..cols {
        s += x[[r, j]];
    }
    out[[r]] = s;
    out
}

#[operator]
fn divide_rows(x: Tensor<f32>, s: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = x[[p[0], p[1]]] / s[[p[0]]];
    out
}

fn softmax_like(x: &Lazy<f32>) -> Lazy<f32> {
    let e = exp_minus(x, row_max(x));
    divide_rows(&e, row_sum(&e))
}

fn kernels(outputs: &[&Lazy<f32>]) -> usize {
    let v: Vec<Lazy<f32>> = outputs.iter().map(|l| (*l).clone()).collect();
    ovl::fusion(&v, 3).unwrap().report.kernels_after
}

#[test]
fn vmapped_graphs_fuse_into_as_many_kernels_as_unbatched_ones() {
    // The LSTM cell from small operators, batched over a leading axis of 6 cells of [2, 4H].
    let (n, b, h) = (6, 2, 3);
    let z = pseudo_random((n * b, 4 * h), 1)
        .into_shape_with_order((n, b, 4 * h))
        .unwrap()
        .into_dyn();
    let c = pseudo_random((n * b, h), 2)
        .into_shape_with_order((n, b, h))
        .unwrap()
        .into_dyn();
    let (zl, cl) = (Lazy::from(z.clone()), Lazy::from(c.clone()));
    let (new_c, new_h) = ovl::vmap(
        |(z, c): (Lazy<f32>, Lazy<f32>)| lstm_cell(&z, &c, 1.0),
        (Batched(&zl), Batched(&cl)),
    )
    .unwrap();
    let (one_c, one_h) = lstm_cell(
        &Lazy::from(example(&z, 0)),
        &Lazy::from(example(&c, 0)),
        1.0,
    );
    let unbatched = kernels(&[&one_c, &one_h]);
    assert_eq!(unbatched, 1);
    assert_eq!(kernels(&[&new_c, &new_h]), unbatched);
    let before: usize = ovl::graph((&new_c, &new_h)).unwrap().dag.operators.len();
    assert_eq!(
        before,
        ovl::graph((&one_c, &one_h)).unwrap().dag.operators.len()
    );

    // The softmax-like graph: 4 operators, the same number of kernels batched or not.
    let x = pseudo_random((n * 3, 5), 3)
        .into_shape_with_order((n, 3, 5))
        .unwrap()
        .into_dyn();
    let xl = Lazy::from(x.clone());
    let y = ovl::vmap(|x: Lazy<f32>| softmax_like(&x), Batched(&xl)).unwrap();
    let one = softmax_like(&Lazy::from(example(&x, 0)));
    assert_eq!(kernels(&[&y]), kernels(&[&one]));

    for (target, options) in targets() {
        let (gc, gh, gy) = ovl::evaluate_with((&new_c, &new_h, &y), &options).unwrap();
        let profile = ovl::profile((&new_c, &new_h), &options, 1).unwrap();
        assert_eq!(profile.1.kernel_count(), unbatched, "{target}");
        for e in 0..n {
            let (oc, oh) = lstm_cell(
                &Lazy::from(example(&z, e)),
                &Lazy::from(example(&c, e)),
                1.0,
            );
            let (oc, oh, oy) = ovl::evaluate_with(
                (&oc, &oh, &softmax_like(&Lazy::from(example(&x, e)))),
                &options,
            )
            .unwrap();
            assert_same_bits(&format!("{target} new_c[{e}]"), &example(&gc, e), &oc);
            assert_same_bits(&format!("{target} new_h[{e}]"), &example(&gh, e), &oh);
            assert_same_bits(&format!("{target} softmax[{e}]"), &example(&gy, e), &oy);
        }
    }
}

/// The LSTM cell from stdlib operators (every one carries its gradient).
fn stdlib_cell(z: &Lazy<f32>, c: &Lazy<f32>, w: &Lazy<f32>) -> (Lazy<f32>, Lazy<f32>) {
    let gates = ops::split(z, 1, 4);
    let (i, j, f, o) = (&gates[0], &gates[1], &gates[2], &gates[3]);
    let bias = Lazy::from(ndarray::arr0(1.0f32));
    let new_c = ops::add(
        ops::mul(c, ops::sigmoid(ops::add(f, bias))),
        ops::mul(ops::sigmoid(ops::mul(i, w)), ops::tanh(j)),
    );
    let new_h = ops::mul(ops::tanh(&new_c), ops::sigmoid(o));
    (new_c, new_h)
}

type Five = (Lazy<f32>, Lazy<f32>, Lazy<f32>, (Lazy<f32>, Lazy<f32>));

/// The sum over the leading axis in the order of an accumulator (16 lanes, folded pairwise,
/// added to 0), computed in plain Rust.
fn lane_sum(parts: &[ArrayD<f32>]) -> ArrayD<f32> {
    let shape = parts.first().map_or(vec![], |p| p.shape().to_vec());
    let mut out = ArrayD::<f32>::zeros(IxDyn(&shape));
    for (k, o) in out.iter_mut().enumerate() {
        let mut lanes = [0.0f32; 16];
        for (t, p) in parts.iter().enumerate() {
            lanes[t % 16] += p.as_slice().unwrap()[k];
        }
        let mut level = lanes.to_vec();
        while level.len() > 1 {
            level = level.chunks(2).map(|q| q[0] + q[1]).collect();
        }
        *o = if parts.is_empty() {
            0.0
        } else {
            0.0 + level[0]
        };
    }
    out
}

#[test]
fn the_gradient_of_a_vmapped_graph_is_the_stacked_per_example_gradient() {
    let (n, b, h) = (10, 2, 3);
    let shape3 = |rows: usize, cols: usize, seed| {
        pseudo_random((n * rows, cols), seed)
            .into_shape_with_order((n, rows, cols))
            .unwrap()
            .into_dyn()
    };
    let (z, c) = (shape3(b, 4 * h, 11), shape3(b, h, 12));
    let (dc, dh) = (shape3(b, h, 13), shape3(b, h, 14));
    let w = pseudo_random((b, h), 15).into_dyn();
    let (zl, cl, wl) = (
        Lazy::from(z.clone()),
        Lazy::from(c.clone()),
        Lazy::from(w.clone()),
    );
    let (new_c, new_h) = ovl::vmap(
        |(z, c, w): (Lazy<f32>, Lazy<f32>, Lazy<f32>)| stdlib_cell(&z, &c, &w),
        (Batched(&zl), Batched(&cl), Shared(&wl)),
    )
    .unwrap();
    let (dcl, dhl) = (Lazy::from(dc.clone()), Lazy::from(dh.clone()));
    let grads = ovl::backward(&[(&new_c, &dcl), (&new_h, &dhl)], &[&zl, &cl, &wl]).unwrap();
    let (dz, dcg, dw) = (
        grads.of(&zl).unwrap(),
        grads.of(&cl).unwrap(),
        grads.of(&wl).unwrap(),
    );
    assert_eq!(dw.shape(), &[b, h]);

    // The same gradients, vmapped: backward inside the function.
    let (vdz, vdc, vdw) = ovl::vmap(
        |(z, c, w, (dc, dh)): Five| {
            let (nc, nh) = stdlib_cell(&z, &c, &w);
            let g = ovl::backward(&[(&nc, &dc), (&nh, &dh)], &[&z, &c, &w]).unwrap();
            (g.of(&z).unwrap(), g.of(&c).unwrap(), g.of(&w).unwrap())
        },
        (
            Batched(&zl),
            Batched(&cl),
            Shared(&wl),
            (Batched(&dcl), Batched(&dhl)),
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));

    for (target, options) in targets() {
        let (gz, gc, gw) = ovl::evaluate_with((&dz, &dcg, &dw), &options).unwrap();
        let (vz, vc, vw) = ovl::evaluate_with((&vdz, &vdc, &vdw), &options).unwrap();
        assert_eq!(vw.shape(), &[n, b, h]);
        let mut per_example_dw = Vec::new();
        for e in 0..n {
            let (z1, c1) = (Lazy::from(example(&z, e)), Lazy::from(example(&c, e)));
            let (nc, nh) = stdlib_cell(&z1, &c1, &wl);
            let (dc1, dh1) = (Lazy::from(example(&dc, e)), Lazy::from(example(&dh, e)));
            let g = ovl::backward(&[(&nc, &dc1), (&nh, &dh1)], &[&z1, &c1, &wl]).unwrap();
            let (ez, ec, ew) = ovl::evaluate_with(
                (
                    &g.of(&z1).unwrap(),
                    &g.of(&c1).unwrap(),
                    &g.of(&wl).unwrap(),
                ),
                &options,
            )
            .unwrap();
            assert_same_bits(&format!("{target} dz[{e}]"), &example(&gz, e), &ez);
            assert_same_bits(&format!("{target} dc[{e}]"), &example(&gc, e), &ec);
            assert_same_bits(&format!("{target} vmapped dz[{e}]"), &example(&vz, e), &ez);
            assert_same_bits(&format!("{target} vmapped dc[{e}]"), &example(&vc, e), &ec);
            assert_same_bits(&format!("{target} vmapped dw[{e}]"), &example(&vw, e), &ew);
            per_example_dw.push(ew);
        }
        // The shared input's gradient: the sum over the examples, in the accumulator's order.
        assert_same_bits(&format!("{target} dw"), &gw, &lane_sum(&per_example_dw));
    }
}

/// An operator whose gradient comes from the attribute.
#[operator(gradient = cube_grad)]
fn cube(x: Tensor<f64>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * x[[i]] * x[[i]];
    out
}

fn cube_grad(x: Lazy<f64>, dy: Lazy<f64>) -> Lazy<f64> {
    &(&dy * &(&x * &x)) * 3.0
}

#[test]
fn gradient_functions_of_operators_work_on_batched_calls() {
    let x = Array2::from_shape_fn((4, 3), |(b, i)| b as f64 - i as f64 * 0.5);
    let xl = Lazy::from(x.clone());
    let scale = Lazy::from(Array1::from(vec![1.0f64, 2.0, 3.0]));
    // cube: gradient from the attribute; the product with a shared tensor: set_gradient.
    let y = ovl::vmap(
        |(x, s): (Lazy<f64>, Lazy<f64>)| {
            let prod = &cube(&x) * &s;
            ovl::set_gradient(&prod, |call| {
                let (a, s) = (call.input::<f64>(0), call.input::<f64>(1));
                let g = call.output_grad::<f64>(0);
                vec![
                    Some((&g * &s).into_untyped()),
                    Some((&g * &a).into_untyped()),
                ]
            });
            prod
        },
        (Batched(&xl), Shared(&scale)),
    )
    .unwrap();
    let ones = Lazy::from(Array2::from_elem((4, 3), 1.0f64));
    let g = ovl::backward(&[(&y, &ones)], &[&xl, &scale]).unwrap();
    for (target, options) in targets() {
        let (dx, ds) =
            ovl::evaluate_with((&g.of(&xl).unwrap(), &g.of(&scale).unwrap()), &options).unwrap();
        for b in 0..4 {
            for i in 0..3 {
                let v = x[[b, i]];
                assert_eq!(dx[[b, i]], 1.0 * (i + 1) as f64 * (v * v) * 3.0, "{target}");
            }
        }
        for i in 0..3 {
            let expected: f64 = (0..4).map(|b| x[[b, i]].powi(3)).sum();
            assert!(
                (ds[[i]] - expected).abs() < 1e-12,
                "{target}: {} vs {expected}",
                ds[[i]]
            );
        }
    }
}

#[test]
fn a_vmapped_graph_on_placeholders_compiles_once_and_runs_per_batch() {
    let (n, rows, cols) = (3, 2, 5);
    let xb = ovl::placeholder::<f32>("x", &[n, rows, cols]);
    let y = ovl::vmap(|x: Lazy<f32>| softmax_like(&x), Batched(&xb)).unwrap();
    let step = ovl::compile(&xb, &y, &Options::cpu()).unwrap();
    for seed in [4, 5] {
        let x = pseudo_random((n * rows, cols), seed)
            .into_shape_with_order((n, rows, cols))
            .unwrap()
            .into_dyn();
        let mut out = vec![ArrayD::<f32>::zeros(IxDyn(&[n, rows, cols]))];
        step.run_into(Lazy::from(x.clone()), &mut out).unwrap();
        for e in 0..n {
            let want = ovl::evaluate(&softmax_like(&Lazy::from(example(&x, e)))).unwrap();
            assert_same_bits(
                &format!("compiled softmax[{e}]"),
                &example(&out[0], e),
                &want,
            );
        }
    }
}

#[test]
fn vmap_nests() {
    // vmap over rows of each matrix, then over a batch of matrices: the operator gains two axes.
    let x = ndarray::Array3::from_shape_fn((2, 3, 4), |(a, b, c)| (a * 12 + b * 4 + c) as f32);
    let w = Lazy::from(Array1::from(vec![1.0f32, -1.0, 2.0, 0.5]));
    let xl = Lazy::from(x.clone());
    let y = ovl::vmap(
        |m: Lazy<f32>| {
            ovl::vmap(
                |(row, w): (Lazy<f32>, Lazy<f32>)| &row * &w,
                (Batched(&m), Shared(&w)),
            )
            .unwrap()
        },
        Batched(&xl),
    )
    .unwrap();
    assert_eq!(y.operator_ir().unwrap().workgroup_shape, vec![2, 3, 4]);
    let w = [1.0f32, -1.0, 2.0, 0.5];
    for (target, options) in targets() {
        let got = ovl::evaluate_with(&y, &options).unwrap();
        for ((a, b, c), v) in x.indexed_iter() {
            assert_eq!(got[[a, b, c]], v * w[c], "{target}");
        }
    }
}

#[test]
fn a_gradient_that_cannot_be_batched_is_an_error_at_evaluation() {
    let x = Lazy::from(Array2::from_shape_fn((3, 4), |(b, i)| (b + i) as f32));
    let y = ovl::vmap(
        |x: Lazy<f32>| {
            let y = -&x;
            ovl::set_gradient(&y, |call| {
                let g = call.output_grad::<f32>(0);
                // row_stats needs a matrix: on one example's [4] this gradient fails to trace.
                let bad = row_stats(&g, Lazy::from(Array1::<i32>::zeros(4))).0;
                vec![Some(bad.into_untyped())]
            });
            y
        },
        Batched(&x),
    )
    .unwrap();
    let ones = Lazy::from(Array2::from_elem((3, 4), 1.0f32));
    let g = ovl::backward(&[(&y, &ones)], &[&x]).unwrap();
    let err = ovl::evaluate_with(&g.of(&x).unwrap(), &Options::interpreter()).unwrap_err();
    assert!(err.to_string().contains("row_stats"), "{err}");
}

/// Batched operators on the CUDA backend: on a GPU, `vmap(f)(X)[i] == f(X[i])` there; without
/// one, every batched kernel is compiled by NVRTC and validated by ptxas (values from the
/// interpreter). Says which happened.
#[test]
fn batched_kernels_on_cuda() {
    use std::io::Write as _;
    let say = |s: &str| {
        let _ = writeln!(std::io::stderr(), "{s}");
    };
    let options = match ovl::cuda::gpu_status() {
        Ok(gpu) => {
            say(&format!("vmap cuda: running on the GPU {}", gpu.name));
            Options::cuda()
        }
        Err(_) => {
            if let Err(e) = ovl::cuda::nvrtc_status() {
                say(&format!(
                    "vmap cuda: CUDA DID NOT RUN (no GPU, and NVRTC is missing: {})",
                    e.to_string().lines().next().unwrap_or_default()
                ));
                return;
            }
            say("vmap cuda: GPU EXECUTION DID NOT RUN (no GPU): batched kernels compiled by NVRTC and validated by ptxas");
            Options::cuda_validate()
        }
    };
    let (n, rows, cols) = (3, 2, 9);
    let x = pseudo_random((n * rows, cols), 21)
        .into_shape_with_order((n, rows, cols))
        .unwrap()
        .into_dyn();
    let pick = Array2::from_shape_fn((n, rows), |(b, r)| ((b + r * 5) % cols) as i32).into_dyn();
    let (xl, pl) = (Lazy::from(x.clone()), Lazy::from(pick.clone()));
    let (cum, stats, steps) =
        ovl::vmap(|(x, p)| row_stats(&x, &p), (Batched(&xl), Batched(&pl))).unwrap();
    let y = ovl::vmap(|x: Lazy<f32>| softmax_like(&x), Batched(&xl)).unwrap();
    let (cum, stats, steps, y) = ovl::evaluate_with((&cum, &stats, &steps, &y), &options).unwrap();
    for b in 0..n {
        let one = row_stats(example(&x, b), example(&pick, b));
        let sm = softmax_like(&Lazy::from(example(&x, b)));
        let (c1, s1, k1, y1) = ovl::evaluate_with((&one.0, &one.1, &one.2, &sm), &options).unwrap();
        assert_same_bits(&format!("cuda cum[{b}]"), &example(&cum, b), &c1);
        assert_same_bits(&format!("cuda stats[{b}]"), &example(&stats, b), &s1);
        assert_eq!(example(&steps, b), k1, "cuda steps[{b}]");
        assert_same_bits(&format!("cuda softmax[{b}]"), &example(&y, b), &y1);
    }
}

#[operator]
fn take(values: Tensor<f32>, idx: Tensor<i32>) -> Tensor<f32> {
    let i = position_in(idx.shape())[0];
    let out = output(idx.shape());
    out[[i]] = values[[idx[[i]]]];
    out
}

#[test]
fn an_index_out_of_bounds_in_one_example_is_an_error() {
    let values = Lazy::from(Array2::from_shape_fn((3, 4), |(b, i)| (b * 4 + i) as f32));
    // Example 1 reads element 4 of a 4-element row.
    let idx = Lazy::from(ndarray::array![[0, 1], [2, 4], [3, 3]]);
    let y = ovl::vmap(|(v, i)| take(&v, &i), (Batched(&values), Batched(&idx))).unwrap();
    for (target, options) in targets() {
        let err = ovl::evaluate_with(&y, &options).unwrap_err().to_string();
        assert!(
            err.contains("take") && err.contains("bounds"),
            "{target}: {err}"
        );
    }
    let ok = Lazy::from(ndarray::array![[0, 1], [2, 3], [3, 3]]);
    let y = ovl::vmap(|(v, i)| take(&v, &i), (Batched(&values), Batched(&ok))).unwrap();
    let got = ovl::evaluate_with(&y, &Options::cpu()).unwrap();
    assert_eq!(
        got,
        ndarray::array![[0.0f32, 1.0], [6.0, 7.0], [11.0, 11.0]].into_dyn()
    );
}
