//! Matrix products as library calls (`ovl::gemm`, `ovl_stdlib::matmul`; `proto/ovl.proto`,
//! "Library calls"): the CPU's GEMM library against the interpreter's reference loop and a plain
//! Rust loop, on odd sizes, every transposed form, batched, integers, NaN and infinities; bad
//! shapes as `evaluate` errors; gradients by central differences; fusion keeping the call a
//! boundary (report and DOT), the LSTM step included; CUDA code for graphs holding one; export
//! to a program run like the TensorFlow op runs it.

use crate::gemm_values;
use crate::lstm_small_ops;

use ndarray::{ArrayD, IxDyn};
use ovl::{Lazy, Options, Reason};

use gemm_values::{close, eval, options, reference, shapes, values, FORMS, SIZES};

#[test]
fn the_library_matches_the_reference_on_odd_sizes_and_every_transposed_form() {
    for (seed, &(m, k, n)) in SIZES.iter().enumerate() {
        for (ta, tb) in FORMS {
            for batch in [&[][..], &[2, 3][..]] {
                let [sa, sb] = shapes(batch, (m, k, n), ta, tb);
                let (a, b) = (
                    values(&sa, seed as u64 * 2 + 1),
                    values(&sb, seed as u64 * 2 + 2),
                );
                let (want, mag) = reference(&a, &b, ta, tb);
                let what = format!("{sa:?} x {sb:?} (transposed {ta}, {tb})");
                // f64
                let y = ovl::gemm(&Lazy::from(a.clone()), &Lazy::from(b.clone()), ta, tb);
                for o in [Options::interpreter(), Options::cpu()] {
                    close(
                        &eval(&y, &o),
                        &want,
                        &mag,
                        1e-14,
                        &format!("f64 {what} {:?}", o.target),
                    );
                }
                // f32: the interpreter's sequential sum and the library's blocked one.
                let (a32, b32) = (a.mapv(|v| v as f32), b.mapv(|v| v as f32));
                let y = ovl::gemm(&Lazy::from(a32), &Lazy::from(b32), ta, tb);
                for o in [Options::interpreter(), Options::cpu()] {
                    let got = eval(&y, &o);
                    close(
                        &got,
                        &want,
                        &mag,
                        1e-6,
                        &format!("f32 {what} {:?}", o.target),
                    );
                    if k == 0 {
                        assert!(got.iter().all(|v| v.to_bits() == 0), "k = 0 gives +0.0");
                    }
                }
            }
        }
    }
}

#[test]
fn integers_run_the_reference_program_exactly_and_wrap() {
    for &(m, k, n) in &SIZES[..6] {
        for (ta, tb) in FORMS {
            let [sa, sb] = shapes(&[2], (m, k, n), ta, tb);
            let a = values(&sa, 5).mapv(|v| (v * 1e9) as i32);
            let b = values(&sb, 6).mapv(|v| (v * 7.0) as i32);
            let (want, _) = reference(&a.mapv(f64::from), &b.mapv(f64::from), ta, tb);
            let y = ovl_stdlib::matmul_t(Lazy::from(a.clone()), Lazy::from(b.clone()), ta, tb);
            for o in [Options::interpreter(), Options::cpu()] {
                let got = eval(&y, &o);
                // The exact sum, wrapped to 32 bits (|sum| < 2^53: exact in f64).
                for (g, w) in got.iter().zip(&want) {
                    assert_eq!(*g, (*w as i64) as i32, "{sa:?} x {sb:?} on {:?}", o.target);
                }
            }
        }
    }
}

#[test]
fn nan_and_infinities_propagate_as_in_the_reference() {
    let mut a = values(&[3, 4], 1).mapv(|v| v as f32);
    let b = values(&[4, 5], 2).mapv(|v| v as f32);
    a[[1, 2]] = f32::NAN;
    a[[2, 0]] = f32::INFINITY;
    let mut b2 = b.clone();
    b2[[0, 3]] = 0.0;
    let y = ovl_stdlib::matmul(Lazy::from(a), Lazy::from(b2.clone()));
    for o in [Options::interpreter(), Options::cpu()] {
        let c = eval(&y, &o);
        for j in 0..5 {
            assert!(
                c[[1, j]].is_nan(),
                "a NaN in row 1 reaches every element of row 1"
            );
            assert!(c[[0, j]].is_finite());
            // inf * b[0, j]: +-inf, or NaN where b[0, j] is 0 (inf * 0).
            if b2[[0, j]] == 0.0 {
                assert!(c[[2, j]].is_nan(), "inf * 0 is NaN ({:?})", o.target);
            } else {
                assert!(c[[2, j]].is_infinite(), "{:?}: {}", o.target, c[[2, j]]);
            }
        }
    }
}

#[test]
fn shapes_that_do_not_multiply_are_evaluate_errors_naming_them() {
    let f = |s: &[usize]| Lazy::from(ArrayD::<f32>::zeros(IxDyn(s)));
    let cases: Vec<(Lazy<f32>, &str, &str)> = vec![
        (
            ovl_stdlib::matmul(f(&[2, 3]), f(&[4, 5])),
            "[2, 3]",
            "[4, 5]",
        ),
        (ovl_stdlib::matmul(f(&[3]), f(&[3, 5])), "[3]", "[3, 5]"),
        (
            ovl_stdlib::matmul(f(&[2, 3, 4]), f(&[3, 4, 5])),
            "[2, 3, 4]",
            "[3, 4, 5]",
        ),
        (
            ovl_stdlib::matmul_t(f(&[2, 3]), f(&[2, 5]), false, true),
            "[2, 3]",
            "[2, 5]",
        ),
        (
            ovl_stdlib::matmul(f(&[2, 3]), f(&[1, 3, 5])),
            "[2, 3]",
            "[1, 3, 5]",
        ),
    ];
    for (y, a, b) in cases {
        let e = ovl::evaluate(&y).unwrap_err().to_string();
        assert!(
            e.contains("matmul") && e.contains(a) && e.contains(b),
            "{e}"
        );
        assert!(
            e.contains("tests/runtime/gemm.rs"),
            "names the caller's line: {e}"
        );
    }
    let t = |s: &[usize]| Lazy::from(ArrayD::<bool>::from_elem(IxDyn(s), true));
    let e = ovl::evaluate(&ovl::gemm(&t(&[2, 2]), &t(&[2, 2]), false, false)).unwrap_err();
    assert!(e.to_string().contains("bool"), "{e}");
}

/// `L = sum(op(a) · op(b) * g)`, computed by a plain loop.
fn loss(a: &ArrayD<f64>, b: &ArrayD<f64>, g: &ArrayD<f64>, ta: bool, tb: bool) -> f64 {
    let (c, _) = reference(a, b, ta, tb);
    c.iter().zip(g).map(|(c, g)| c * g).sum()
}

#[test]
fn gradients_match_central_differences_in_every_form() {
    for (ta, tb) in FORMS {
        for batch in [&[][..], &[2][..]] {
            let [sa, sb] = shapes(batch, (3, 4, 5), ta, tb);
            let (a, b) = (values(&sa, 11), values(&sb, 12));
            let (la, lb) = (Lazy::from(a.clone()), Lazy::from(b.clone()));
            let y = ovl_stdlib::matmul_t(&la, &lb, ta, tb);
            let g = values(y.shape(), 13);
            let grads = ovl::backward(&[(&y, &Lazy::from(g.clone()))], &[&la, &lb]).unwrap();
            let (da, db) = (grads.of(&la).unwrap(), grads.of(&lb).unwrap());
            // The backward graph is two library calls reading operands transposed: no copies.
            let graph = ovl::fusion((&da, &db), 0).unwrap();
            assert!(
                graph
                    .before
                    .operators
                    .iter()
                    .all(ovl::ir_tools::is_library_call),
                "{ta}, {tb}: {}",
                ovl::ir_tools::operator_dag_to_text(&graph.before)
            );
            for o in [Options::interpreter(), Options::cpu()] {
                for (x, dx, which) in [(&a, eval(&da, &o), "a"), (&b, eval(&db, &o), "b")] {
                    for idx in 0..x.len() {
                        let h = 1e-5;
                        let bumped = |d: f64| {
                            let mut x2 = x.clone();
                            x2.as_slice_mut().unwrap()[idx] += d;
                            if which == "a" {
                                loss(&x2, &b, &g, ta, tb)
                            } else {
                                loss(&a, &x2, &g, ta, tb)
                            }
                        };
                        let numeric = (bumped(h) - bumped(-h)) / (2.0 * h);
                        let got = dx.as_slice().unwrap()[idx];
                        assert!(
                            (got - numeric).abs() <= 1e-7 * numeric.abs().max(1.0),
                            "d{which}[{idx}] ({ta}, {tb}, batch {batch:?}, {:?}): {got} vs {numeric}",
                            o.target
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn fusion_keeps_the_call_a_boundary_and_says_why() {
    let x = Lazy::from(values(&[4, 6], 1).mapv(|v| v as f32));
    let w = Lazy::from(values(&[6, 3], 2).mapv(|v| v as f32));
    let b = Lazy::from(values(&[3], 3).mapv(|v| v as f32));
    let y = ovl_stdlib::tanh(ovl_stdlib::add(ovl_stdlib::matmul(&x, &w), &b));
    let f = ovl::fusion(&y, 3).unwrap();
    assert_eq!(f.report.kernels_before, 3);
    assert_eq!(f.report.kernels_after, 2, "{}", f.report);
    let calls: Vec<_> = f
        .after
        .operators
        .iter()
        .filter(|o| ovl::ir_tools::is_library_call(o))
        .collect();
    assert_eq!(calls.len(), 1, "the call stays a kernel of its own");
    let boundary = f
        .report
        .refusals_where(|r| matches!(r, Reason::LibraryCall { .. }));
    assert_eq!(boundary.len(), 1, "{}", f.report);
    let text = f.report.to_string();
    assert!(text.contains("is a library call (gemm)"), "{text}");
    let dot = f.after_dot();
    assert!(
        dot.contains("library call: gemm"),
        "the node says what it calls: {dot}"
    );
    assert!(
        dot.contains("not merged: `matmul` (#0) is a library call"),
        "the edge says why: {dot}"
    );
    let (want, mag) = reference(
        &values(&[4, 6], 1).mapv(|v| v as f32 as f64),
        &values(&[6, 3], 2).mapv(|v| v as f32 as f64),
        false,
        false,
    );
    let bias = values(&[3], 3).mapv(|v| v as f32 as f64);
    let want = (&want + &bias).mapv(f64::tanh);
    for o in [Options::interpreter(), Options::cpu()] {
        close(&eval(&y, &o), &want, &mag, 1e-6, "tanh(x w + b)");
    }
}

#[test]
fn the_lstm_step_keeps_its_products_out_of_the_cell() {
    let (batch, hidden) = (3, 5);
    let f32s = |s: &[usize], seed| values(s, seed).mapv(|v| v as f32 * 0.5);
    let x = Lazy::from(f32s(&[batch, hidden], 1));
    let h = Lazy::from(f32s(&[batch, hidden], 2));
    let c = Lazy::from(f32s(&[batch, hidden], 3));
    let w = Lazy::from(f32s(&[hidden, 4 * hidden], 4));
    let u = Lazy::from(f32s(&[hidden, 4 * hidden], 5));
    let b = Lazy::from(f32s(&[4 * hidden], 6));
    let z = ovl_stdlib::add(
        ovl_stdlib::add(ovl_stdlib::matmul(&x, &w), ovl_stdlib::matmul(&h, &u)),
        &b,
    );
    let (new_c, new_h) = lstm_small_ops::lstm_cell(&z, &c, 1.0);
    let f = ovl::fusion((&new_c, &new_h), 3).unwrap();
    let calls = f
        .after
        .operators
        .iter()
        .filter(|o| ovl::ir_tools::is_library_call(o))
        .count();
    assert_eq!(calls, 2, "both products stay calls:\n{}", f.report);
    assert_eq!(
        f.report.kernels_after, 3,
        "two calls and the rest in one kernel:\n{}",
        f.report
    );
    let boundary = f
        .report
        .refusals_where(|r| matches!(r, Reason::LibraryCall { .. }));
    assert_eq!(boundary.len(), 2, "{}", f.report);
    // The same values on both targets.
    let interp = ovl::evaluate_with((&new_c, &new_h), &options(Options::interpreter())).unwrap();
    let cpu = ovl::evaluate_with((&new_c, &new_h), &options(Options::cpu())).unwrap();
    for (p, q) in [(&interp.0, &cpu.0), (&interp.1, &cpu.1)] {
        for (a, b) in p.iter().zip(q) {
            assert!((a - b).abs() <= 1e-5, "{a} vs {b}");
        }
    }
}

/// CUDA runs a call as its reference program: compiled by NVRTC and checked by ptxas here, run
/// on the GPU where there is one (every transposed form, batched, and the LSTM step).
#[test]
fn cuda_code_for_graphs_holding_a_call() {
    if let Err(e) = ovl::cuda::nvrtc_status() {
        println!("cuda_code_for_graphs_holding_a_call: did not run (no NVRTC: {e})");
        return;
    }
    let gpu = ovl::cuda::gpu_status();
    let targets = match &gpu {
        Ok(_) => vec![Options::cuda_validate(), Options::cuda()],
        Err(_) => vec![Options::cuda_validate()],
    };
    for (ta, tb) in FORMS {
        let [sa, sb] = shapes(&[2], (5, 3, 7), ta, tb);
        let (a, b) = (
            values(&sa, 1).mapv(|v| v as f32),
            values(&sb, 2).mapv(|v| v as f32),
        );
        let y = ovl::gemm(&Lazy::from(a.clone()), &Lazy::from(b.clone()), ta, tb);
        let (want, mag) = reference(&a.mapv(f64::from), &b.mapv(f64::from), ta, tb);
        for o in &targets {
            close(
                &eval(&y, o),
                &want,
                &mag,
                1e-6,
                &format!("{:?} {ta} {tb}", o.target),
            );
        }
    }
    let (x, h, c) = (values(&[3, 5], 1), values(&[3, 5], 2), values(&[3, 5], 3));
    let (w, u) = (values(&[5, 20], 4), values(&[5, 20], 5));
    let f32s = |a: &ArrayD<f64>| Lazy::from(a.mapv(|v| v as f32 * 0.5));
    let z = ovl_stdlib::add(
        ovl_stdlib::matmul(f32s(&x), f32s(&w)),
        ovl_stdlib::matmul(f32s(&h), f32s(&u)),
    );
    let (new_c, _) = lstm_small_ops::lstm_cell(&z, &f32s(&c), 1.0);
    let want = eval(&new_c, &Options::interpreter());
    for o in &targets {
        let got = eval(&new_c, o);
        for (p, q) in got.iter().zip(&want) {
            assert!(
                (p - q).abs() <= 1e-5,
                "LSTM step on {:?}: {p} vs {q}",
                o.target
            );
        }
    }
    match gpu {
        Ok(info) => println!("cuda_code_for_graphs_holding_a_call: ran on the GPU ({info:?})"),
        Err(e) => println!(
            "cuda_code_for_graphs_holding_a_call: ptxas-validated (GPU execution did not run: {e})"
        ),
    }
}

#[test]
fn an_exported_program_carries_the_call_and_runs_it() {
    let x = ovl::placeholder::<f32>("x", &[4, 6]);
    let w = ovl::placeholder::<f32>("w", &[6, 3]);
    let y = ovl_stdlib::tanh(ovl_stdlib::matmul(&x, &w));
    let dy = ovl::placeholder::<f32>("dy", &[4, 3]);
    let g = ovl::backward(&[(&y, &dy)], &[&x, &w]).unwrap();
    let (dx, dw) = (g.of(&x).unwrap(), g.of(&w).unwrap());
    for embed in [false, true] {
        let bundle = ovl::as_tensorflow((&x, &w), &y)
            .gradient(&dy, (&dx, &dw))
            .options(&options(Options::cpu()))
            .embed_libraries(embed)
            .build()
            .unwrap();
        let graph = bundle.program.graph.as_ref().unwrap();
        assert_eq!(
            graph
                .operators
                .iter()
                .filter(|o| ovl::ir_tools::is_library_call(o))
                .count(),
            1
        );
        let sealed = ovl::program::seal_program(&bundle.program);
        let program = ovl::program::LoadedProgram::load(&sealed, &options(Options::cpu())).unwrap();
        let xv = values(&[4, 6], 1).mapv(|v| v as f32);
        let wv = values(&[6, 3], 2).mapv(|v| v as f32);
        let host = |a: &ArrayD<f32>| {
            ovl::HostTensor::from_vec(a.shape(), a.iter().copied().collect()).unwrap()
        };
        let feeds = [host(&xv), host(&wv)];
        let out = program.run_host(&[&feeds[0], &feeds[1]], 0).unwrap();
        let (want, mag) = reference(&xv.mapv(f64::from), &wv.mapv(f64::from), false, false);
        let got =
            ArrayD::from_shape_vec(IxDyn(&[4, 3]), out[0].as_slice::<f32>().unwrap().to_vec())
                .unwrap();
        close(&got, &want.mapv(f64::tanh), &mag, 1e-6, "exported program");
    }
}

#[test]
fn vmap_of_a_product_with_a_shared_weight() {
    let w = Lazy::from(values(&[4, 3], 2));
    let xs = values(&[5, 2, 4], 1);
    let xl = Lazy::from(xs.clone());
    let ys = ovl::vmap(
        |(x, w): (Lazy<f64>, Lazy<f64>)| ovl_stdlib::matmul(&x, &w),
        (ovl::Batched(&xl), ovl::Shared(&w)),
    )
    .unwrap();
    let got = eval(&ys, &Options::cpu());
    for e in 0..5 {
        let x = xs.index_axis(ndarray::Axis(0), e).to_owned().into_dyn();
        let (want, mag) = reference(&x, &values(&[4, 3], 2), false, false);
        close(
            &got.index_axis(ndarray::Axis(0), e).to_owned().into_dyn(),
            &want,
            &mag,
            1e-14,
            "vmap",
        );
    }
}

#[test]
fn vmap_of_a_product_of_batched_operands_stays_a_call() {
    let (xs, ws) = (values(&[3, 2, 4], 1), values(&[3, 4, 5], 2));
    let (xl, wl) = (Lazy::from(xs.clone()), Lazy::from(ws.clone()));
    let ys = ovl::vmap(
        |(x, w): (Lazy<f64>, Lazy<f64>)| ovl_stdlib::matmul(&x, &w),
        (ovl::Batched(&xl), ovl::Batched(&wl)),
    )
    .unwrap();
    let graph = ovl::graph(&ys).unwrap();
    assert!(graph
        .dag
        .operators
        .iter()
        .all(ovl::ir_tools::is_library_call));
    let (want, mag) = reference(&xs, &ws, false, false);
    close(
        &eval(&ys, &Options::cpu()),
        &want,
        &mag,
        1e-14,
        "vmap, both batched",
    );
}

/// Products with few rows and many columns (an LSTM step's shape), on two threads: every form
/// against the reference.
#[test]
fn few_rows_many_columns_in_every_form() {
    // The last two: many rows and a short sum (a step's weight gradient), a k tail.
    for &(m, k, n) in &[
        (20, 300, 700),
        (32, 37, 1030),
        (33, 64, 300),
        (130, 20, 300),
        (7, 3, 65),
    ] {
        for (ta, tb) in FORMS {
            let [sa, sb] = shapes(&[], (m, k, n), ta, tb);
            let (a, b) = (values(&sa, 7), values(&sb, 8));
            let (want, mag) = reference(&a, &b, ta, tb);
            let y = ovl::gemm(&Lazy::from(a.clone()), &Lazy::from(b.clone()), ta, tb);
            let threads = Options::cpu().with_threads(2);
            close(
                &eval(&y, &threads),
                &want,
                &mag,
                1e-14,
                &format!("f64 {sa:?} x {sb:?}"),
            );
            let (a32, b32) = (a.mapv(|v| v as f32), b.mapv(|v| v as f32));
            let y = ovl::gemm(&Lazy::from(a32), &Lazy::from(b32), ta, tb);
            close(
                &eval(&y, &threads),
                &want,
                &mag,
                1e-6,
                &format!("f32 {sa:?} x {sb:?}"),
            );
        }
    }
}

/// The GEMM calls of the graph before fusion: how many products each sums.
fn gemm_terms(graph: &ovl::ir::OperatorDag) -> Vec<u32> {
    graph
        .operators
        .iter()
        .filter_map(|op| match op.library_call.as_ref()?.call.as_ref()? {
            ovl::ir::library_call::Call::Gemm(g) => Some(g.terms.max(1)),
        })
        .collect()
}

/// A weight used in T products (`op(x_t) · op(W)`, the input products of T steps): its
/// gradient is one call summing T products (not T calls and T - 1 additions), in every
/// transposed form, equal to the reference sum and to central differences; the gradients of the
/// `x_t` stay single products.
#[test]
fn a_weight_used_in_several_products_gets_one_call_summing_them() {
    let (steps, (m, k, n)) = (5, (3, 7, 6));
    for (ta, tb) in FORMS {
        let [sa, sb] = shapes(&[], (m, k, n), ta, tb);
        let xs: Vec<ArrayD<f64>> = (0..steps).map(|t| values(&sa, 20 + t as u64)).collect();
        let w = values(&sb, 30);
        let gs: Vec<ArrayD<f64>> = (0..steps).map(|t| values(&[m, n], 40 + t as u64)).collect();
        let lw = Lazy::from(w.clone());
        let lxs: Vec<Lazy<f64>> = xs.iter().map(|x| Lazy::from(x.clone())).collect();
        let ys: Vec<Lazy<f64>> = lxs
            .iter()
            .map(|x| ovl_stdlib::matmul_t(x, &lw, ta, tb))
            .collect();
        let lgs: Vec<Lazy<f64>> = gs.iter().map(|g| Lazy::from(g.clone())).collect();
        let pairs: Vec<(&Lazy<f64>, &Lazy<f64>)> = ys.iter().zip(&lgs).collect();
        let mut wrt: Vec<&Lazy<f64>> = vec![&lw];
        wrt.extend(&lxs);
        let grads = ovl::backward(&pairs, &wrt).unwrap();
        let dw = grads.of(&lw).unwrap();
        let graph = ovl::fusion(&dw, 0).unwrap();
        assert_eq!(
            gemm_terms(&graph.before),
            vec![steps as u32],
            "({ta}, {tb}): {}",
            ovl::ir_tools::operator_dag_to_text(&graph.before)
        );
        let dx0 = grads.of(&lxs[0]).unwrap();
        assert_eq!(gemm_terms(&ovl::fusion(&dx0, 0).unwrap().before), vec![1]);
        let total =
            |w: &ArrayD<f64>| -> f64 { (0..steps).map(|t| loss(&xs[t], w, &gs[t], ta, tb)).sum() };
        for o in [Options::interpreter(), Options::cpu()] {
            let got = eval(&dw, &o);
            for idx in 0..w.len() {
                let h = 1e-5;
                let bumped = |d: f64| {
                    let mut w2 = w.clone();
                    w2.as_slice_mut().unwrap()[idx] += d;
                    total(&w2)
                };
                let numeric = (bumped(h) - bumped(-h)) / (2.0 * h);
                let g = got.as_slice().unwrap()[idx];
                assert!(
                    (g - numeric).abs() <= 1e-7 * numeric.abs().max(1.0),
                    "dW[{idx}] ({ta}, {tb}, {:?}): {g} vs {numeric}",
                    o.target
                );
            }
        }
        // f32 on the CPU (its library path joins the terms along k) against the f64 result.
        let want = eval(&dw, &Options::interpreter());
        let w32 = Lazy::from(w.mapv(|v| v as f32));
        let x32: Vec<Lazy<f32>> = xs
            .iter()
            .map(|x| Lazy::from(x.mapv(|v| v as f32)))
            .collect();
        let g32: Vec<Lazy<f32>> = gs
            .iter()
            .map(|g| Lazy::from(g.mapv(|v| v as f32)))
            .collect();
        let y32: Vec<Lazy<f32>> = x32
            .iter()
            .map(|x| ovl_stdlib::matmul_t(x, &w32, ta, tb))
            .collect();
        let pairs: Vec<(&Lazy<f32>, &Lazy<f32>)> = y32.iter().zip(&g32).collect();
        let dw32 = ovl::backward(&pairs, &[&w32]).unwrap().of(&w32).unwrap();
        let got = eval(&dw32, &Options::cpu());
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (f64::from(*g) - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "{g} vs {w}"
            );
        }
    }
}

/// A weight whose gradient contributions are a product and something else (here `W * W`):
/// added as before, the product a single call.
#[test]
fn a_weight_used_in_a_product_and_elementwise_is_added_as_before() {
    let (x, w) = (values(&[4, 4], 50), values(&[4, 4], 51));
    let (lx, lw) = (Lazy::from(x.clone()), Lazy::from(w.clone()));
    let y = ovl_stdlib::add(ovl_stdlib::matmul(&lx, &lw), ovl_stdlib::mul(&lw, &lw));
    let g = values(&[4, 4], 52);
    let dw = ovl::backward(&[(&y, &Lazy::from(g.clone()))], &[&lw])
        .unwrap()
        .of(&lw)
        .unwrap();
    assert_eq!(gemm_terms(&ovl::fusion(&dw, 0).unwrap().before), vec![1]);
    // dW = xᵀ g + 2 W ∘ g.
    let (xtg, _) = reference(&x, &g, true, false);
    let want = &xtg + &(&w * &g * 2.0);
    for o in [Options::interpreter(), Options::cpu()] {
        let got = eval(&dw, &o);
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }
}

/// Products with many rows and a long sum, in f32 on two threads (the CPU's packed AVX-512
/// kernel where the CPU has AVX-512F, `src/runner/gemm_large.rs`): every form against the
/// reference, sizes leaving partial strips of columns, partial blocks of rows and a sum split
/// into chunks; few rows with B transposed (`dz · Uᵀ` of an LSTM step) too. Then a weight's
/// gradient summing three such products (the kernel reads the terms in place).
#[test]
fn many_rows_long_sums_in_every_form() {
    for &(m, k, n) in &[
        (70, 67, 520),
        (131, 1100, 530),
        (40, 100, 515),
        (64, 33, 600),
    ] {
        for (ta, tb) in FORMS {
            let [sa, sb] = shapes(&[], (m, k, n), ta, tb);
            let (a, b) = (values(&sa, 9), values(&sb, 10));
            let (want, mag) = reference(&a, &b, ta, tb);
            let (a32, b32) = (a.mapv(|v| v as f32), b.mapv(|v| v as f32));
            let y = ovl::gemm(&Lazy::from(a32), &Lazy::from(b32), ta, tb);
            close(
                &eval(&y, &Options::cpu().with_threads(2)),
                &want,
                &mag,
                1e-6,
                &format!("f32 {sa:?} x {sb:?}"),
            );
        }
    }
    let (steps, (m, k, n)) = (3, (40, 70, 520));
    for (ta, tb) in FORMS {
        let [sa, sb] = shapes(&[], (m, k, n), ta, tb);
        let xs: Vec<ArrayD<f64>> = (0..steps).map(|t| values(&sa, 60 + t as u64)).collect();
        let gs: Vec<ArrayD<f64>> = (0..steps).map(|t| values(&[m, n], 70 + t as u64)).collect();
        let f32s = |v: &[ArrayD<f64>]| -> Vec<Lazy<f32>> {
            v.iter().map(|x| Lazy::from(x.mapv(|v| v as f32))).collect()
        };
        let w = Lazy::from(values(&sb, 80).mapv(|v| v as f32));
        let (x32, g32) = (f32s(&xs), f32s(&gs));
        let ys: Vec<Lazy<f32>> = x32
            .iter()
            .map(|x| ovl_stdlib::matmul_t(x, &w, ta, tb))
            .collect();
        let pairs: Vec<(&Lazy<f32>, &Lazy<f32>)> = ys.iter().zip(&g32).collect();
        let dw = ovl::backward(&pairs, &[&w]).unwrap().of(&w).unwrap();
        assert_eq!(
            gemm_terms(&ovl::fusion(&dw, 0).unwrap().before),
            vec![steps as u32]
        );
        let got = eval(&dw, &Options::cpu().with_threads(2));
        // dW = Σ_t op(x_t)ᵀ g_t (transposed back when W is stored transposed).
        let mut want = ArrayD::<f64>::zeros(IxDyn(&[k, n]));
        let mut mag = want.clone();
        for (x, g) in xs.iter().zip(&gs) {
            let (r, s) = reference(x, g, !ta, false);
            want = want + r;
            mag = mag + s;
        }
        let (want, mag) = if tb {
            (want.t().to_owned(), mag.t().to_owned())
        } else {
            (want, mag)
        };
        close(&got, &want, &mag, 1e-6, &format!("dW ({ta}, {tb})"));
    }
}

/// The CPU runner keeps a thread's temporaries between runs (`src/runner/scratch.rs`): two
/// compiled graphs whose intermediates have the same sizes, run in turns on one thread with
/// new data each time, give a plain loop's values every time.
#[test]
fn temporaries_reused_between_runs_hold_no_stale_values() {
    let (m, k, n) = (70, 90, 520);
    let x = ovl::placeholder::<f32>("x", &[m, k]);
    let w = ovl::placeholder::<f32>("w", &[k, n]);
    let b = ovl::placeholder::<f32>("b", &[m, n]);
    let z = ovl_stdlib::add(ovl_stdlib::matmul(&x, &w), &b);
    let graphs = [
        ovl_stdlib::mul(ovl_stdlib::tanh(&z), &b),
        ovl_stdlib::sum(ovl_stdlib::tanh(&z), 1),
    ];
    let cpu = options(Options::cpu().with_threads(2));
    let compiled: Vec<ovl::Compiled> = graphs
        .iter()
        .map(|y| ovl::compile((&x, &w, &b), y, &cpu).unwrap())
        .collect();
    for round in 0..3u64 {
        for (g, c) in compiled.iter().enumerate() {
            let seed = 100 + 10 * round + g as u64;
            let xv = values(&[m, k], seed).mapv(|v| v as f32 * 0.1);
            let wv = values(&[k, n], seed + 1).mapv(|v| v as f32 * 0.1);
            let bv = values(&[m, n], seed + 2).mapv(|v| v as f32);
            // tanh(x w + b), then times b or summed along its rows, in f64.
            let t = |i: usize, j: usize| {
                let dot: f64 = (0..k)
                    .map(|l| f64::from(xv[[i, l]]) * f64::from(wv[[l, j]]))
                    .sum();
                (dot + f64::from(bv[[i, j]])).tanh()
            };
            let (shape, want): (Vec<usize>, Vec<f64>) = if g == 0 {
                let want = (0..m * n)
                    .map(|e| t(e / n, e % n) * f64::from(bv[[e / n, e % n]]))
                    .collect();
                (vec![m, n], want)
            } else {
                (
                    vec![m],
                    (0..m).map(|i| (0..n).map(|j| t(i, j)).sum()).collect(),
                )
            };
            let mut dests = vec![ArrayD::<f32>::zeros(IxDyn(&shape))];
            let feeds = (&Lazy::from(xv), &Lazy::from(wv), &Lazy::from(bv));
            c.run_into(feeds, &mut dests).unwrap();
            for (got, want) in dests[0].iter().zip(&want) {
                assert!(
                    (f64::from(*got) - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "graph {g}, round {round}: {got} vs {want}"
                );
            }
        }
    }
}
