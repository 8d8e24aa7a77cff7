//! The API: export, graphs, written vs derived gradients, second derivatives, errors.

use super::elementwise::*;
use super::loops::*;
use super::*;
use ovl::Construct;
use ovl_stdlib as ops;

/// Derived gradients export to TensorFlow like written ones: the gradient program of the
/// one-operator LSTM cell is one kernel, and running it (as the TensorFlow kernel does) gives
/// what `evaluate` gives.
#[test]
fn derived_gradients_export_as_the_gradient_program() {
    let (b, h) = (2usize, 3usize);
    let z = ovl::placeholder::<f64>("z", &[b, 4 * h]);
    let c = ovl::placeholder::<f64>("c", &[b, h]);
    let (nc, nh) = lstm_cell_op(&z, &c, 1.0);
    let dc = ovl::placeholder::<f64>("dc", &[b, h]);
    let dh = ovl::placeholder::<f64>("dh", &[b, h]);
    let grads = ovl::backward(&[(&nc, &dc), (&nh, &dh)], &[&z, &c]).unwrap();
    let (gz, gc) = (grads.of(&z).unwrap(), grads.of(&c).unwrap());
    let bundle = ovl::as_tensorflow((&z, &c), (&nc, &nh))
        .gradient((&dc, &dh), (&gz, &gc))
        .build()
        .unwrap();
    assert_eq!(bundle.gradient_kernel_count(), 1);
    let data = [
        values(&[b, 4 * h], 60, -2.0, 2.0),
        values(&[b, h], 61, -1.0, 1.0),
        values(&[b, h], 62, -1.0, 1.0),
        values(&[b, h], 63, -1.0, 1.0),
    ];
    let host = |a: &ArrayD<f64>| {
        ovl::HostTensor::from_vec(a.shape(), a.iter().copied().collect()).unwrap()
    };
    let got = ovl::program::run_program(
        bundle.gradient.as_ref().unwrap(),
        data.iter().map(host).collect(),
        &Options::cpu(),
    )
    .unwrap();
    // The same gradients on host data.
    let zl = Lazy::from(data[0].clone());
    let cl = Lazy::from(data[1].clone());
    let (nc, nh) = lstm_cell_op(&zl, &cl, 1.0);
    let (dcl, dhl) = (Lazy::from(data[2].clone()), Lazy::from(data[3].clone()));
    let g = ovl::backward(&[(&nc, &dcl), (&nh, &dhl)], &[&zl, &cl]).unwrap();
    for (k, x) in [&zl, &cl].into_iter().enumerate() {
        let want = ovl::evaluate_with(&g.of(x).unwrap(), &Options::cpu()).unwrap();
        assert_eq!(got[k].as_slice::<f64>().unwrap(), want.as_slice().unwrap());
    }
}

/// A graph of several operators without gradients (transposed and broadcast reads, a row
/// kernel, min/max reductions): the backward graph of derived operators, unfused and fused,
/// matches central differences.
#[test]
fn a_graph_of_derived_gradients_fused_and_unfused() {
    let f: &Forward = &|xs| {
        let t = transpose_bias(&xs[0], &xs[1], &xs[2]);
        let c = centered_tanh(&t);
        vec![row_max_min(&c), stencil(&xs[2])]
    };
    let xs = vec![
        values(&[3, 4], 70, -1.0, 1.0),
        values(&[4, 3], 71, -1.0, 1.0),
        values(&[4], 72, -1.0, 1.0),
    ];
    let lazies: Vec<Lazy<f64>> = xs.iter().map(|x| Lazy::from(x.clone())).collect();
    let seeds: Vec<ArrayD<f64>> = f(&lazies)
        .iter()
        .enumerate()
        .map(|(o, y)| values(y.shape(), 73 + o as u64, -1.0, 1.0))
        .collect();
    let want = numeric(f, &xs, &seeds);
    for (target, options) in targets() {
        for level in [0u8, 3] {
            let got = derived(f, &xs, &seeds, &options.clone().with_opt_level(level)).unwrap();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let what = format!("graph on {target} at opt level {level}, input {i}");
                assert_close(&what, g, w, 1e-6);
            }
        }
    }
}

// ---------------------------------------------------------------- vs hand-written gradients

#[operator]
fn tanh_bias(x: Tensor<f64>, b: Tensor<f64>) -> Tensor<f64> {
    let [r, c] = x.dims::<2>();
    let p = position_in([r, c]);
    let out = output([r, c]);
    out[[p[0], p[1]]] = tanh(x[[p[0], p[1]]] + b[[p[1]]]) * sqrt(exp(x[[p[0], p[1]]]));
    out
}

#[test]
fn derived_gradients_equal_the_stdlib_hand_written_ones() {
    let x = values(&[3, 5], 12, -1.0, 1.0);
    let b = values(&[5], 13, -1.0, 1.0);
    let seed = values(&[3, 5], 14, -1.0, 1.0);
    let (xl, bl, sl) = (
        Lazy::from(x.clone()),
        Lazy::from(b.clone()),
        Lazy::from(seed.clone()),
    );
    let by_stdlib = ops::mul(ops::tanh(ops::add(&xl, &bl)), ops::sqrt(ops::exp(&xl)));
    let derived = tanh_bias(&xl, &bl);
    let hand = ovl::backward(&[(&by_stdlib, &sl)], &[&xl, &bl]).unwrap();
    let auto = ovl::backward(&[(&derived, &sl)], &[&xl, &bl]).unwrap();
    for (name, options) in targets() {
        for t in [&xl, &bl] {
            let h = ovl::evaluate_with(&hand.of(t).unwrap(), &options).unwrap();
            let a = ovl::evaluate_with(&auto.of(t).unwrap(), &options).unwrap();
            assert_close(&format!("tanh_bias on {name}"), &a, &h, 1e-12);
        }
    }
}

/// A written gradient wins over the derived one; `gradient = auto` derives explicitly.
fn ten_times(_x: Lazy<f64>, dy: Lazy<f64>) -> Lazy<f64> {
    ops::mul(&dy, Lazy::from(ArrayD::from_elem(IxDyn(&[3]), 10.0)))
}

#[operator(gradient = ten_times)]
fn square_written(x: Tensor<f64>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * x[[i]];
    out
}

#[operator(gradient = auto)]
fn square_auto(x: Tensor<f64>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * x[[i]];
    out
}

#[test]
fn a_written_gradient_wins_and_auto_derives() {
    let x = Lazy::from(ArrayD::from_shape_vec(IxDyn(&[3]), vec![1.0, -2.0, 0.5]).unwrap());
    let ones = Lazy::from(ArrayD::from_elem(IxDyn(&[3]), 1.0));
    let y = square_written(&x);
    let g = ovl::backward(&[(&y, &ones)], &[&x]).unwrap();
    let g = ovl::evaluate(&g.of(&x).unwrap()).unwrap();
    assert_eq!(g.as_slice().unwrap(), &[10.0, 10.0, 10.0]);
    let y = square_auto(&x);
    let g = ovl::backward(&[(&y, &ones)], &[&x]).unwrap();
    let g = ovl::evaluate(&g.of(&x).unwrap()).unwrap();
    assert_eq!(g.as_slice().unwrap(), &[2.0, -4.0, 1.0]);
}

#[operator]
fn row_sum_op(x: Tensor<f64>) -> Tensor<f64> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows]);
    let mut total = sum_of(0.0f64);
    for j in 0..cols {
        total += x[[r, j]];
    }
    out[[r]] = total;
    out
}

#[test]
fn derived_sum_gradient_equals_the_stdlib_one() {
    let x = Lazy::from(values(&[3, 6], 40, -1.0, 1.0));
    let seed = Lazy::from(values(&[3], 41, -1.0, 1.0));
    let hand = ovl::backward(&[(&ops::sum(&x, 1), &seed)], &[&x]).unwrap();
    let y = row_sum_op(&x);
    let auto = ovl::backward(&[(&y, &seed)], &[&x]).unwrap();
    // The only read of `x`, in the loop: its gradient is written by the forward's workers, in
    // the iteration that read it (no gather), so forward and backward run as one kernel.
    let fusion = ovl::fusion((&y, &auto.of(&x).unwrap()), 3).unwrap();
    assert_eq!(
        (fusion.report.kernels_before, fusion.report.kernels_after),
        (2, 1),
        "{}",
        fusion.report
    );
    for (name, options) in targets() {
        let h = ovl::evaluate_with(&hand.of(&x).unwrap(), &options).unwrap();
        let a = ovl::evaluate_with(&auto.of(&x).unwrap(), &options).unwrap();
        assert_close(&format!("row sum on {name}"), &a, &h, 0.0);
    }
}

#[operator]
fn tanh_op(x: Tensor<f64>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = tanh(x[[i]]);
    out
}

/// Only the outputs that reach the seeds carry an adjoint: the derived operator reads those.
#[test]
fn one_output_of_two_seeded() {
    let x = values(&[5], 44, -1.0, 1.0);
    let y = values(&[5], 45, 0.5, 1.5);
    let (xl, yl) = (Lazy::from(x.clone()), Lazy::from(y.clone()));
    let (a, _b) = every_op(&xl, &yl);
    let seed = values(&[5], 46, -1.0, 1.0);
    let g = ovl::backward(&[(&a, &Lazy::from(seed.clone()))], &[&xl, &yl]).unwrap();
    // The same as seeding the second output with zeros.
    let (a2, b2) = every_op(&xl, &yl);
    let zeros = Lazy::from(ArrayD::zeros(IxDyn(&[5])));
    let both = ovl::backward(&[(&a2, &Lazy::from(seed)), (&b2, &zeros)], &[&xl, &yl]).unwrap();
    for (name, options) in targets() {
        for t in [&xl, &yl] {
            let one = ovl::evaluate_with(&g.of(t).unwrap(), &options).unwrap();
            let two = ovl::evaluate_with(&both.of(t).unwrap(), &options).unwrap();
            assert_close(&format!("one seed on {name}"), &one, &two, 1e-12);
        }
    }
}

/// The derived gradient operators are operators like any other: differentiating them again
/// gives second derivatives.
#[test]
fn second_derivatives() {
    let xv = values(&[5], 42, -1.5, 1.5);
    let sv = values(&[5], 43, -1.0, 1.0);
    let (x, seed) = (Lazy::from(xv.clone()), Lazy::from(sv.clone()));
    let y = tanh_op(&x);
    let g = ovl::backward(&[(&y, &seed)], &[&x])
        .unwrap()
        .of(&x)
        .unwrap();
    let ones = Lazy::from(ArrayD::from_elem(IxDyn(&[5]), 1.0));
    let gg = ovl::backward(&[(&g, &ones)], &[&x, &seed]).unwrap();
    // g = s (1 - t^2): dg/dx = -2 s t (1 - t^2), dg/ds = 1 - t^2.
    let t = xv.mapv(f64::tanh);
    let want_x = (&sv * &t * &t.mapv(|v| 1.0 - v * v)).mapv(|v| -2.0 * v);
    let want_s = t.mapv(|v| 1.0 - v * v);
    for (name, options) in targets() {
        let gx = ovl::evaluate_with(&gg.of(&x).unwrap(), &options).unwrap();
        let gs = ovl::evaluate_with(&gg.of(&seed).unwrap(), &options).unwrap();
        assert_close(&format!("d2/dx2 on {name}"), &gx, &want_x, 1e-12);
        assert_close(&format!("d2/dx ds on {name}"), &gs, &want_s, 1e-12);
    }
}

/// Second derivatives through gathered gradients (broadcast, transpose, stencil) and loops.
#[test]
fn second_derivatives_through_gathers_and_loops() {
    check(
        "gradient of transpose_bias",
        &gradient_of(&|xs| vec![transpose_bias(&xs[0], &xs[1], &xs[2])]),
        vec![
            values(&[2, 3], 50, -1.0, 1.0),
            values(&[3, 2], 51, -1.0, 1.0),
            values(&[3], 52, -1.0, 1.0),
        ],
    );
    check(
        "gradient of stencil",
        &gradient_of(&|xs| vec![stencil(&xs[0])]),
        vec![values(&[6], 53, -1.5, 1.5)],
    );
    check(
        "gradient of row_sums",
        &gradient_of(&|xs| vec![row_sums(&xs[0], &xs[1])]),
        vec![values(&[2, 4], 54, -1.5, 1.5), values(&[4], 55, -1.0, 1.0)],
    );
    // A row read in several loops: its gradient sums the row in a worker-local buffer, which
    // is differentiated in turn.
    check(
        "gradient of centered_tanh",
        &gradient_of(&|xs| vec![centered_tanh(&xs[0])]),
        vec![values(&[2, 4], 56, -1.5, 1.5)],
    );
}

// ---------------------------------------------------------------- errors

#[operator]
fn row_products(x: Tensor<f64>, n: Tensor<i64>) -> Tensor<f64> {
    let [rows, _] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows]);
    let mut p = variable(1.0f64);
    for j in 0..n[[r]] {
        p = p * x[[r, j]];
    }
    out[[r]] = p;
    out
}

#[operator]
fn row_product(x: Tensor<f64>, n: Tensor<i64>) -> Tensor<f64> {
    let [rows, _] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows]);
    let mut p = product_of(1.0f64);
    for j in 0..n[[r]] {
        p *= x[[r, j]];
    }
    out[[r]] = p;
    out
}

#[operator]
fn halve_until_small(x: Tensor<f64>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let mut v = variable(x[[i]]);
    while v > 1.0 {
        v = v * 0.5;
    }
    out[[i]] = v;
    out
}

#[operator]
fn gather_rows(table: Tensor<f64>, idx: Tensor<i64>) -> Tensor<f64> {
    let [n] = idx.dims::<1>();
    let i = position_in([n])[0];
    let out = output([n]);
    out[[i]] = table[[idx[[i]]]] * 2.0;
    out
}

#[operator]
fn scatter(x: Tensor<f64>, idx: Tensor<i64>) -> Tensor<f64> {
    let [n] = x.dims::<1>();
    let i = position_in([n])[0];
    let out = output([n]);
    out[[idx[[i]]]] = x[[i]];
    out
}

fn underivable(err: GradError) -> ovl::DeriveError {
    match err {
        GradError::Underivable(e) => e,
        other => panic!("expected an underivable operator, got {other}"),
    }
}

#[test]
fn constructs_that_are_not_differentiated_are_errors_naming_the_operator_and_line() {
    let x = Lazy::from(values(&[3, 4], 20, 0.5, 3.0));
    let seed = Lazy::from(values(&[3], 21, -1.0, 1.0));
    // Loops whose bounds are data carry a state that cannot be sized: refused (with constant
    // bounds they are recorded: tests/core/autodiff/recurrences.rs).
    let n = Lazy::from(ndarray::array![4i64, 2, 3].into_dyn());
    let y = row_products(&x, &n);
    let e = underivable(ovl::backward(&[(&y, &seed)], &[&x]).unwrap_err());
    assert_eq!(e.construct, Construct::LoopCarried);
    assert_eq!(e.operator, "row_products");
    let msg = e.to_string();
    assert!(
        msg.contains("row_products")
            && msg.contains("tests/core/autodiff/api.rs:")
            && msg.contains("loop"),
        "{msg}"
    );
    let y = row_product(&x, &n);
    let e = underivable(ovl::backward(&[(&y, &seed)], &[&x]).unwrap_err());
    assert_eq!(
        e.construct,
        Construct::Reduction {
            combiner: "product"
        }
    );

    let v = Lazy::from(values(&[3], 22, 0.5, 3.0));
    let y = halve_until_small(&v);
    let e = underivable(ovl::backward(&[(&y, &seed)], &[&v]).unwrap_err());
    assert_eq!(e.construct, Construct::WhileLoop);

    // A gather whose scatter-add would need more than a worker's local memory: 20,000 f64
    // along the gathered axis.
    let table = Lazy::from(values(&[20_000], 23, -1.0, 1.0));
    let idx = Lazy::from(ndarray::array![4i64, 0, 2].into_dyn());
    let y = gather_rows(&table, &idx);
    let e = underivable(ovl::backward(&[(&y, &seed)], &[&table]).unwrap_err());
    assert_eq!(e.construct, Construct::DataDependentRead { input: 0 });
    assert!(e.to_string().contains("64 KiB"), "{e}");

    let y = scatter(&v, &idx);
    let e = underivable(ovl::backward(&[(&y, &seed)], &[&v]).unwrap_err());
    assert_eq!(e.construct, Construct::DataDependentWrite { output: 0 });
}

/// Integer inputs get no gradient, and an operator whose float path does not reach an input
/// gives it none either.
#[operator]
fn scaled_by_count(x: Tensor<f64>, n: Tensor<i64>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * n[[i]].cast::<f64>();
    out
}

#[test]
fn integer_inputs_get_no_gradient() {
    let x = Lazy::from(ArrayD::from_shape_vec(IxDyn(&[3]), vec![1.0, 2.0, 3.0]).unwrap());
    let n = Lazy::from(ndarray::array![2i64, -1, 4].into_dyn());
    let ones = Lazy::from(ArrayD::from_elem(IxDyn(&[3]), 1.0));
    let y = scaled_by_count(&x, &n);
    let g = ovl::backward(&[(&y, &ones)], &[&x]).unwrap();
    let g = ovl::evaluate(&g.of(&x).unwrap()).unwrap();
    assert_eq!(g.as_slice().unwrap(), &[2.0, -1.0, 4.0]);
}

/// Layer norm of each row: two statistics summed in one loop, a loop writing the row.
#[operator]
fn norm_rows64(x: Tensor<f64>) -> Tensor<f64> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let y = output_like(&x);
    let mut s = sum_of(0.0f64);
    let mut sq = sum_of(0.0f64);
    for j in 0..cols {
        s += x[[r, j]];
        sq += x[[r, j]] * x[[r, j]];
    }
    let mean = s / cols as f64;
    let inv = rsqrt(sq / cols as f64 - mean * mean + 1e-3);
    for j in 0..cols {
        y[[r, j]] = (x[[r, j]] - mean) * inv;
    }
    y
}

/// Softmax of each row, `exp(x - max)` kept in a local row buffer.
#[operator]
fn softmax_buffered64(x: Tensor<f64>) -> Tensor<f64> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let y = output_like(&x);
    let mut top = max_of(f64::NEG_INFINITY);
    for j in 0..cols {
        top.update(x[[r, j]]);
    }
    let e = zeros::<f64>([cols]);
    let mut total = sum_of(0.0f64);
    for j in 0..cols {
        e[[j]] = exp(x[[r, j]] - top);
        total += e[[j]];
    }
    for j in 0..cols {
        y[[r, j]] = e[[j]] / total;
    }
    y
}

#[test]
fn second_derivatives_of_row_kernels() {
    check(
        "norm_rows64",
        &|xs| vec![norm_rows64(&xs[0])],
        vec![values(&[3, 5], 57, -1.5, 1.5)],
    );
    check(
        "gradient of norm_rows64",
        &gradient_of(&|xs| vec![norm_rows64(&xs[0])]),
        vec![values(&[3, 5], 57, -1.5, 1.5)],
    );
    check(
        "softmax_buffered64",
        &|xs| vec![softmax_buffered64(&xs[0])],
        vec![values(&[3, 5], 58, -1.5, 1.5)],
    );
    // Its gradient updates the adjoint of the row buffer in place in a loop (read, add,
    // reset): the second derivative records the buffer per iteration (`ovl_ir::grad`'s records).
    check(
        "gradient of softmax_buffered64",
        &gradient_of(&|xs| vec![softmax_buffered64(&xs[0])]),
        vec![values(&[3, 5], 58, -1.5, 1.5)],
    );
}
