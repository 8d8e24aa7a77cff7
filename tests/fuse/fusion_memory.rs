//! The fusion cost model sees memory access: a producer whose loops read elements that are
//! neighbours for neighbouring workers (a product written as one worker per element, reading
//! `b[k, j]`) is not recomputed where neighbouring consumer workers would recompute producer
//! workers far apart (a transpose), and still is where they stay neighbours (the LSTM cell's
//! gates at column offsets); and a merge whose whole kernel is predicted slower than the
//! kernels it replaces (a transposed operand substituted into such a product) is refused.
//! Outcomes only: what merged, what was refused and why, values.

use crate::lstm_small_ops;

use lstm_small_ops::{lstm_cell, pseudo_random};
use ndarray::{Array2, ArrayD};
use ovl::prelude::*;
use ovl::{MergeKind, Reason};

use crate::product_per_element;
use product_per_element::product_per_element;

/// `a · b` in f64, summed in the operator's order, rounded to f32 at each step like it.
fn product(a: &Array2<f32>, b: &Array2<f32>) -> Array2<f32> {
    Array2::from_shape_fn((a.nrows(), b.ncols()), |(i, j)| {
        (0..a.ncols()).fold(0.0f32, |acc, t| acc + a[[i, t]] * b[[t, j]])
    })
}

fn assert_close(got: &ArrayD<f32>, want: &ArrayD<f32>, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}");
    for (i, (g, w)) in got.iter().zip(want.iter()).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * w.abs().max(1.0),
            "{what}: element {i}: got {g}, expected {w}"
        );
    }
}

#[test]
fn a_product_read_through_a_transpose_is_not_recomputed() {
    let a = pseudo_random((9, 40), 1);
    let b = pseudo_random((40, 70), 2);
    let z = product_per_element(&a, &b);
    let zt = ovl_stdlib::transpose(&z, &[1, 0]);
    let y = ovl_stdlib::mul(&zt, &zt);
    let fusion = ovl::fusion(&y, 3).unwrap();
    println!("{}", fusion.report);
    // The transpose and the square merge; the product stays a kernel of its own.
    assert_eq!(fusion.report.kernels_before, 3);
    assert_eq!(fusion.report.kernels_after, 2, "{}", fusion.report);
    let refusal = fusion
        .report
        .refusals
        .iter()
        .find(|r| r.producer.contains("product_per_element"))
        .unwrap_or_else(|| panic!("no refusal of the product: {}", fusion.report));
    match &refusal.reason {
        Reason::StridedRecompute { read, reads, .. } => {
            assert_eq!(read.to_string(), "[p1, p0]");
            assert_eq!(*reads, 40, "one read of b per iteration of the loop over k");
        }
        other => panic!("expected the strided-read refusal, got {other}"),
    }
    let want = product(&a, &b).t().mapv(|v| v * v).into_dyn();
    for options in [Options::interpreter(), Options::cpu()] {
        for level in [0u8, 3] {
            let got = ovl::evaluate_with(&y, &options.clone().with_opt_level(level)).unwrap();
            assert_close(&got, &want, &format!("opt_level {level}"));
        }
    }
}

#[test]
fn a_product_read_at_column_offsets_is_still_recomputed() {
    // The LSTM cell reads its four gates at [p0, p1 + g * h]: neighbouring cell workers
    // recompute neighbouring product workers, so the product is substituted into the cell.
    let (m, k, h) = (5, 24, 70);
    let a = pseudo_random((m, k), 3);
    let w = pseudo_random((k, 4 * h), 4);
    let c = pseudo_random((m, h), 5);
    let z = product_per_element(&a, &w);
    let (new_c, new_h) = lstm_cell(&z, &Lazy::from(c.clone().into_dyn()), 1.0);
    let fusion = ovl::fusion((&new_c, &new_h), 3).unwrap();
    println!("{}", fusion.report);
    assert_eq!(fusion.report.kernels_after, 1, "{}", fusion.report);
    assert!(fusion
        .report
        .merges
        .iter()
        .any(|m| m.kind == MergeKind::Inlined && m.first.contains("product_per_element")));
    let zf = product(&a, &w);
    let sigmoid = |v: f32| 1.0 / (1.0 + (-v).exp());
    let gate = |i: usize, j: usize, g: usize| zf[[i, g * h + j]];
    let want_c = Array2::from_shape_fn((m, h), |(i, j)| {
        c[[i, j]] * sigmoid(gate(i, j, 2) + 1.0) + sigmoid(gate(i, j, 0)) * gate(i, j, 1).tanh()
    });
    let want_h = Array2::from_shape_fn((m, h), |(i, j)| {
        want_c[[i, j]].tanh() * sigmoid(gate(i, j, 3))
    });
    for options in [Options::interpreter(), Options::cpu()] {
        for level in [0u8, 3] {
            let opts = options.clone().with_opt_level(level);
            let got_c = ovl::evaluate_with(&new_c, &opts).unwrap();
            let got_h = ovl::evaluate_with(&new_h, &opts).unwrap();
            assert_close(&got_c, &want_c.clone().into_dyn(), "new c");
            assert_close(&got_h, &want_h.clone().into_dyn(), "new h");
        }
    }
}

#[test]
fn a_transposed_operand_is_not_recomputed_inside_a_product() {
    // Substituted into the product, `b[t, j] = y[j, t]` would move with the workers' own
    // position in its first index: the product's workers could no longer run in lockstep,
    // and its loop, a sequential fold, would run one worker at a time (about 10x slower).
    let (m, k, n) = (16, 256, 96);
    let x = pseudo_random((m, k), 7);
    let y = pseudo_random((n, k), 8);
    let b = ovl_stdlib::transpose(Lazy::from(y.clone().into_dyn()), &[1, 0]);
    let z = product_per_element(&x, &b);
    let fusion = ovl::fusion(&z, 3).unwrap();
    println!("{}", fusion.report);
    assert_eq!(fusion.report.kernels_after, 2, "{}", fusion.report);
    let refusal = &fusion.report.refusals[0];
    let slower = std::iter::once(&refusal.reason)
        .chain(refusal.also.iter().map(|(_, r)| r))
        .find(|r| matches!(r, Reason::SlowerFused { .. }));
    match slower {
        Some(Reason::SlowerFused { fused, unfused }) => assert!(fused > unfused),
        _ => panic!("expected the whole-kernel refusal: {refusal}"),
    }
    let want = product(&x, &y.t().to_owned()).into_dyn();
    for options in [Options::interpreter(), Options::cpu()] {
        for level in [0u8, 3] {
            let got = ovl::evaluate_with(&z, &options.clone().with_opt_level(level)).unwrap();
            assert_close(&got, &want, &format!("opt_level {level}"));
        }
    }
}

#[test]
fn an_elementwise_producer_read_through_a_transpose_is_still_recomputed() {
    // No loop reads: a transposed read is one gather per element in either kernel.
    let x = pseudo_random((33, 65), 6);
    let t = ovl_stdlib::tanh(Lazy::from(x.clone().into_dyn()));
    let y = ovl_stdlib::transpose(&t, &[1, 0]);
    let fusion = ovl::fusion(&y, 3).unwrap();
    assert_eq!(fusion.report.kernels_after, 1, "{}", fusion.report);
    let got = ovl::evaluate(&y).unwrap();
    let want = x.t().mapv(f32::tanh).into_dyn();
    assert_close(&got, &want, "tanh transposed");
}

/// `x` divided by its rows' largest magnitude plus one.
fn scale_by_row_max(x: &Lazy<f32>) -> Lazy<f32> {
    let m = ovl_stdlib::max_keepdim(ovl_stdlib::abs(x), 1);
    ovl_stdlib::div(x, &m + 1.0f32)
}

/// The same in f32 on an array.
fn scale_by_row_max_reference(x: &Array2<f32>) -> Array2<f32> {
    let mut y = x.clone();
    for mut row in y.rows_mut() {
        let m = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        row.mapv_inplace(|v| v / (m + 1.0));
    }
    y
}

#[test]
fn a_transpose_is_not_walked_by_a_row_reduction_nor_its_elementwise_consumers() {
    // A random graph of the fusion menu's property check (`--random`, graph 4) that fused into
    // one kernel 3-5x slower than its 8 kernels: every row worker walked a column of `x`, and
    // the transposed read kept `tanh` and `sigmoid` out of vector lanes.
    let n = 256;
    let (xa, ya) = (pseudo_random((n, n), 7), pseudo_random((n, n), 8));
    let (x, y) = (Lazy::from(xa.clone()), Lazy::from(ya.clone()));
    let t = ovl_stdlib::transpose(&x, &[1, 0]);
    let out = ovl_stdlib::sigmoid(ovl_stdlib::tanh(ovl_stdlib::mul(scale_by_row_max(&t), &y)));
    let fusion = ovl::fusion(&out, 3).unwrap();
    println!("{}", fusion.report);
    for op in &fusion.after.operators {
        assert!(
            !op.name.contains("transpose") || !op.name.contains("extreme"),
            "the transpose runs inside the row reduction `{}`:\n{}",
            op.name,
            fusion.report
        );
    }
    assert!(
        fusion
            .report
            .refusals
            .iter()
            .any(|r| std::iter::once(&r.reason)
                .chain(r.also.iter().map(|(_, r)| r))
                .any(|r| matches!(r, Reason::SlowerFused { .. }))),
        "no merge refused as slower: {}",
        fusion.report
    );
    let sigmoid = |v: f32| 1.0 / (1.0 + (-v).exp());
    let want = (scale_by_row_max_reference(&xa.t().to_owned()) * &ya)
        .mapv(|v| sigmoid(v.tanh()))
        .into_dyn();
    let got = ovl::evaluate(&out).unwrap();
    assert_close(&got, &want, "fused");
}
