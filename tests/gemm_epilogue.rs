//! GEMM epilogue pairs (`ovl-fuse/src/gemm_pair.rs`, `ovl-runtime/src/gemm/epilogue.rs`): a library GEMM
//! whose result is read by one kernel, each worker only in its own row, runs with that kernel
//! as an epilogue (C by blocks of rows, each block's workers right after it on the same
//! thread). Values against a plain f64 loop and the interpreter (which runs the two kernels
//! one after the other) on odd sizes (rows not a multiple of a block, one row, k = 0), a bias
//! and an activation or an LSTM cell's gates as consumers, what the report and the DOT picture
//! say, consumers reading C transposed or at other rows refused with the reason (and pairs
//! that would not pay), the three modes and threads 1 and 2 giving identical results.

use ndarray::{ArrayD, IxDyn};
use ovl::{EpilogueMode, Lazy, NotPairedReason, Options};
use ovl_stdlib as ops;
use std::cell::Cell;

thread_local! {
    /// The epilogue mode of this test's runs (each test runs on a thread of its own).
    static MODE: Cell<EpilogueMode> = const { Cell::new(EpilogueMode::WherePays) };
}

/// Sets the epilogue mode [`options`] gives this test's runs.
fn mode(mode: EpilogueMode) {
    MODE.set(mode);
}

fn options(target: Options) -> Options {
    let target = target.with_gemm_epilogue(MODE.get());
    match std::env::var_os("OVL_CACHE_DIR") {
        Some(dir) => Options {
            cache_dir: Some(dir.into()),
            ..target
        },
        None => target,
    }
}

/// Deterministic values in [-1, 1).
fn values(shape: &[usize], seed: u64) -> ArrayD<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    ArrayD::from_shape_simple_fn(IxDyn(shape), || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    })
}

/// `a · b` of 2-D arrays by a plain loop.
fn product(a: &ArrayD<f64>, b: &ArrayD<f64>) -> ArrayD<f64> {
    let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
    ArrayD::from_shape_fn(IxDyn(&[m, n]), |ix| {
        (0..k).map(|q| a[[ix[0], q]] * b[[q, ix[1]]]).sum()
    })
}

fn close(got: &ArrayD<f64>, want: &ArrayD<f64>, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-12 * w.abs().max(1.0),
            "{what}: {g} vs {w}"
        );
    }
}

fn evaluate(ys: &[Lazy<f64>], o: Options) -> Vec<ArrayD<f64>> {
    ovl::evaluate_with(ys, &options(o)).unwrap()
}

/// `tanh(x · w + b)`.
fn bias_tanh(x: &Lazy<f64>, w: &Lazy<f64>, b: &Lazy<f64>) -> Lazy<f64> {
    ops::tanh(ops::add(ops::matmul(x, w), b))
}

#[test]
fn bias_and_activation_run_as_the_epilogue_with_the_interpreters_values() {
    mode(EpilogueMode::Always);
    // Rows: one, a few, more than a block of C (256 KiB: 8 rows of 4096 f64) and not a
    // multiple of it; k = 0.
    for (m, k, n) in [
        (1, 5, 7),
        (13, 3, 4096),
        (37, 3, 4096),
        (5, 0, 6),
        (70, 65, 33),
    ] {
        let (xs, ws, bs) = (values(&[m, k], 1), values(&[k, n], 2), values(&[n], 3));
        let (x, w, b) = (
            Lazy::from(xs.clone()),
            Lazy::from(ws.clone()),
            Lazy::from(bs.clone()),
        );
        let y = bias_tanh(&x, &w, &b);
        let f = ovl::fusion_with(std::slice::from_ref(&y), &options(Options::cpu())).unwrap();
        if m > 64 {
            // The report gives the rule's verdict (each block would pack the weight); the
            // runner, told to, pairs it all the same.
            let reasons: Vec<_> = f.report.not_paired.iter().map(|p| &p.reason).collect();
            let many = NotPairedReason::ManyRows { rows: m as u64 };
            assert_eq!(reasons, [&many], "{}", f.report);
        } else {
            assert_eq!(
                f.report.epilogue_pairs.len(),
                1,
                "{m} {k} {n}:\n{}",
                f.report
            );
            let pair = &f.report.epilogue_pairs[0];
            assert_eq!(pair.rows, m as u64);
            assert!(f.report.not_paired.is_empty(), "{}", f.report);
            assert!(f.report.to_string().contains("epilogue pair: kernel"));
            assert!(f.after_dot().contains("epilogue pair: by blocks of its"));
        }

        let want = (product(&xs, &ws) + &bs).mapv(f64::tanh);
        let interp = evaluate(std::slice::from_ref(&y), Options::interpreter());
        close(&interp[0], &want, &format!("interpreter {m} {k} {n}"));
        let one = evaluate(std::slice::from_ref(&y), Options::cpu().with_threads(1));
        let two = evaluate(std::slice::from_ref(&y), Options::cpu().with_threads(2));
        close(&one[0], &want, &format!("cpu {m} {k} {n}"));
        assert_eq!(one[0], two[0], "threads 1 and 2 differ at {m} {k} {n}");
        if k == 0 {
            assert_eq!(
                one[0],
                bs.broadcast(IxDyn(&[m, n])).unwrap().mapv(f64::tanh)
            );
        }
    }
}

/// The cell on gate pre-activations `z [B, 4H]` (order i, f, g, o).
fn cell(z: &Lazy<f64>, c: &Lazy<f64>) -> (Lazy<f64>, Lazy<f64>) {
    let g = ops::split(z, 1, 4);
    let new_c = ops::add(
        ops::mul(ops::sigmoid(&g[1]), c),
        ops::mul(ops::sigmoid(&g[0]), ops::tanh(&g[2])),
    );
    let new_h = ops::mul(ops::sigmoid(&g[3]), ops::tanh(&new_c));
    (new_c, new_h)
}

#[test]
fn an_lstm_cells_gates_run_as_the_epilogue() {
    mode(EpilogueMode::Always);
    let (batch, hidden) = (40, 8);
    let (hs, us, bs, cs) = (
        values(&[batch, hidden], 4),
        values(&[hidden, 4 * hidden], 5),
        values(&[4 * hidden], 6),
        values(&[batch, hidden], 7),
    );
    let (h, u, b, c) = (
        Lazy::from(hs.clone()),
        Lazy::from(us.clone()),
        Lazy::from(bs.clone()),
        Lazy::from(cs.clone()),
    );
    let z = ops::add(ops::matmul(&h, &u), &b);
    let (new_c, new_h) = cell(&z, &c);
    let ys = [new_c, new_h];
    let f = ovl::fusion_with(&ys, &options(Options::cpu())).unwrap();
    assert_eq!(f.report.epilogue_pairs.len(), 1, "{}", f.report);

    // The cell by hand.
    let zs = product(&hs, &us) + &bs;
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let gate = |r: usize, q: usize, j: usize| zs[[r, q * hidden + j]];
    let want_c = ArrayD::from_shape_fn(IxDyn(&[batch, hidden]), |ix| {
        let (r, j) = (ix[0], ix[1]);
        sig(gate(r, 1, j)) * cs[[r, j]] + sig(gate(r, 0, j)) * gate(r, 2, j).tanh()
    });
    let want_h = ArrayD::from_shape_fn(IxDyn(&[batch, hidden]), |ix| {
        sig(gate(ix[0], 3, ix[1])) * want_c[[ix[0], ix[1]]].tanh()
    });
    let interp = evaluate(&ys, Options::interpreter());
    let one = evaluate(&ys, Options::cpu().with_threads(1));
    let two = evaluate(&ys, Options::cpu().with_threads(2));
    for got in [&interp, &one] {
        close(&got[0], &want_c, "c");
        close(&got[1], &want_h, "h");
    }
    assert_eq!(one, two, "threads 1 and 2 differ");
}

#[test]
fn consumers_reading_other_rows_are_refused_with_the_reason() {
    mode(EpilogueMode::Always);
    let m = 9;
    let (xs, ws) = (values(&[m, 6], 8), values(&[6, m], 9));
    let (x, w) = (Lazy::from(xs.clone()), Lazy::from(ws.clone()));
    let c = ops::matmul(&x, &w);
    let cw = product(&xs, &ws);

    // C transposed: worker [i, j] reads C[j, i].
    let t = ops::tanh(ops::transpose(&c, &[1, 0]));
    // C plus its transpose: worker [i, j] reads its own row and row j.
    let symmetric = ops::add(&c, ops::transpose(&c, &[1, 0]));
    // Rows rotated by thirds: a kernel per third of the rows.
    let halves = ops::split(&c, 0, 3);
    let swapped = ops::tanh(ops::concat(
        &[halves[2].clone(), halves[0].clone(), halves[1].clone()],
        0,
    ));
    // A column sum: one worker per column (as many as rows), reading every row in a loop.
    let column_sum = ops::sum(&c, 0);
    let cases: [(&Lazy<f64>, ArrayD<f64>); 4] = [
        (&t, cw.t().mapv(f64::tanh).into_dyn()),
        (&symmetric, (&cw + &cw.t()).into_dyn()),
        (
            &swapped,
            ndarray::concatenate(
                ndarray::Axis(0),
                &[
                    cw.slice(ndarray::s![6..9, ..]),
                    cw.slice(ndarray::s![0..6, ..]),
                ],
            )
            .unwrap()
            .mapv(f64::tanh)
            .into_dyn(),
        ),
        (&column_sum, cw.sum_axis(ndarray::Axis(0)).into_dyn()),
    ];
    for (i, (y, want)) in cases.into_iter().enumerate() {
        let f = ovl::fusion_with(std::slice::from_ref(y), &options(Options::cpu())).unwrap();
        assert!(
            f.report.epilogue_pairs.is_empty(),
            "case {i}:\n{}",
            f.report
        );
        let [refused] = &f.report.not_paired[..] else {
            panic!("case {i}: one refusal expected:\n{}", f.report);
        };
        match (i, &refused.reason) {
            (0 | 1 | 3, NotPairedReason::OtherRow { .. })
            | (2, NotPairedReason::NotByRows { .. }) => {}
            (_, other) => panic!("case {i}: {other}"),
        }
        assert!(f
            .report
            .to_string()
            .contains("no epilogue pair for the gemm"));
        for o in [Options::interpreter(), Options::cpu().with_threads(2)] {
            close(
                &evaluate(std::slice::from_ref(y), o)[0],
                &want,
                &format!("case {i}"),
            );
        }
    }
}

#[test]
fn the_two_schedules_give_the_same_values() {
    mode(EpilogueMode::Always);
    // f32 on the few-row kernel and f64 on the `gemm` crate, 2 threads, C over several blocks.
    let (m, k, n) = (45, 9, 2600);
    let (xs, ws, bs) = (values(&[m, k], 11), values(&[k, n], 12), values(&[n], 13));
    let y = bias_tanh(
        &Lazy::from(xs.clone()),
        &Lazy::from(ws.clone()),
        &Lazy::from(bs.clone()),
    );
    let f32s = |a: &ArrayD<f64>| Lazy::from(a.mapv(|v| v as f32));
    let y32 = ops::tanh(ops::add(ops::matmul(f32s(&xs), f32s(&ws)), f32s(&bs)));
    let run = || {
        let o = options(Options::cpu().with_threads(2));
        (
            ovl::evaluate_with(std::slice::from_ref(&y), &o).unwrap(),
            ovl::evaluate_with(std::slice::from_ref(&y32), &o).unwrap(),
        )
    };
    let paired = run();
    for other in [EpilogueMode::Off, EpilogueMode::WherePays] {
        mode(other);
        assert_eq!(paired, run(), "{other:?}");
    }
}

#[test]
fn a_pair_that_would_read_the_weight_again_more_than_it_saves_is_refused() {
    mode(EpilogueMode::WherePays);
    // 64 rows of 8192 f64: 16 blocks of 4 rows (256 KiB each), more than 8 calls; 200 rows of
    // 2048: more rows than the kernel that streams the weight takes (each block would pack it).
    for ((m, k, n), reason) in [
        (
            (64, 2, 8192),
            NotPairedReason::CostsMore {
                blocks: 16,
                weight_bytes: 2 * 8192 * 8,
            },
        ),
        ((200, 2, 2048), NotPairedReason::ManyRows { rows: 200 }),
    ] {
        let (xs, ws, bs) = (values(&[m, k], 14), values(&[k, n], 15), values(&[n], 16));
        let y = bias_tanh(
            &Lazy::from(xs.clone()),
            &Lazy::from(ws.clone()),
            &Lazy::from(bs.clone()),
        );
        let f = ovl::fusion_with(std::slice::from_ref(&y), &options(Options::cpu())).unwrap();
        assert!(f.report.epilogue_pairs.is_empty(), "{}", f.report);
        match &f.report.not_paired[..] {
            [p] => assert_eq!(p.reason, reason),
            other => panic!("{other:?}"),
        }
        let want = (product(&xs, &ws) + &bs).mapv(f64::tanh);
        for threads in [1, 2] {
            let got = evaluate(
                std::slice::from_ref(&y),
                Options::cpu().with_threads(threads),
            );
            close(&got[0], &want, &format!("{m} rows, {threads} threads"));
        }
    }
}

#[test]
fn a_product_with_the_weight_transposed_is_not_paired_where_it_pays_only() {
    // `tanh(x · wᵀ + b)`: the few-row kernel of `A · Bᵀ` puts C's rows in the vector lanes, so
    // blocks of fewer rows would run it with fewer rows per vector: not paired by the rule,
    // paired when always asked; the values are the same either way.
    let (m, k, n) = (20, 33, 50);
    let (xs, ws, bs) = (values(&[m, k], 23), values(&[n, k], 24), values(&[n], 25));
    let y = ops::tanh(ops::add(
        ops::matmul_t(Lazy::from(xs.clone()), Lazy::from(ws.clone()), false, true),
        Lazy::from(bs.clone()),
    ));
    let f = ovl::fusion_with(std::slice::from_ref(&y), &options(Options::cpu())).unwrap();
    assert!(f.report.epilogue_pairs.is_empty(), "{}", f.report);
    let reasons: Vec<_> = f.report.not_paired.iter().map(|p| &p.reason).collect();
    assert_eq!(
        reasons,
        [&NotPairedReason::TransposedWeight],
        "{}",
        f.report
    );
    let want = (product(&xs, &ws.t().to_owned()) + &bs).mapv(f64::tanh);
    let mut got = Vec::new();
    for schedule in [EpilogueMode::WherePays, EpilogueMode::Always] {
        mode(schedule);
        let y = evaluate(std::slice::from_ref(&y), Options::cpu().with_threads(2));
        close(&y[0], &want, &format!("{schedule:?}"));
        got.push(y);
    }
    assert_eq!(got[0], got[1]);
}

#[test]
fn a_pair_that_does_not_pay_on_more_threads_runs_as_two_kernels() {
    mode(EpilogueMode::WherePays);
    // Paired for two threads (2 blocks); on 16 threads 16 blocks would each read the weight:
    // the runner runs the kernels separately.
    let (m, k, n) = (64, 30, 100);
    let (xs, ws, bs) = (values(&[m, k], 17), values(&[k, n], 18), values(&[n], 19));
    let y = bias_tanh(
        &Lazy::from(xs.clone()),
        &Lazy::from(ws.clone()),
        &Lazy::from(bs.clone()),
    );
    let f = ovl::fusion_with(std::slice::from_ref(&y), &options(Options::cpu())).unwrap();
    assert_eq!(f.report.epilogue_pairs.len(), 1, "{}", f.report);
    let want = (product(&xs, &ws) + &bs).mapv(f64::tanh);
    let two = evaluate(std::slice::from_ref(&y), Options::cpu().with_threads(2));
    let seven = evaluate(std::slice::from_ref(&y), Options::cpu().with_threads(16));
    close(&two[0], &want, "2 threads");
    close(&seven[0], &want, "16 threads");
}

#[test]
fn a_kernel_reading_two_products_is_the_epilogue_of_one() {
    mode(EpilogueMode::Always);
    let (m, k1, k2, n) = (30, 7, 5, 40);
    let (xs, ws, hs, us) = (
        values(&[m, k1], 20),
        values(&[k1, n], 21),
        values(&[m, k2], 22),
        values(&[k2, n], 23),
    );
    let lz = |a: &ArrayD<f64>| Lazy::from(a.clone());
    let y = ops::tanh(ops::add(
        ops::matmul(lz(&xs), lz(&ws)),
        ops::matmul(lz(&hs), lz(&us)),
    ));
    let f = ovl::fusion_with(std::slice::from_ref(&y), &options(Options::cpu())).unwrap();
    let calls = f
        .after
        .operators
        .iter()
        .filter(|o| ovl::ir_tools::is_library_call(o))
        .count();
    assert_eq!(calls, 2, "{}", f.report);
    assert_eq!(f.report.epilogue_pairs.len(), 1, "{}", f.report);
    assert!(
        matches!(
            &f.report.not_paired[..],
            [p] if matches!(p.reason, NotPairedReason::ReaderTaken { .. })
        ),
        "{}",
        f.report
    );
    let want = (product(&xs, &ws) + product(&hs, &us)).mapv(f64::tanh);
    for threads in [1, 2] {
        let got = evaluate(
            std::slice::from_ref(&y),
            Options::cpu().with_threads(threads),
        );
        close(
            &got[0],
            &want,
            &format!("{threads} threads ({calls} calls)"),
        );
    }
}
