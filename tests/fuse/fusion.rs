//! The operator merger end to end: kernel counts, refusal reasons, results (checked against
//! plain Rust computations), on the interpreter and generated C++, fused and unfused.

use ndarray::{Array1, Array2, ArrayD};
use ovl::prelude::*;
use ovl::{MergeKind, Reason};

// ---------------------------------------------------------------- operators of the paper (Fig. 2)

/// op1: split a matrix into its four rows (one worker per column).
#[operator]
fn split_rows(a: Tensor<f32>) -> (Tensor<f32>, Tensor<f32>, Tensor<f32>, Tensor<f32>) {
    let [_, cols] = a.dims::<2>();
    let j = position_in([cols])[0];
    let b = output([cols]);
    let c = output([cols]);
    let d = output([cols]);
    let e = output([cols]);
    b[[j]] = a[[0, j]];
    c[[j]] = a[[1, j]];
    d[[j]] = a[[2, j]];
    e[[j]] = a[[3, j]];
    (b, c, d, e)
}

/// op2, op3: elementwise add of two vectors.
#[operator]
fn add(x: Tensor<f32>, y: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] + y[[i]];
    out
}

/// op4: elementwise product of two vectors.
#[operator]
fn mul(x: Tensor<f32>, y: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * y[[i]];
    out
}

/// op5: stack three vectors as the rows of a matrix.
#[operator]
fn concat_rows(x: Tensor<f32>, y: Tensor<f32>, z: Tensor<f32>) -> Tensor<f32> {
    let n = x.shape()[0];
    let j = position_in([n])[0];
    let out = output([3, n]);
    out[[0, j]] = x[[j]];
    out[[1, j]] = y[[j]];
    out[[2, j]] = z[[j]];
    out
}

fn paper_input() -> Array2<f32> {
    Array2::from_shape_fn((4, 5), |(r, c)| (r * 5 + c) as f32 * 0.5 - 3.0)
}

fn paper_expected(a: &Array2<f32>) -> Array2<f32> {
    let mut k = Array2::zeros((3, 5));
    for j in 0..5 {
        let f = a[[0, j]] + a[[1, j]];
        let g = a[[2, j]] + a[[3, j]];
        k[[0, j]] = f;
        k[[1, j]] = f * g;
        k[[2, j]] = g;
    }
    k
}

fn paper_graph(a: &Array2<f32>) -> Lazy<f32> {
    let (b, c, d, e) = split_rows(a);
    let f = add(&b, &c);
    let g = add(&d, &e);
    let h = mul(&f, &g);
    concat_rows(&f, &h, &g)
}

fn targets() -> [(&'static str, Options); 2] {
    [
        ("interpreter", Options::interpreter()),
        ("cpu", Options::cpu()),
    ]
}

/// Evaluates `out` at opt levels 0 and 3 on both targets, checks every result against
/// `expected` and returns the kernel counts (unfused, fused) measured by `profile`.
fn check_everywhere(out: &Lazy<f32>, expected: &ArrayD<f32>, tol: f32) -> (usize, usize) {
    let mut counts = (0, 0);
    for (name, options) in targets() {
        for level in [0u8, 3] {
            let opts = options.clone().with_opt_level(level);
            let (got, prof) = ovl::profile(out, &opts, 1)
                .unwrap_or_else(|e| panic!("{name} at opt_level {level}: {e}"));
            assert_eq!(got.shape(), expected.shape(), "{name} opt {level}");
            for (i, (g, e)) in got.iter().zip(expected.iter()).enumerate() {
                assert!(
                    (g - e).abs() <= tol * e.abs().max(1.0),
                    "{name} opt {level}: element {i}: got {g}, expected {e}"
                );
            }
            if level == 0 {
                counts.0 = prof.kernel_count();
            } else {
                counts.1 = prof.kernel_count();
            }
        }
    }
    counts
}

#[test]
fn paper_example_five_operators_become_one() {
    let a = paper_input();
    let k = paper_graph(&a);
    let fusion = ovl::fusion(&k, 3).unwrap();
    println!("{}", fusion.report);
    assert_eq!(fusion.report.kernels_before, 5);
    assert_eq!(fusion.report.kernels_after, 1);
    assert_eq!(fusion.report.merges.len(), 4);
    assert!(fusion.report.refusals.is_empty());
    assert!(fusion
        .report
        .merges
        .iter()
        .all(|m| m.kind == MergeKind::Vertical));
    let counts = check_everywhere(&k, &paper_expected(&a).into_dyn(), 0.0);
    assert_eq!(counts, (5, 1));
}

#[test]
fn opt_levels_one_and_two() {
    let a = paper_input();
    // Level 1 needs no intermediate in memory: merged in the right order (mul into concat
    // first), even the paper's example fuses completely.
    let k = paper_graph(&a);
    assert_eq!(ovl::fusion(&k, 1).unwrap().report.kernels_after, 1);
    let zero = ovl::fusion(&k, 0).unwrap();
    assert_eq!(zero.report.kernels_after, 5);
    assert_eq!(zero.report.refusals.len(), 7, "{}", zero.report);
    // A requested intermediate (f) must stay in memory: level 1 refuses, level 2 merges.
    let (b, c, d, e) = split_rows(&a);
    let f = add(&b, &c);
    let g = add(&d, &e);
    let h = mul(&f, &g);
    let one = ovl::fusion((&f, &h), 1).unwrap();
    println!("{}", one.report);
    assert!(one.report.kernels_after > 1, "{}", one.report);
    assert!(!one
        .report
        .refusals_where(|r| matches!(r, Reason::OptLevel { level: 1, .. }))
        .is_empty());
    let two = ovl::fusion((&f, &h), 2).unwrap();
    assert_eq!(two.report.kernels_after, 1, "{}", two.report);
    let expected = paper_expected(&a).into_dyn();
    for level in [1u8, 2] {
        let got = ovl::evaluate_with(&k, &Options::cpu().with_opt_level(level)).unwrap();
        assert_eq!(got, expected, "opt_level {level}");
        let (gf, gh) = ovl::evaluate_with((&f, &h), &Options::cpu().with_opt_level(level)).unwrap();
        for j in 0..5 {
            let (want_f, want_g) = (a[[0, j]] + a[[1, j]], a[[2, j]] + a[[3, j]]);
            assert_eq!(
                (gf[[j]], gh[[j]]),
                (want_f, want_f * want_g),
                "opt_level {level}"
            );
        }
    }
}

#[test]
fn intermediate_that_is_requested_stays_an_output() {
    let a = paper_input();
    let (b, c, d, e) = split_rows(&a);
    let f = add(&b, &c);
    let g = add(&d, &e);
    let h = mul(&f, &g);
    let fusion = ovl::fusion((&f, &h), 3).unwrap();
    assert_eq!(fusion.report.kernels_after, 1, "{}", fusion.report);
    assert!(fusion.report.merges.iter().any(|m| !m.kept.is_empty()));
    for (name, options) in targets() {
        let (gf, gh) = ovl::evaluate_with((&f, &h), &options).unwrap();
        for j in 0..5 {
            let want_f = a[[0, j]] + a[[1, j]];
            let want_g = a[[2, j]] + a[[3, j]];
            assert_eq!(gf[[j]], want_f, "{name} f[{j}]");
            assert_eq!(gh[[j]], want_f * want_g, "{name} h[{j}]");
        }
    }
}

#[test]
fn fusion_is_deterministic() {
    let a = paper_input();
    let hash = |k: &Lazy<f32>| {
        let f = ovl::fusion(k, 3).unwrap();
        ovl::ir_tools::canonical_hash_operator_dag(&f.after)
    };
    let first = hash(&paper_graph(&a));
    for _ in 0..3 {
        assert_eq!(hash(&paper_graph(&a)), first);
    }
    let k = paper_graph(&a);
    let x = ovl::fusion(&k, 3).unwrap();
    let y = ovl::fusion(&k, 3).unwrap();
    assert_eq!(x.after, y.after);
    assert_eq!(x.report, y.report);
}

// ---------------------------------------------------------------- refusals

/// Running sum along each row: the write depends on the loop index.
#[operator]
fn cumsum_rows(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output_like(&x);
    let mut acc = variable(0.0f32);
    for j in 0..cols {
        acc += x[[r, j]];
        out[[r, j]] = acc;
    }
    out
}

/// Running sum along each column.
#[operator]
fn cumsum_cols(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let c = position_in([cols])[0];
    let out = output_like(&x);
    let mut acc = variable(0.0f32);
    for i in 0..rows {
        acc += x[[i, c]];
        out[[i, c]] = acc;
    }
    out
}

#[test]
fn cumsum_rows_then_cumsum_cols_is_refused_and_correct() {
    let x = Array2::from_shape_fn((4, 4), |(i, j)| (i * 4 + j) as f32 - 5.0);
    let y = cumsum_cols(cumsum_rows(&x));
    let fusion = ovl::fusion(&y, 3).unwrap();
    println!("{}", fusion.report);
    assert_eq!(fusion.report.kernels_after, 2);
    assert_eq!(fusion.report.refusals.len(), 1);
    assert_eq!(
        fusion.report.refusals[0].reason,
        Reason::WriteInControlFlow {
            output: 0,
            region: "staged loop"
        }
    );
    // The 2-D prefix sum, computed directly.
    let mut want = Array2::<f32>::zeros((4, 4));
    for i in 0..4 {
        for j in 0..4 {
            let mut s = 0.0;
            for a in 0..=i {
                for b in 0..=j {
                    s += x[[a, b]];
                }
            }
            want[[i, j]] = s;
        }
    }
    let counts = check_everywhere(&y, &want.into_dyn(), 1e-6);
    assert_eq!(counts, (2, 2));
}

/// Transpose, one worker per input element.
#[operator]
fn transpose(x: Tensor<f32>) -> Tensor<f32> {
    let [r, c] = x.dims::<2>();
    let p = position_in([r, c]);
    let out = output([c, r]);
    out[[p[1], p[0]]] = x[[p[0], p[1]]];
    out
}

/// Elementwise add of two matrices.
#[operator]
fn add2(x: Tensor<f32>, y: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = x[[p[0], p[1]]] + y[[p[0], p[1]]];
    out
}

#[test]
fn transpose_then_add_is_inlined() {
    let x = Array2::from_shape_fn((3, 3), |(i, j)| (i * 3 + j) as f32);
    let y = Array2::from_shape_fn((3, 3), |(i, j)| (i as f32) - 2.0 * j as f32);
    let z = add2(transpose(&x), &y);
    let fusion = ovl::fusion(&z, 3).unwrap();
    println!("{}", fusion.report);
    assert_eq!(fusion.report.kernels_after, 1);
    assert_eq!(fusion.report.merges[0].kind, MergeKind::Inlined);
    assert_eq!(fusion.report.merges[0].recompute, 1);
    let want = Array2::from_shape_fn((3, 3), |(i, j)| x[[j, i]] + y[[i, j]]);
    assert_eq!(check_everywhere(&z, &want.into_dyn(), 0.0), (2, 1));

    // Not square: the workgroups differ as well ([2, 3] and [3, 2]); still one kernel.
    let x = Array2::from_shape_fn((2, 3), |(i, j)| (i * 3 + j) as f32);
    let y = Array2::from_shape_fn((3, 2), |(i, j)| (i + j) as f32);
    let z = add2(transpose(&x), &y);
    let want = Array2::from_shape_fn((3, 2), |(i, j)| x[[j, i]] + y[[i, j]]);
    assert_eq!(check_everywhere(&z, &want.into_dyn(), 0.0), (2, 1));
}

/// Elementwise square.
#[operator]
fn square(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * x[[i]];
    out
}

/// A 3-point stencil: the sum of each element and its neighbours (the ends copy).
#[operator]
fn smooth(x: Tensor<f32>) -> Tensor<f32> {
    let n = x.shape()[0];
    let i = position_in([n])[0];
    let out = output_like(&x);
    if i > 0 && i < (n - 1) as i64 {
        out[[i]] = x[[i - 1]] + x[[i]] + x[[i + 1]];
    } else {
        out[[i]] = x[[i]];
    }
    out
}

#[test]
fn guarded_stencil_is_inlined() {
    let x = Array1::from_shape_fn(9, |i| i as f32 - 4.0);
    let y = smooth(square(&x));
    let fusion = ovl::fusion(&y, 3).unwrap();
    println!("{}", fusion.report);
    assert_eq!(fusion.report.kernels_after, 1);
    // Four reads per worker (three in the branch, one in the other): each square 4 times.
    assert_eq!(fusion.report.merges[0].kind, MergeKind::Inlined);
    assert_eq!(fusion.report.merges[0].recompute, 4);
    let sq: Vec<f32> = x.iter().map(|v| v * v).collect();
    let want = Array1::from_shape_fn(9, |i| {
        if i > 0 && i < 8 {
            sq[i - 1] + sq[i] + sq[i + 1]
        } else {
            sq[i]
        }
    });
    assert_eq!(check_everywhere(&y, &want.into_dyn(), 0.0), (2, 1));
}

/// The right neighbour of every element, unguarded: the last worker reads outside.
#[operator]
fn right_neighbour(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i + 1]];
    out
}

#[test]
fn a_read_that_may_fall_outside_keeps_its_fault() {
    let x = Array1::from_shape_fn(5, |i| i as f32);
    let y = right_neighbour(square(&x));
    let fusion = ovl::fusion(&y, 3).unwrap();
    println!("{}", fusion.report);
    assert_eq!(fusion.report.kernels_after, 2);
    match &fusion.report.refusals[0].reason {
        Reason::ReadOutsideWrites { read, axis, .. } => {
            assert_eq!((read.to_string().as_str(), *axis), ("[p0 + 1]", 0));
        }
        other => panic!("expected a read outside the writes, got {other}"),
    }
    // The same fault, fused or not, on both targets: worker 4 reads index 5 of 5.
    for (name, options) in targets() {
        for level in [0u8, 3] {
            let e = ovl::evaluate_with(&y, &options.clone().with_opt_level(level)).unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.contains("position [4]")
                    && msg.contains("index 5 on axis 0")
                    && msg.contains("size 5"),
                "{name} opt {level}: {msg}"
            );
        }
    }
}

/// Adds a vector to every row of a matrix (the vector is read by every row's worker).
#[operator]
fn add_row_vector(m: Tensor<f32>, v: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(m.shape());
    let out = output_like(&m);
    out[[p[0], p[1]]] = m[[p[0], p[1]]] + v[[p[1]]];
    out
}

/// Copies a row of a matrix into all rows (every worker of a column reads row 0).
#[operator]
fn spread_first_row(m: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(m.shape());
    let out = output_like(&m);
    out[[p[0], p[1]]] = m[[0, p[1]]];
    out
}

#[test]
fn cheap_broadcast_reads_are_inlined() {
    let m = Array2::from_shape_fn((4, 5), |(i, j)| (i * 5 + j) as f32);
    let v = Array1::from_shape_fn(5, |j| j as f32 - 2.0);
    // A bias vector computed by an operator, broadcast over the rows of a matrix: each
    // square is computed 4 times instead of stored and loaded.
    let y = add_row_vector(&m, square(&v));
    let fusion = ovl::fusion(&y, 3).unwrap();
    println!("{}", fusion.report);
    assert_eq!(fusion.report.kernels_after, 1);
    assert_eq!(fusion.report.merges[0].kind, MergeKind::Inlined);
    assert_eq!(fusion.report.merges[0].recompute, 4);
    let want = Array2::from_shape_fn((4, 5), |(i, j)| m[[i, j]] + v[j] * v[j]);
    assert_eq!(check_everywhere(&y, &want.into_dyn(), 0.0), (2, 1));

    // The same workgroup, but every row reads row 0.
    let y = spread_first_row(add2(&m, &m));
    let want = Array2::from_shape_fn((4, 5), |(_, j)| 2.0 * m[[0, j]]);
    assert_eq!(check_everywhere(&y, &want.into_dyn(), 0.0), (2, 1));
}

/// Writes a vector twice: first in a branch, then unconditionally in the other one.
#[operator]
fn shift_right_guarded(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    if i > 0 {
        out[[i]] = x[[i - 1]];
    } else {
        out[[i]] = x[[i]];
    }
    out
}

/// `x[idx[i]]`: a gather, whose read may fault (the index is data).
#[operator]
fn gather(x: Tensor<f32>, idx: Tensor<i64>) -> Tensor<f32> {
    let i = position_in(idx.shape())[0];
    let out = output(idx.shape());
    out[[i]] = x[[idx[[i]]]];
    out
}

#[test]
fn a_merge_that_would_make_a_cycle_is_refused() {
    // p feeds c directly and through d; d cannot merge into c (its writes are in branches),
    // so merging p into c would put the merged operator before and after d; p may fault, so
    // it is not recomputed either.
    let x = Array1::from_shape_fn(6, |i| i as f32 + 1.0);
    let idx = Array1::from(vec![5i64, 4, 3, 2, 1, 0]);
    let p = gather(&x, &idx);
    let d = shift_right_guarded(&p);
    let c = add(&p, &d);
    let fusion = ovl::fusion(&c, 3).unwrap();
    println!("{}", fusion.report);
    assert!(fusion
        .report
        .refusals
        .iter()
        .any(|r| matches!(&r.reason, Reason::WouldCreateCycle { through } if through.contains("shift_right_guarded"))));
    assert!(fusion
        .report
        .refusals
        .iter()
        .any(|r| matches!(&r.reason, Reason::ProducerMayFault { why } if why.contains("axis 0"))));
    let g: Vec<f32> = idx.iter().map(|&k| x[k as usize]).collect();
    let want = Array1::from_shape_fn(6, |i| g[i] + if i > 0 { g[i - 1] } else { g[i] });
    assert_eq!(check_everywhere(&c, &want.into_dyn(), 0.0), (3, 3));
}

/// Writes the running value of a variable, then changes the variable.
#[operator]
fn write_then_change(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let mut v = variable(x[[i]]);
    v += 1.0;
    out[[i]] = v;
    v += 100.0;
    out
}

#[test]
fn a_written_variable_is_handed_over_as_its_value_at_the_write() {
    let x = Array1::from_shape_fn(5, |i| i as f32);
    let y = square(write_then_change(&x));
    let fusion = ovl::fusion(&y, 3).unwrap();
    assert_eq!(fusion.report.kernels_after, 1);
    let want = Array1::from_shape_fn(5, |i| (i as f32 + 1.0) * (i as f32 + 1.0));
    assert_eq!(check_everywhere(&y, &want.into_dyn(), 0.0), (2, 1));
}

#[test]
fn independent_siblings_share_one_kernel() {
    let x = Array1::from_shape_fn(7, |i| i as f32 - 3.0);
    let y = Array1::from_shape_fn(7, |i| 2.0 * i as f32);
    let a = square(&x);
    let b = add(&x, &y);
    let fusion = ovl::fusion((&a, &b), 3).unwrap();
    assert_eq!(fusion.report.kernels_after, 1, "{}", fusion.report);
    assert_eq!(fusion.report.merges[0].kind, MergeKind::Horizontal);
    // Without horizontal fusion they stay apart.
    assert_eq!(ovl::fusion((&a, &b), 2).unwrap().report.kernels_after, 2);
    for (name, options) in targets() {
        let (ga, gb) = ovl::evaluate_with((&a, &b), &options).unwrap();
        for i in 0..7 {
            assert_eq!(ga[[i]], x[i] * x[i], "{name}");
            assert_eq!(gb[[i]], x[i] + y[i], "{name}");
        }
    }
}

// ---------------------------------------------------------------- arithmetic on handles

#[test]
fn arithmetic_on_lazy_handles() {
    let a: Lazy<f32> = Array2::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as f32).into();
    let b: Lazy<f32> = Array2::from_shape_fn((3, 4), |(i, j)| 1.0 + i as f32 - j as f32).into();
    let y = -(&a + &b) * &a - 2.0f32 * &b / 4.0f32 + 1.5f32;
    let fusion = ovl::fusion(&y, 3).unwrap();
    assert_eq!(fusion.report.kernels_before, 7);
    assert_eq!(fusion.report.kernels_after, 1);
    let want = Array2::from_shape_fn((3, 4), |(i, j)| {
        let (a, b) = ((i * 4 + j) as f32, 1.0 + i as f32 - j as f32);
        -(a + b) * a - 2.0 * b / 4.0 + 1.5
    });
    assert_eq!(check_everywhere(&y, &want.into_dyn(), 0.0), (7, 1));

    let i: Lazy<i32> = Array1::from(vec![1, -2, 3]).into();
    let j = &i * &i - 1;
    let got = ovl::evaluate_with(&j, &Options::interpreter()).unwrap();
    assert_eq!(got.into_raw_vec_and_offset().0, vec![0, 3, 8]);
}

#[test]
fn arithmetic_on_mismatched_shapes_is_an_error() {
    let a: Lazy<f32> = Array1::from(vec![1.0f32, 2.0, 3.0]).into();
    let b: Lazy<f32> = Array1::from(vec![1.0f32, 2.0]).into();
    let c = &a + &b; // no panic here
    let err = ovl::evaluate(&c).unwrap_err().to_string();
    assert!(err.contains("shapes [3] and [2] do not broadcast"), "{err}");
    assert!(
        err.contains("fusion.rs"),
        "the error names the user's file: {err}"
    );
}

// ---------------------------------------------------------------- the LSTM cell

use crate::lstm_small_ops;
use lstm_small_ops::lstm_cell;

#[test]
fn lstm_cell_fuses_into_one_kernel() {
    let (b, h) = (3usize, 8usize);
    let z = Array2::from_shape_fn((b, 4 * h), |(r, k)| {
        ((r * 31 + k * 7) % 23) as f32 * 0.2 - 2.0
    });
    let c = Array2::from_shape_fn((b, h), |(r, k)| ((r * 5 + k) % 9) as f32 * 0.3 - 1.2);
    let (zl, cl): (Lazy<f32>, Lazy<f32>) = (z.clone().into(), c.clone().into());
    let (new_c, new_h) = lstm_cell(&zl, &cl, 1.0);
    let fusion = ovl::fusion((&new_c, &new_h), 3).unwrap();
    println!("{}", fusion.report);
    assert_eq!(fusion.report.kernels_before, 11);
    assert_eq!(fusion.report.kernels_after, 1);
    assert!(fusion.report.refusals.is_empty());

    let sig = |x: f32| 1.0 / (1.0 + (-x).exp());
    let mut want_c = Array2::<f32>::zeros((b, h));
    let mut want_h = Array2::<f32>::zeros((b, h));
    for r in 0..b {
        for k in 0..h {
            let (i, j, f, o) = (
                z[[r, k]],
                z[[r, k + h]],
                z[[r, k + 2 * h]],
                z[[r, k + 3 * h]],
            );
            let nc = c[[r, k]] * sig(f + 1.0) + sig(i) * j.tanh();
            want_c[[r, k]] = nc;
            want_h[[r, k]] = nc.tanh() * sig(o);
        }
    }
    for (name, options) in targets() {
        for level in [0u8, 3] {
            let opts = options.clone().with_opt_level(level);
            let ((gc, gh), prof) = ovl::profile((&new_c, &new_h), &opts, 1).unwrap();
            assert_eq!(prof.kernel_count(), if level == 0 { 11 } else { 1 });
            for ((g, w), what) in gc
                .iter()
                .zip(want_c.iter())
                .map(|p| (p, "c"))
                .chain(gh.iter().zip(want_h.iter()).map(|p| (p, "h")))
            {
                assert!(
                    (g - w).abs() <= 1e-5,
                    "{name} opt {level} {what}: {g} vs {w}"
                );
            }
        }
    }
}

// ---------------------------------------------------------------- pictures

#[test]
fn dot_before_and_after() {
    let a = paper_input();
    let k = paper_graph(&a);
    let fusion = ovl::fusion(&k, 3).unwrap();
    let before = fusion.before_dot();
    let after = fusion.after_dot();
    assert_eq!(before.matches("shape=box").count(), 5);
    assert_eq!(after.matches("shape=box").count(), 1);
    assert!(before.contains("split_rows") && before.contains("concat_rows"));
    assert!(
        after.contains("split_rows+add+add+mul+concat_rows"),
        "{after}"
    );
    let both = fusion.to_dot();
    assert!(both.contains("cluster_before") && both.contains("cluster_after"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fusion.svg");
    match fusion.render(ovl::ImageFormat::Svg, &path) {
        Ok(()) => {
            let svg = std::fs::read_to_string(&path).unwrap();
            assert!(svg.contains("<svg"));
        }
        Err(ovl::FuseError::DotNotFound { .. }) => {
            println!("Graphviz `dot` is not installed: checked the error instead of the SVG");
        }
        Err(e) => panic!("rendering failed: {e}"),
    }
}

/// A worker-local scratch tensor: the sum of the first `k` multiples of each element.
#[operator]
fn scratch_sum(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let scratch = zeros::<f32>([4]);
    for k in 0..4i64 {
        scratch[[k]] = x[[i]] * (k + 1) as f32;
    }
    out[[i]] = scratch[[0]] + scratch[[1]] + scratch[[2]] + scratch[[3]];
    out
}

#[test]
fn local_tensors_of_both_operators_survive_the_merge() {
    let x = Array1::from_shape_fn(6, |i| i as f32 * 0.5 - 1.0);
    let y = scratch_sum(scratch_sum(&x));
    let fusion = ovl::fusion(&y, 3).unwrap();
    assert_eq!(fusion.report.kernels_after, 1, "{}", fusion.report);
    assert_eq!(fusion.after.operators[0].locals.len(), 2);
    let want = Array1::from_shape_fn(6, |i| x[i] * 10.0 * 10.0);
    assert_eq!(check_everywhere(&y, &want.into_dyn(), 0.0), (2, 1));
}

#[test]
fn fused_paper_example_reads_the_matrix_once_per_element() {
    let a = paper_input();
    let k = paper_graph(&a);
    let fusion = ovl::fusion(&k, 3).unwrap();
    let op = &fusion.after.operators[0];
    println!("{}", ovl::ir_tools::to_text(op));
    // One input (the matrix), one output (k), no intermediate in memory.
    assert_eq!(op.inputs.len(), 1);
    assert_eq!(op.outputs.len(), 1);
    let reads = op
        .expressions
        .iter()
        .filter(|e| e.code == ovl::ir::Op::Read as i32)
        .count();
    assert_eq!(reads, 4, "each element of the 4 rows is read once");
}

// ---------------------------------------------------------------- golden reports and pictures

/// Checks the report and the DOT pictures before and after of `fusion` against
/// `tests/golden/fusion/<case>.{report.txt,before.dot,after.dot}` (`OVL_BLESS=1` rewrites them).
fn assert_fusion_golden(case: &str, fusion: &ovl::Fusion) {
    use ovl_testkit::golden::assert_golden;
    let dir = "tests/golden/fusion";
    assert_golden(
        format!("{dir}/{case}.report.txt"),
        &fusion.report.to_string(),
    );
    assert_golden(format!("{dir}/{case}.before.dot"), &fusion.before_dot());
    assert_golden(format!("{dir}/{case}.after.dot"), &fusion.after_dot());
}

#[test]
fn golden_reports_and_pictures() {
    let a = paper_input();
    assert_fusion_golden("paper", &ovl::fusion(paper_graph(&a), 3).unwrap());
    assert_fusion_golden("paper_opt0", &ovl::fusion(paper_graph(&a), 0).unwrap());

    let z = Array2::from_shape_fn((3, 32), |(r, k)| (r * 32 + k) as f32 * 0.1);
    let c = Array2::from_shape_fn((3, 8), |(r, k)| (r * 8 + k) as f32 * 0.2);
    let (zl, cl): (Lazy<f32>, Lazy<f32>) = (z.into(), c.into());
    let (new_c, new_h) = lstm_cell(&zl, &cl, 1.0);
    assert_fusion_golden("lstm_cell", &ovl::fusion((&new_c, &new_h), 3).unwrap());

    let x = Array2::from_shape_fn((3, 3), |(i, j)| (i * 3 + j) as f32);
    let y = Array2::from_shape_fn((3, 3), |(i, j)| (i as f32) - 2.0 * j as f32);
    assert_fusion_golden(
        "transpose",
        &ovl::fusion(add2(transpose(&x), &y), 3).unwrap(),
    );

    let v = Array1::from_shape_fn(9, |i| i as f32 - 4.0);
    assert_fusion_golden("stencil", &ovl::fusion(smooth(square(&v)), 3).unwrap());

    let m = Array2::from_shape_fn((4, 5), |(i, j)| (i * 5 + j) as f32);
    let b = Array1::from_shape_fn(5, |j| j as f32 - 2.0);
    assert_fusion_golden(
        "broadcast",
        &ovl::fusion(add_row_vector(&m, square(&b)), 3).unwrap(),
    );

    let s = Array2::from_shape_fn((4, 4), |(i, j)| (i * 4 + j) as f32 - 5.0);
    assert_fusion_golden(
        "cumsum",
        &ovl::fusion(cumsum_cols(cumsum_rows(&s)), 3).unwrap(),
    );

    let w = Array1::from_shape_fn(6, |i| i as f32 + 1.0);
    let idx = Array1::from(vec![5i64, 4, 3, 2, 1, 0]);
    let p = gather(&w, &idx);
    let d = shift_right_guarded(&p);
    assert_fusion_golden("cycle", &ovl::fusion(add(&p, &d), 3).unwrap());

    let x = Array2::from_shape_fn((4, 64), |(i, j)| (i * 64 + j) as f32 * 0.01);
    // At opt_level 2, where the cost model's refusal stands (3 loops the consumer instead).
    assert_fusion_golden("cost", &ovl::fusion(sub_stat(&x, row_max(&x)), 2).unwrap());
    assert_fusion_golden("softmax", &ovl::fusion(softmax_small(&x), 3).unwrap());

    let cases = [
        "cost",
        "softmax",
        "paper",
        "paper_opt0",
        "lstm_cell",
        "transpose",
        "stencil",
        "broadcast",
        "cumsum",
        "cycle",
    ];
    let files: Vec<String> = cases
        .iter()
        .flat_map(|c| ["report.txt", "before.dot", "after.dot"].map(|e| format!("{c}.{e}")))
        .collect();
    ovl_testkit::golden::assert_only_files("tests/golden/fusion", &files);
}

// ---------------------------------------------------------------- index substitution: softmax,
// layernorm and their gradients from small operators

/// The maximum of each row, kept as a `[rows, 1]` column.
#[operator]
fn row_max(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows, 1]);
    let mut m = max_of(x[[r, 0i64]]);
    for k in 1..cols {
        m.update(x[[r, k]]);
    }
    out[[r, 0i64]] = m;
    out
}

/// The sum of each row, kept as a `[rows, 1]` column.
#[operator]
fn row_sum(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows, 1]);
    let mut s = sum_of(0.0f32);
    for k in 0..cols {
        s += x[[r, k]];
    }
    out[[r, 0i64]] = s;
    out
}

/// `x - s` with a row statistic `s` (`[rows, 1]`) broadcast along the row.
#[operator]
fn sub_stat(x: Tensor<f32>, s: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = x[[p[0], p[1]]] - s[[p[0], 0i64]];
    out
}

/// `x / s` with a row statistic `s` (`[rows, 1]`) broadcast along the row.
#[operator]
fn div_stat(x: Tensor<f32>, s: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = x[[p[0], p[1]]] / s[[p[0], 0i64]];
    out
}

/// Elementwise `exp` of a matrix.
#[operator]
fn exp2d(x: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = exp(x[[p[0], p[1]]]);
    out
}

/// Softmax along the rows from five small operators.
fn softmax_small(x: &Array2<f32>) -> Lazy<f32> {
    let m = row_max(x);
    let e = exp2d(sub_stat(x, &m));
    let s = row_sum(&e);
    div_stat(&e, &s)
}

/// Softmax of each row, in plain Rust (f32, the same order of operations per element).
fn softmax_rows(x: &Array2<f32>) -> Array2<f32> {
    let mut y = x.clone();
    for mut row in y.rows_mut() {
        let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        row.mapv_inplace(|v| (v - m).exp());
        let s: f32 = row.iter().sum();
        row.mapv_inplace(|v| v / s);
    }
    y
}

/// Every element equal as bits.
fn assert_same_bits(a: &ArrayD<f32>, b: &ArrayD<f32>, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}");
    for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
        assert_eq!(x.to_bits(), y.to_bits(), "{what}: element {i}: {x} vs {y}");
    }
}

/// Fused and unfused results of `out` are bit for bit the same on each target.
fn fused_equals_unfused(out: &Lazy<f32>) {
    for (name, options) in targets() {
        let unfused = ovl::evaluate_with(out, &options.clone().with_opt_level(0)).unwrap();
        let fused = ovl::evaluate_with(out, &options).unwrap();
        assert_same_bits(&fused, &unfused, name);
    }
}

#[test]
fn softmax_from_small_operators_fuses_into_one_kernel() {
    let x = Array2::from_shape_fn((5, 37), |(i, j)| {
        ((i * 37 + j * 11) % 23) as f32 * 0.3 - 3.0
    });
    let y = softmax_small(&x);
    let fusion = ovl::fusion(&y, 3).unwrap();
    println!("{}", fusion.report);
    assert_eq!(fusion.report.kernels_before, 5);
    assert_eq!(fusion.report.kernels_after, 1);
    // Sub and exp are recomputed inside the sum's loop, once per element; the maximum and
    // the sum are not recomputed per element: the division runs as a loop in each row's
    // worker, after them.
    assert!(fusion
        .report
        .merges
        .iter()
        .any(|m| m.kind == MergeKind::Inlined
            && m.first.contains("exp2d")
            && m.second.contains("row_sum")));
    assert!(fusion
        .report
        .merges
        .iter()
        .any(|m| m.kind == MergeKind::Looped && m.second.contains("div_stat")));
    assert!(fusion.report.refusals.is_empty(), "{}", fusion.report);
    // The row's `exp(x - max)`, computed by the sum's loop, is kept in a row buffer for the
    // loop that divides: one exp per element.
    let op = &fusion.after.operators[0];
    let exps = op
        .expressions
        .iter()
        .filter(|e| e.code == ovl::ir::Op::Exp as i32)
        .count();
    assert_eq!(exps, 1, "{}", ovl::ir_tools::to_text(op));
    assert_eq!(op.locals.len(), 1);
    assert_eq!(op.locals[0].shape, vec![37]);
    let kept = &fusion.report.row_buffers;
    assert_eq!(kept.len(), 1, "{}", fusion.report);
    assert_eq!(
        (kept[0].value.as_str(), kept[0].buffer.as_str()),
        ("exp", "f32[37]")
    );
    assert!(fusion
        .report
        .to_string()
        .contains("kept in a row buffer (f32[37])"));
    let counts = check_everywhere(&y, &softmax_rows(&x).into_dyn(), 2e-6);
    assert_eq!(counts, (5, 1));
    fused_equals_unfused(&y);
}

#[test]
fn recomputing_a_row_statistic_per_element_is_refused() {
    let x = Array2::from_shape_fn((4, 64), |(i, j)| (i * 64 + j) as f32 * 0.01);
    let y = sub_stat(&x, row_max(&x));
    // At opt_level 2 nothing else can merge them.
    let fusion = ovl::fusion(&y, 2).unwrap();
    println!("{}", fusion.report);
    assert_eq!(fusion.report.kernels_after, 2);
    let r = &fusion.report.refusals[0];
    match &r.reason {
        Reason::TooCostly {
            recompute, read, ..
        } => {
            assert_eq!(*recompute, 64);
            assert_eq!(read.to_string(), "[p0, 0]");
        }
        other => panic!("expected the cost model's refusal, got {other}"),
    }
    assert!(r.to_string().contains("~64x its work"), "{r}");
    // The reason is on the dashed edge of the picture.
    assert!(fusion.after_dot().contains("~64x its work"));
    let want = Array2::from_shape_fn((4, 64), |(i, j)| {
        x[[i, j]] - (0..64).map(|k| x[[i, k]]).fold(f32::MIN, f32::max)
    });
    assert_eq!(check_everywhere(&y, &want.into_dyn(), 0.0), (2, 1));

    // At opt_level 3 the consumer runs as a loop in each row's worker, after the maximum:
    // one kernel, nothing recomputed.
    let fusion = ovl::fusion(&y, 3).unwrap();
    assert_eq!(fusion.report.kernels_after, 1, "{}", fusion.report);
    assert!(fusion.report.refusals.is_empty());
    let merge = &fusion.report.merges[0];
    assert_eq!(merge.kind, MergeKind::Looped);
    assert!(
        merge
            .to_string()
            .contains("run as a loop in each of its workers"),
        "{merge}"
    );
    assert_eq!(merge.recompute, 0);
    assert_eq!(fusion.after.operators[0].workgroup_shape, vec![4, 1]);
}

/// The row maximum of stdlib's kind, `[rows, 1]`, with its gradient (`extreme_grad`'s rule:
/// the output gradient flows to every element equal to the maximum).
fn row_max_with_grad(x: &Lazy<f32>) -> Lazy<f32> {
    let m = row_max(x);
    assert!(ovl::set_gradient(&m, |c| {
        vec![Some(
            row_max_grad(
                c.input::<f32>(0),
                c.output::<f32>(0),
                c.output_grad::<f32>(0),
            )
            .into_untyped(),
        )]
    }));
    m
}

#[operator]
fn row_max_grad(x: Tensor<f32>, m: Tensor<f32>, g: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    let v = x[[p[0], p[1]]];
    out[[p[0], p[1]]] = select(v == m[[p[0], 0i64]], g[[p[0], 0i64]], 0.0);
    out
}

fn softmax_ops(x: &Lazy<f32>) -> Lazy<f32> {
    use ovl_stdlib as ops;
    let rows = x.shape()[0];
    let m = row_max_with_grad(x);
    let e = ops::exp(ops::sub(x, &m));
    let s = ops::reduce_to(&e, &[rows, 1]);
    ops::div(&e, &s)
}

fn layernorm_ops(x: &Lazy<f32>, eps: f32) -> Lazy<f32> {
    use ovl_stdlib as ops;
    let (rows, cols) = (x.shape()[0], x.shape()[1]);
    let n = Lazy::from(ndarray::arr0(cols as f32));
    let mean = ops::div(ops::reduce_to(x, &[rows, 1]), &n);
    let d = ops::sub(x, &mean);
    let var = ops::div(ops::reduce_to(ops::mul(&d, &d), &[rows, 1]), &n);
    let std = ops::sqrt(ops::add(var, Lazy::from(ndarray::arr0(eps))));
    ops::div(&d, &std)
}

fn layernorm_rows(x: &Array2<f32>, eps: f32) -> Array2<f32> {
    let n = x.ncols() as f32;
    let mut y = x.clone();
    for mut row in y.rows_mut() {
        let mean = row.sum() / n;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
        let std = (var + eps).sqrt();
        row.mapv_inplace(|v| (v - mean) / std);
    }
    y
}

#[test]
fn softmax_and_layernorm_from_stdlib_operators_forward_and_backward() {
    let (rows, cols) = (6usize, 33usize);
    let xa = Array2::from_shape_fn((rows, cols), |(i, j)| {
        ((i * 31 + j * 7) % 19) as f32 * 0.25 - 2.0
    });
    let dya = Array2::from_shape_fn((rows, cols), |(i, j)| {
        ((i * 5 + j * 3) % 7) as f32 * 0.5 - 1.5
    });
    let x: Lazy<f32> = xa.clone().into();
    let dy: Lazy<f32> = dya.clone().into();
    let eps = 1e-3f32;

    // Softmax: y = softmax(x), dx = y * (dy - sum(dy * y)).
    let y = softmax_ops(&x);
    let fwd = ovl::fusion(&y, 3).unwrap();
    println!("softmax forward\n{}", fwd.report);
    assert!(fwd.report.kernels_after <= 2, "{}", fwd.report);
    let want_y = softmax_rows(&xa);
    check_everywhere(&y, &want_y.clone().into_dyn(), 2e-6);
    fused_equals_unfused(&y);
    let dx = ovl::backward(&[(&y, &dy)], &[&x]).unwrap().of(&x).unwrap();
    let bwd = ovl::fusion(&dx, 3).unwrap();
    println!("softmax backward\n{}", bwd.report);
    assert!(bwd.report.kernels_after <= 2, "{}", bwd.report);
    let want_dx = Array2::from_shape_fn((rows, cols), |(i, j)| {
        let dot: f32 = (0..cols).map(|k| dya[[i, k]] * want_y[[i, k]]).sum();
        want_y[[i, j]] * (dya[[i, j]] - dot)
    });
    check_everywhere(&dx, &want_dx.into_dyn(), 1e-4);
    fused_equals_unfused(&dx);

    // Layernorm: dx = (dy - mean(dy) - xhat * mean(dy * xhat)) / std.
    let y = layernorm_ops(&x, eps);
    let fwd = ovl::fusion(&y, 3).unwrap();
    println!("layernorm forward\n{}", fwd.report);
    assert!(fwd.report.kernels_after <= 2, "{}", fwd.report);
    let want_y = layernorm_rows(&xa, eps);
    check_everywhere(&y, &want_y.clone().into_dyn(), 1e-5);
    fused_equals_unfused(&y);
    let dx = ovl::backward(&[(&y, &dy)], &[&x]).unwrap().of(&x).unwrap();
    let bwd = ovl::fusion(&dx, 3).unwrap();
    println!("layernorm backward\n{}", bwd.report);
    assert!(bwd.report.kernels_after <= 2, "{}", bwd.report);
    let n = cols as f32;
    let want_dx = Array2::from_shape_fn((rows, cols), |(i, j)| {
        let mean = xa.row(i).sum() / n;
        let var = xa
            .row(i)
            .iter()
            .map(|v| (v - mean) * (v - mean))
            .sum::<f32>()
            / n;
        let std = (var + eps).sqrt();
        let xhat = |k: usize| (xa[[i, k]] - mean) / std;
        let mdy: f32 = dya.row(i).sum() / n;
        let mdyx: f32 = (0..cols).map(|k| dya[[i, k]] * xhat(k)).sum::<f32>() / n;
        (dya[[i, j]] - mdy - xhat(j) * mdyx) / std
    });
    check_everywhere(&dx, &want_dx.into_dyn(), 1e-4);
    fused_equals_unfused(&dx);
}

/// Reverses a vector: the write is `[n - 1 - p0]`.
#[operator]
fn reverse_write(x: Tensor<f32>) -> Tensor<f32> {
    let n = x.shape()[0];
    let i = position_in([n])[0];
    let out = output_like(&x);
    out[[(n as i64 - 1) - i]] = x[[i]] * 2.0;
    out
}

/// Every second element of a vector twice as long: a strided read.
#[operator]
fn every_second(x: Tensor<f32>) -> Tensor<f32> {
    let n = x.shape()[0] / 2;
    let i = position_in([n])[0];
    let out = output([n]);
    out[[i]] = x[[2 * i]] + x[[2 * i + 1]];
    out
}

#[test]
fn reversed_writes_and_strided_reads_are_inlined() {
    let x = Array1::from_shape_fn(10, |i| i as f32 * 0.5 - 1.0);
    let y = every_second(reverse_write(square(&x)));
    let fusion = ovl::fusion(&y, 3).unwrap();
    println!("{}", fusion.report);
    assert_eq!(fusion.report.kernels_after, 1, "{}", fusion.report);
    let r: Vec<f32> = (0..10).map(|k| x[9 - k] * x[9 - k] * 2.0).collect();
    let want = Array1::from_shape_fn(5, |i| r[2 * i] + r[2 * i + 1]);
    assert_eq!(check_everywhere(&y, &want.into_dyn(), 0.0), (3, 1));
}

/// Spreads a vector over the even elements of one twice as long (the odd ones stay 0).
#[operator]
fn spread_even(x: Tensor<f32>) -> Tensor<f32> {
    let n = x.shape()[0];
    let i = position_in([n])[0];
    let out = output([2 * n]);
    out[[2 * i]] = x[[i]];
    out
}

/// How many steps of 1 from 0 reach each element (at most 50): a read inside a while loop.
#[operator]
fn steps_to(x: Tensor<f32>) -> Tensor<i64> {
    let i = position_in(x.shape())[0];
    let out = output::<i64>(x.shape());
    let mut n = variable(0i64);
    while (n as f32) < x[[i]] && n < 50 {
        n += 1;
    }
    out[[i]] = n;
    out
}

#[test]
fn writes_that_cannot_be_inverted_and_reads_in_while_loops_are_refused() {
    let x = Array1::from_shape_fn(4, |i| i as f32 - 1.5);
    let y = square(spread_even(&x));
    let fusion = ovl::fusion(&y, 3).unwrap();
    println!("{}", fusion.report);
    match &fusion.report.refusals[0].reason {
        Reason::NotInvertible { write, .. } => assert_eq!(write.to_string(), "[2*p0]"),
        other => panic!("expected a write that cannot be inverted, got {other}"),
    }
    let want = Array1::from_shape_fn(8, |k| if k % 2 == 0 { x[k / 2] * x[k / 2] } else { 0.0 });
    assert_eq!(check_everywhere(&y, &want.into_dyn(), 0.0), (2, 2));

    let x = Array1::from_shape_fn(6, |i| i as f32 * 0.7 - 1.0);
    let y = steps_to(reverse_write(&x));
    let fusion = ovl::fusion(&y, 3).unwrap();
    println!("{}", fusion.report);
    assert_eq!(fusion.report.kernels_after, 2);
    assert_eq!(
        fusion.report.refusals[0].reason,
        Reason::UnknownRecomputeCount { output: 0 }
    );
    let want = Array1::from_shape_fn(6, |k| {
        let r = 2.0 * x[5 - k];
        (0..=50i64).find(|&n| !((n as f32) < r && n < 50)).unwrap()
    });
    for (name, options) in targets() {
        for level in [0u8, 3] {
            let got = ovl::evaluate_with(&y, &options.clone().with_opt_level(level)).unwrap();
            assert_eq!(got, want.clone().into_dyn(), "{name} opt {level}");
        }
    }
}

/// The report's epilogue merge (there must be one).
fn epilogue_merge(report: &ovl::FusionReport) -> &ovl::Merge {
    report
        .merges
        .iter()
        .find(|m| m.kind == MergeKind::Epilogue)
        .unwrap_or_else(|| panic!("an epilogue merge: {report}"))
}

fn affine_rows(y: &Array2<f32>, g: &Array1<f32>, b: &Array1<f32>) -> Array2<f32> {
    let mut z = y.clone();
    for mut row in z.rows_mut() {
        for (j, v) in row.iter_mut().enumerate() {
            *v = *v * g[j] + b[j];
        }
    }
    z
}

/// `layernorm(x) * gamma + beta`: the affine step runs at the end of each iteration of the
/// loop in which layernorm writes a row (an epilogue), so the normalized rows never go through
/// memory: 1 kernel instead of 2, the same bits.
#[test]
fn an_elementwise_consumer_runs_in_the_loop_that_writes_each_row() {
    use ovl_stdlib as ops;
    let (rows, cols) = (5usize, 37usize);
    let xa = Array2::from_shape_fn((rows, cols), |(i, j)| {
        ((i * 13 + j * 7) % 23) as f32 * 0.3 - 3.0
    });
    let g = Array1::from_shape_fn(cols, |j| 0.5 + j as f32 * 0.05);
    let b = Array1::from_shape_fn(cols, |j| j as f32 * 0.1 - 1.0);
    let x: Lazy<f32> = xa.clone().into();
    let y = ops::layernorm(&x, 1e-3);
    let gl = ops::broadcast_to(Lazy::from(g.clone().into_dyn()), &[rows, cols]);
    let bl = ops::broadcast_to(Lazy::from(b.clone().into_dyn()), &[rows, cols]);
    let z = ops::add(ops::mul(&y, &gl), &bl);

    let fusion = ovl::fusion(&z, 3).unwrap();
    println!("{}", fusion.report);
    assert_eq!(fusion.report.kernels_after, 1, "{}", fusion.report);
    assert!(fusion.report.refusals.is_empty(), "{}", fusion.report);
    let epilogue = epilogue_merge(&fusion.report);
    assert!(epilogue.first.contains("normalize"), "{epilogue}");
    assert!(epilogue.kept.is_empty(), "{epilogue}");
    assert!(epilogue
        .to_string()
        .contains("run in the loop that writes each row"));
    // The merged kernel writes only the result: the normalized rows stay in registers.
    assert_eq!(fusion.after.operators[0].outputs.len(), 1);
    // At opt_level 2 (no epilogues) the two stay apart.
    assert_eq!(ovl::fusion(&z, 2).unwrap().report.kernels_after, 2);

    let want = affine_rows(&layernorm_rows(&xa, 1e-3), &g, &b);
    let counts = check_everywhere(&z, &want.into_dyn(), 1e-5);
    assert_eq!(counts.1, 1);
    fused_equals_unfused(&z);
}

/// A row kernel over a 3-d tensor whose leading axis has extent 1 (a batch of one: the stdlib
/// softmax's workgroup is `[1, rows]`, the consumer's `[1, rows, cols]`) takes the same
/// epilogue as over the 2-d tensor: rebased, its write's index on that axis is the constant 0.
#[test]
fn an_epilogue_takes_a_row_kernel_over_a_batch_of_one() {
    use ovl_stdlib as ops;
    let (rows, cols) = (3usize, 10usize);
    let xa = ndarray::Array3::from_shape_fn((1, rows, cols), |(_, i, j)| {
        ((i * 7 + j * 3) % 13) as f32 * 0.25 - 1.0
    });
    let x: Lazy<f32> = xa.clone().into_dyn().into();
    let z = ops::add(&x, ops::softmax(&x));
    let fusion = ovl::fusion(&z, 3).unwrap();
    assert_eq!(fusion.report.kernels_after, 1, "{}", fusion.report);
    epilogue_merge(&fusion.report);
    let x2 = xa.index_axis(ndarray::Axis(0), 0).to_owned();
    let want = &x2 + &softmax_rows(&x2);
    check_everywhere(&z, &want.insert_axis(ndarray::Axis(0)).into_dyn(), 2e-6);
    fused_equals_unfused(&z);
}

/// An epilogue whose producer's rows are also requested keeps them as an output; one that
/// reads them at another position (the next column) is not an epilogue.
#[test]
fn an_epilogue_keeps_a_requested_row_and_reads_only_its_own_position() {
    use ovl_stdlib as ops;
    let (rows, cols) = (4usize, 20usize);
    let xa = Array2::from_shape_fn((rows, cols), |(i, j)| ((i * 3 + j * 5) % 11) as f32 * 0.4);
    let x: Lazy<f32> = xa.clone().into();
    let y = ops::softmax(&x);
    let z = ops::mul(&y, Lazy::from(ndarray::arr0(3.0f32)));

    let fusion = ovl::fusion((&y, &z), 3).unwrap();
    println!("{}", fusion.report);
    assert_eq!(fusion.report.kernels_after, 1, "{}", fusion.report);
    let epilogue = epilogue_merge(&fusion.report);
    assert_eq!(epilogue.kept.len(), 1, "{epilogue}");
    assert_eq!(fusion.after.operators[0].outputs.len(), 2);
    for (name, options) in targets() {
        let (got_y, got_z) = ovl::evaluate_with((&y, &z), &options).unwrap();
        let (ref_y, ref_z) = ovl::evaluate_with((&y, &z), &options.with_opt_level(0)).unwrap();
        assert_same_bits(&got_y, &ref_y, name);
        assert_same_bits(&got_z, &ref_z, name);
        for (a, b) in got_y.iter().zip(got_z.iter()) {
            assert_eq!((a * 3.0).to_bits(), b.to_bits());
        }
    }

    // Reading the next column's value (a stencil) is not an epilogue: the element is written
    // in a later iteration.
    let shifted = next_column(&y);
    let fusion = ovl::fusion(&shifted, 3).unwrap();
    assert!(
        fusion
            .report
            .merges
            .iter()
            .all(|m| m.kind != MergeKind::Epilogue),
        "{}",
        fusion.report
    );
    let want = softmax_rows(&xa);
    let want = Array2::from_shape_fn((rows, cols), |(i, j)| want[[i, (j + 1) % cols]]);
    check_everywhere(&shifted, &want.into_dyn(), 2e-6);
}

#[operator]
fn next_column(y: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = y.dims::<2>();
    let p = position_in([rows, cols]);
    let out = output_like(&y);
    out[[p[0], p[1]]] = y[[p[0], (p[1] + 1) % cols as i64]];
    out
}

/// `fusion_with` fuses as `evaluate_with` would for the target: a softmax over rows of 8192
/// f32 keeps its `exp` in a 32 KiB row buffer for the CPU, not for a GPU (16 KiB at most).
#[test]
fn fusion_for_a_target_uses_its_row_budget() {
    let x = ovl::Lazy::from(ndarray::Array2::<f32>::zeros((2, 8192)));
    let y = ovl_stdlib::softmax(&x);
    let cpu = ovl::fusion_with(&y, &Options::cpu()).unwrap();
    let gpu = ovl::fusion_with(&y, &Options::cuda_validate()).unwrap();
    assert_eq!(cpu.report.row_buffers.len(), 1, "{}", cpu.report);
    assert!(gpu.report.row_buffers.is_empty(), "{}", gpu.report);
    assert_eq!(ovl::fusion(&y, 3).unwrap().report, cpu.report);
}

/// An unrolled LSTM layer (stdlib products and cell, `steps` steps, batch 2, hidden 3): every
/// step's `h`, the weights `[W, U, b]` and a seed for `sum(h * seed)`.
fn unrolled_layer(steps: usize) -> (Vec<Lazy<f32>>, [Lazy<f32>; 3], Lazy<f32>) {
    let (b, h) = (2usize, 3usize);
    let value = |shape: &[usize], seed: f32| {
        let n: usize = shape.iter().product();
        let data = (0..n).map(|i| (i as f32 * 0.37 + seed).sin()).collect();
        Lazy::from(ArrayD::from_shape_vec(ndarray::IxDyn(shape), data).expect("shape"))
    };
    let (w, u, bias) = (
        value(&[h, 4 * h], 0.1),
        value(&[h, 4 * h], 0.2),
        value(&[4 * h], 0.3),
    );
    let (mut h_t, mut c_t) = (value(&[b, h], 0.4), value(&[b, h], 0.5));
    let mut hs = Vec::new();
    for t in 0..steps {
        let x_t = value(&[b, h], t as f32);
        let z = &(&ovl_stdlib::matmul(&x_t, &w) + &ovl_stdlib::matmul(&h_t, &u)) + &bias;
        let g = ovl_stdlib::split(&z, 1, 4);
        let c = &(&ovl_stdlib::sigmoid(&g[1]) * &c_t)
            + &(&ovl_stdlib::sigmoid(&g[0]) * &ovl_stdlib::tanh(&g[2]));
        h_t = &ovl_stdlib::sigmoid(&g[3]) * &ovl_stdlib::tanh(&c);
        c_t = c;
        hs.push(h_t.clone());
    }
    (hs, [w, u, bias], value(&[b, h], 0.6))
}

/// The fused graph of [`unrolled_layer`] at the default level, forward (every step's `h`) or
/// forward + backward (the gradients of W, U and b): its kernel count, its expressions in all,
/// and the most expressions of one kernel.
fn unrolled_layer_fusion(steps: usize, backward: bool) -> (usize, usize, usize) {
    let (hs, [w, u, bias], seed) = unrolled_layer(steps);
    if !backward {
        return fused_sizes(&ovl::fusion(hs.as_slice(), 3).expect("fusion"));
    }
    let pairs: Vec<(&Lazy<f32>, &Lazy<f32>)> = hs.iter().map(|h| (h, &seed)).collect();
    let grads = ovl::backward(&pairs, &[&w, &u, &bias]).expect("backward");
    let outs: Vec<Lazy<f32>> = [&w, &u, &bias]
        .iter()
        .map(|v| grads.of_or_zeros(v))
        .collect();
    fused_sizes(&ovl::fusion(outs.as_slice(), 3).expect("fusion"))
}

/// A fused graph's kernel count, expressions in all and most expressions of one kernel other
/// than the copies in and out of the stacked input product (`stack_rows`, `unstack_rows`: a
/// read or write per step by design).
fn fused_sizes(fusion: &ovl::Fusion) -> (usize, usize, usize) {
    let sizes = fusion.after.operators.iter().map(|o| o.expressions.len());
    let largest = fusion
        .after
        .operators
        .iter()
        .filter(|o| !o.name.contains("stack_rows"))
        .map(|o| o.expressions.len())
        .max();
    (
        fusion.report.kernels_after,
        sizes.sum(),
        largest.unwrap_or(0),
    )
}

#[test]
fn an_unrolled_recurrence_fuses_into_a_graph_that_grows_linearly_with_its_steps() {
    // Index substitution copies a producer that another reader keeps into its consumer; along
    // a recurrence (the forward values read by the next step and by the backward pass) copies
    // of copies grew with the number of steps. No operator is computed more than 4 times now,
    // so twice the steps make about twice the fused code.
    let (k8, e8, _) = unrolled_layer_fusion(8, true);
    let (k16, e16, _) = unrolled_layer_fusion(16, true);
    assert!(k16 <= 2 * k8 + 2, "{k8} kernels at 8 steps, {k16} at 16");
    assert!(
        e16 * 10 <= e8 * 23,
        "{e8} expressions at 8 steps, {e16} at 16: more than 2.3x"
    );
}

#[test]
fn a_copy_that_loads_more_than_it_saves_is_refused() {
    // Step t's kernel reads the cell state of step t - 1. A copy of the kernel that computes
    // it (which stays: the next product reads its h) would load that step's six gate values
    // and the state before it to save one load: refused, with the reason, and the forward
    // layer's kernels keep no copy of a producer that stays.
    let (hs, _, _) = unrolled_layer(4);
    let fusion = ovl::fusion(hs.as_slice(), 3).expect("fusion");
    // (Tried after the vertical merge, which would make a cycle through the product.)
    let loads_more =
        |r: &Reason| matches!(r, Reason::CopyLoadsMore { loads, saved, .. } if loads > saved);
    let refused = fusion
        .report
        .refusals
        .iter()
        .filter(|r| loads_more(&r.reason) || r.also.iter().any(|(_, why)| loads_more(why)))
        .count();
    assert_eq!(refused, 3, "{}", fusion.report);
    let copies: Vec<_> = fusion
        .report
        .merges
        .iter()
        .filter(|m| m.kind == MergeKind::Inlined && !m.kept.is_empty())
        .collect();
    assert!(copies.is_empty(), "{copies:?}");
    // The values are the interpreter's.
    let want = ovl::evaluate_with(hs.as_slice(), &Options::interpreter()).expect("interpreter");
    let got = ovl::evaluate_with(hs.as_slice(), &Options::cpu()).expect("cpu");
    for (g, w) in got.iter().zip(&want) {
        for (x, y) in g.iter().zip(w.iter()) {
            assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{x} vs {y}");
        }
    }
}

#[test]
fn no_kernel_of_an_unrolled_recurrence_grows_with_its_steps() {
    // Each copy of a producer that stays may repeat a few operations in its consumer, and the
    // copies a kernel holds add up: the cell state of step t - 1 copied into step t's kernel
    // once, not the whole chain of steps before it (which made the last kernels of a 35-step
    // layer recompute every step, and the layer twice as slow as unfused).
    for backward in [false, true] {
        let (_, _, largest8) = unrolled_layer_fusion(8, backward);
        let (_, _, largest16) = unrolled_layer_fusion(16, backward);
        assert!(
            largest16 <= largest8,
            "backward {backward}: the largest kernel has {largest8} expressions at 8 steps, \
             {largest16} at 16"
        );
    }
}
