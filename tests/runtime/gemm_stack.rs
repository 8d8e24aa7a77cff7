//! Products stacked by fusion's pre-pass over library calls (`ovl-fuse/src/stack.rs`): products
//! that share their second operand and do not depend on each other's results become one product
//! over their stacked first operands (an LSTM layer's `x_t W`); each result a slice of it. Values
//! against a plain f64 loop and the unfused interpreter (odd sizes, every transposed form), what
//! the fusion report and the DOT picture say was stacked and what was refused (a recurrence's
//! `h U`; a copy that costs more than it saves), gradients through the stacked graph by central
//! differences, a small LSTM layer's forward and backward unchanged, and the cut of the stacked
//! result read in place by the runner where its pieces are contiguous blocks (copied where they
//! are not, or are graph outputs).

use ndarray::{ArrayD, IxDyn};
use ovl::{Lazy, NotStackedReason, Options};
use ovl_stdlib as ops;

fn options(target: Options, level: u8) -> Options {
    let o = target.with_opt_level(level);
    match std::env::var_os("OVL_CACHE_DIR") {
        Some(dir) => Options {
            cache_dir: Some(dir.into()),
            ..o
        },
        None => o,
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

/// `op(a) · op(b)` of 2-D arrays by a plain loop.
fn product(a: &ArrayD<f64>, b: &ArrayD<f64>, ta: bool, tb: bool) -> ArrayD<f64> {
    let at = |i: usize, q: usize| if ta { a[[q, i]] } else { a[[i, q]] };
    let bt = |q: usize, j: usize| if tb { b[[j, q]] } else { b[[q, j]] };
    let (m, k) = if ta {
        (a.shape()[1], a.shape()[0])
    } else {
        (a.shape()[0], a.shape()[1])
    };
    let n = if tb { b.shape()[0] } else { b.shape()[1] };
    ArrayD::from_shape_fn(IxDyn(&[m, n]), |ix| {
        (0..k).map(|q| at(ix[0], q) * bt(q, ix[1])).sum()
    })
}

fn close(got: &ArrayD<f64>, want: &ArrayD<f64>, tol: f64, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= tol * w.abs().max(1.0),
            "{what}: {g} vs {w}"
        );
    }
}

/// `s` slices of `x` along axis 0, each reshaped to `x`'s other axes.
fn slices(x: &Lazy<f64>, s: usize) -> Vec<Lazy<f64>> {
    let piece = &x.shape()[1..];
    ops::split(x, 0, s)
        .iter()
        .map(|p| ops::reshape(p, piece))
        .collect()
}

#[test]
fn independent_products_sharing_an_operand_stack_in_every_form() {
    let (s, m, k, n) = (4, 3, 5, 7);
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let xs = values(&[s, if ta { k } else { m }, if ta { m } else { k }], 1);
        let ws = values(&if tb { [n, k] } else { [k, n] }, 2);
        let (x, w) = (Lazy::from(xs.clone()), Lazy::from(ws.clone()));
        let ys: Vec<Lazy<f64>> = slices(&x, s)
            .iter()
            .map(|x_t| ops::tanh(ops::matmul_t(x_t, &w, ta, tb)))
            .collect();
        let f = ovl::fusion_with(&ys, &options(Options::cpu(), 1)).unwrap();
        assert_eq!(f.report.stacked.len(), 1, "{ta} {tb}:\n{}", f.report);
        let st = &f.report.stacked[0];
        assert_eq!(st.products.len(), s, "{}", f.report);
        let stacked = if ta { [k, s * m] } else { [s * m, k] }.map(|d| d as u64);
        assert_eq!(st.stacked_shape, stacked, "{}", f.report);
        assert!(f.report.not_stacked.is_empty(), "{}", f.report);
        let calls = f
            .after
            .operators
            .iter()
            .filter(|o| ovl::ir_tools::is_library_call(o))
            .count();
        assert_eq!(calls, 1, "one product left:\n{}", f.report);
        let text = f.report.to_string();
        assert!(text.contains("stacked 4 products"), "{text}");
        assert!(f
            .after_dot()
            .contains("stacked: 4 products sharing graph input 1"));
        for o in [Options::interpreter(), Options::cpu()] {
            for level in [0, 1, 3] {
                let got = ovl::evaluate_with(&ys, &options(o.clone(), level)).unwrap();
                for (t, y) in got.iter().enumerate() {
                    let x_t = xs.index_axis(ndarray::Axis(0), t).to_owned().into_dyn();
                    let want = product(&x_t, &ws, ta, tb).mapv(f64::tanh);
                    close(
                        y,
                        &want,
                        1e-12,
                        &format!("y_{t} ({ta}, {tb}, level {level})"),
                    );
                }
            }
        }
    }
}

#[test]
fn batched_products_stack_and_their_results_can_be_graph_outputs() {
    // [2, m, k] x [2, n, k]ᵀ, the products' results requested as they are.
    let (s, batch, m, k, n) = (3, 2, 2, 5, 3);
    let xs = values(&[s, batch, m, k], 21);
    let ws = values(&[batch, n, k], 22);
    let (x, w) = (Lazy::from(xs.clone()), Lazy::from(ws.clone()));
    let ys: Vec<Lazy<f64>> = slices(&x, s)
        .iter()
        .map(|x_t| ops::matmul_t(x_t, &w, false, true))
        .collect();
    let f = ovl::fusion_with(&ys, &options(Options::cpu(), 1)).unwrap();
    assert_eq!(f.report.stacked.len(), 1, "{}", f.report);
    assert_eq!(
        f.report.stacked[0].stacked_shape,
        [batch as u64, (s * m) as u64, k as u64]
    );
    for o in [Options::interpreter(), Options::cpu()] {
        let got = ovl::evaluate_with(&ys, &options(o.clone(), 1)).unwrap();
        for (t, y) in got.iter().enumerate() {
            for p in 0..batch {
                let a = xs.slice(ndarray::s![t, p, .., ..]).to_owned().into_dyn();
                let b = ws.slice(ndarray::s![p, .., ..]).to_owned().into_dyn();
                let want = product(&a, &b, false, true);
                let got = y.slice(ndarray::s![p, .., ..]).to_owned().into_dyn();
                close(&got, &want, 1e-12, &format!("y_{t}[{p}] ({:?})", o.target));
            }
        }
    }
}

#[test]
fn a_product_whose_operand_depends_on_another_is_not_stacked() {
    // h_{t+1} = tanh(h_t U), with U shared: each product reads the last one's result.
    let (b, h) = (3, 5);
    let us = values(&[h, h], 3);
    let h0s = values(&[b, h], 4);
    let u = Lazy::from(us.clone());
    let mut hs = vec![Lazy::from(h0s.clone())];
    for _ in 0..3 {
        let next = ops::tanh(ops::matmul(hs.last().unwrap(), &u));
        hs.push(next);
    }
    let f = ovl::fusion_with(&hs[1..], &options(Options::cpu(), 1)).unwrap();
    assert!(f.report.stacked.is_empty(), "{}", f.report);
    assert_eq!(f.report.not_stacked.len(), 3, "{}", f.report);
    for (t, refused) in f.report.not_stacked.iter().enumerate() {
        let NotStackedReason::Depends { on_other, .. } = &refused.reason else {
            panic!("{refused}");
        };
        // The first product's result feeds the second; every later one depends on the last.
        assert_eq!(*on_other, t > 0, "{refused}");
    }
    let text = f.report.to_string();
    assert!(
        text.contains("its first operand depends on the result of `matmul`"),
        "{text}"
    );
    let got = ovl::evaluate_with(&hs[1..], &options(Options::cpu(), 1)).unwrap();
    let mut want = h0s;
    for (t, g) in got.iter().enumerate() {
        want = product(&want, &us, false, false).mapv(f64::tanh);
        close(g, &want, 1e-12, &format!("h_{}", t + 1));
    }
}

#[test]
fn a_stack_whose_copy_costs_more_than_it_saves_is_refused() {
    // Tall operands and a shared [4, 1]: copying 2 x 200 elements to read 4 fewer.
    let xs = values(&[2, 50, 4], 5);
    let x = Lazy::from(xs.clone());
    let w = Lazy::from(values(&[4, 1], 6));
    let ys: Vec<Lazy<f64>> = slices(&x, 2)
        .iter()
        .map(|x_t| ops::matmul(x_t, &w))
        .collect();
    let f = ovl::fusion_with(&ys, &options(Options::cpu(), 1)).unwrap();
    assert!(f.report.stacked.is_empty(), "{}", f.report);
    assert_eq!(f.report.not_stacked.len(), 2, "{}", f.report);
    assert!(
        matches!(
            f.report.not_stacked[0].reason,
            NotStackedReason::CopyCostsMore {
                copied: 400,
                saved: 4
            }
        ),
        "{}",
        f.report
    );
}

/// `sum_t sum(tanh(x_t W) * g_t)` by plain loops.
fn loss(xs: &ArrayD<f64>, ws: &ArrayD<f64>, gs: &ArrayD<f64>) -> f64 {
    (0..xs.shape()[0])
        .map(|t| {
            let x_t = xs.index_axis(ndarray::Axis(0), t).to_owned().into_dyn();
            let g_t = gs.index_axis(ndarray::Axis(0), t);
            let y = product(&x_t, ws, false, false).mapv(f64::tanh);
            y.iter().zip(g_t.iter()).map(|(y, g)| y * g).sum::<f64>()
        })
        .sum()
}

#[test]
fn gradients_through_stacked_products_match_central_differences() {
    let (s, m, k, n) = (3, 2, 5, 4);
    let (xs, ws, gs) = (
        values(&[s, m, k], 7),
        values(&[k, n], 8),
        values(&[s, m, n], 9),
    );
    let (x, w) = (Lazy::from(xs.clone()), Lazy::from(ws.clone()));
    let ys: Vec<Lazy<f64>> = slices(&x, s)
        .iter()
        .map(|x_t| ops::tanh(ops::matmul(x_t, &w)))
        .collect();
    let seeds: Vec<Lazy<f64>> = slices(&Lazy::from(gs.clone()), s);
    let pairs: Vec<(&Lazy<f64>, &Lazy<f64>)> = ys.iter().zip(&seeds).collect();
    let grads = ovl::backward(&pairs, &[&x, &w]).unwrap();
    let (dx, dw) = (grads.of(&x).unwrap(), grads.of(&w).unwrap());
    // The backward's `dy_t Wᵀ` share W and stack too (the forward's `x_t W` as well).
    let f = ovl::fusion_with((&dx, &dw), &options(Options::cpu(), 1)).unwrap();
    assert!(
        f.report
            .stacked
            .iter()
            .any(|st| st.call == "gemm(bᵀ)" && st.products.len() == s),
        "{}",
        f.report
    );
    for o in [Options::interpreter(), Options::cpu()] {
        let (gx, gw) = ovl::evaluate_with((&dx, &dw), &options(o.clone(), 1)).unwrap();
        for (base, got, which) in [(&xs, &gx, "x"), (&ws, &gw, "w")] {
            for idx in 0..base.len() {
                let h = 1e-6;
                let bumped = |d: f64| {
                    let mut v = base.clone();
                    v.as_slice_mut().unwrap()[idx] += d;
                    if which == "x" {
                        loss(&v, &ws, &gs)
                    } else {
                        loss(&xs, &v, &gs)
                    }
                };
                let numeric = (bumped(h) - bumped(-h)) / (2.0 * h);
                let g = got.as_slice().unwrap()[idx];
                assert!(
                    (g - numeric).abs() <= 1e-7 * numeric.abs().max(1.0),
                    "d{which}[{idx}] ({:?}): {g} vs {numeric}",
                    o.target
                );
            }
        }
    }
}

/// The LSTM layer as `benches/lstm_layer.rs` writes it (f32): every step's `h`.
fn layer(x: &Lazy<f32>, w: &Lazy<f32>, u: &Lazy<f32>, bias: &Lazy<f32>) -> Vec<Lazy<f32>> {
    let (t, b, h) = (x.shape()[0], x.shape()[1], u.shape()[0]);
    let zeros = || Lazy::from(ArrayD::<f32>::zeros(IxDyn(&[b, h])));
    let (mut hs, mut h_t, mut c_t) = (Vec::new(), zeros(), zeros());
    for x_t in ops::split(x, 0, t) {
        let x_t = ops::reshape(&x_t, &[b, x.shape()[2]]);
        let z = ops::add(ops::add(ops::matmul(&x_t, w), ops::matmul(&h_t, u)), bias);
        let g = ops::split(&z, 1, 4);
        let c = ops::add(
            ops::mul(ops::sigmoid(&g[1]), &c_t),
            ops::mul(ops::sigmoid(&g[0]), ops::tanh(&g[2])),
        );
        let new_h = ops::mul(ops::sigmoid(&g[3]), ops::tanh(&c));
        hs.push(new_h.clone());
        (h_t, c_t) = (new_h, c);
    }
    hs
}

/// Every step's `h` of the layer, evaluated on the CPU at `level`, against the reference's.
fn steps_close(hs: &[Lazy<f32>], want: &[ArrayD<f64>], level: u8) {
    let got = ovl::evaluate_with(hs, &options(Options::cpu(), level)).unwrap();
    for (s, (g, w)) in got.iter().zip(want).enumerate() {
        close(
            &g.mapv(f64::from),
            w,
            1e-5,
            &format!("h_{s} (level {level})"),
        );
    }
}

/// The layer's gradients, evaluated on the CPU at `level`, against the unfused interpreter's.
fn gradients_close(outs: &[Lazy<f32>], unfused: &[ArrayD<f32>], level: u8) {
    let got = ovl::evaluate_with(outs, &options(Options::cpu(), level)).unwrap();
    for (k, (g, w)) in got.iter().zip(unfused).enumerate() {
        close(
            &g.mapv(f64::from),
            &w.mapv(f64::from),
            1e-4,
            &format!("gradient {k} (level {level})"),
        );
    }
}

/// The same layer by plain loops in f64.
fn layer_reference(
    xs: &ArrayD<f64>,
    ws: &ArrayD<f64>,
    us: &ArrayD<f64>,
    bs: &ArrayD<f64>,
) -> Vec<ArrayD<f64>> {
    let (t, b, h) = (xs.shape()[0], xs.shape()[1], us.shape()[0]);
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let (mut h_t, mut c_t): (ArrayD<f64>, ArrayD<f64>) =
        (ArrayD::zeros(IxDyn(&[b, h])), ArrayD::zeros(IxDyn(&[b, h])));
    let mut out = Vec::new();
    for step in 0..t {
        let x_t = xs.index_axis(ndarray::Axis(0), step).to_owned().into_dyn();
        let z = product(&x_t, ws, false, false) + product(&h_t, us, false, false);
        let (mut nh, mut nc) = (h_t.clone(), c_t.clone());
        for r in 0..b {
            for j in 0..h {
                let g = |q: usize| -> f64 { z[[r, q * h + j]] + bs[[q * h + j]] };
                let c: f64 = sig(g(1)) * c_t[[r, j]] + sig(g(0)) * g(2).tanh();
                nc[[r, j]] = c;
                nh[[r, j]] = sig(g(3)) * c.tanh();
            }
        }
        (h_t, c_t) = (nh, nc);
        out.push(h_t.clone());
    }
    out
}

#[test]
fn an_lstm_layer_stacks_its_input_products_and_computes_the_same() {
    let (t, b, i, h) = (5, 3, 6, 4);
    let f32s = |a: ArrayD<f64>| a.mapv(|v| v as f32);
    let (xs, ws, us, bs) = (
        values(&[t, b, i], 11),
        values(&[i, 4 * h], 12).mapv(|v| v * 0.5),
        values(&[h, 4 * h], 13).mapv(|v| v * 0.5),
        values(&[4 * h], 14).mapv(|v| v * 0.1),
    );
    let [x, w, u, bias] = [&xs, &ws, &us, &bs].map(|a| Lazy::from(f32s(a.clone())));
    let hs = layer(&x, &w, &u, &bias);
    let f = ovl::fusion_with(&hs, &options(Options::cpu(), 1)).unwrap();
    assert_eq!(f.report.stacked.len(), 1, "{}", f.report);
    assert_eq!(
        f.report.stacked[0].stacked_shape,
        [(t * b) as u64, i as u64]
    );
    // Every h U product but the first reads the last step's result.
    assert_eq!(f.report.not_stacked.len(), t, "{}", f.report);
    let want = layer_reference(&xs, &ws, &us, &bs);
    for level in [1, 3] {
        steps_close(&hs, &want, level);
    }

    // Forward + backward: the gradients as the unfused graph computes them.
    let gs = values(&[t, b, h], 15);
    let seeds: Vec<Lazy<f32>> = ops::split(Lazy::from(f32s(gs)), 0, t)
        .iter()
        .map(|g| ops::reshape(g, &[b, h]))
        .collect();
    let pairs: Vec<(&Lazy<f32>, &Lazy<f32>)> = hs.iter().zip(&seeds).collect();
    let grads = ovl::backward(&pairs, &[&x, &w, &u, &bias]).unwrap();
    let outs: Vec<Lazy<f32>> = [&x, &w, &u, &bias]
        .iter()
        .map(|v| grads.of_or_zeros(v))
        .collect();
    let f = ovl::fusion_with(&outs, &options(Options::cpu(), 1)).unwrap();
    let calls: Vec<&str> = f.report.stacked.iter().map(|s| s.call.as_str()).collect();
    assert!(
        calls.contains(&"gemm(bᵀ)"),
        "dz_t Wᵀ stacked:\n{}",
        f.report
    );
    let unfused = ovl::evaluate_with(&outs, &options(Options::interpreter(), 0)).unwrap();
    for level in [1, 3] {
        gradients_close(&outs, &unfused, level);
    }
}

/// A bias added in every step gets its gradient as one reduction of the sum of the steps'
/// gradients (`Σ_t sum_to(dz_t)` recorded as `sum_to(Σ_t dz_t)`, which fuses into a small
/// kernel instead of one loop per step): one `sum_to` in the graph, and the values of a plain
/// f64 computation.
#[test]
fn a_bias_used_in_every_step_is_reduced_once() {
    let (t, b, n) = (4, 3, 5);
    let (xs, bs) = (values(&[b, n], 21), values(&[n], 22));
    let x = Lazy::from(xs.mapv(|v| v as f32));
    let bias = Lazy::from(bs.mapv(|v| v as f32));
    let mut h = x.clone();
    for _ in 0..t {
        h = ops::tanh(ops::add(&h, &bias));
    }
    let seed = Lazy::from(ArrayD::<f32>::ones(IxDyn(&[b, n])));
    let grads = ovl::backward(&[(&h, &seed)], &[&bias]).unwrap();
    let db = grads.of(&bias).unwrap();
    let unfused = ovl::fusion_with(&db, &options(Options::cpu(), 0)).unwrap();
    let sums = unfused
        .after
        .operators
        .iter()
        .filter(|o| o.name == "sum_to");
    assert_eq!(sums.count(), 1, "{}", unfused.report);

    let mut hs = vec![xs];
    for _ in 0..t {
        let a = hs.last().unwrap() + &bs;
        hs.push(a.mapv(f64::tanh));
    }
    let mut g = ArrayD::<f64>::ones(IxDyn(&[b, n]));
    let mut want = ArrayD::<f64>::zeros(IxDyn(&[n]));
    for s in (1..=t).rev() {
        g = &g * &hs[s].mapv(|v| 1.0 - v * v);
        want = want + g.sum_axis(ndarray::Axis(0));
    }
    for level in [0, 3] {
        let got = ovl::evaluate_with(&db, &options(Options::cpu(), level)).unwrap();
        close(
            &got.mapv(f64::from),
            &want,
            1e-5,
            &format!("db (level {level})"),
        );
    }
}

/// The kernels each operator named `name` launches per run, from a profile of `outs`.
fn kernels_named<T: ovl::Scalar>(outs: &[Lazy<T>], level: u8, name: &str) -> Vec<usize> {
    let (_, profile) = ovl::profile(outs, &options(Options::cpu(), level), 1).unwrap();
    profile
        .operators
        .iter()
        .filter(|o| o.name == name)
        .map(|o| o.kernels)
        .collect()
}

/// The cut of the stacked result into the steps' results copies nothing when each step's
/// piece is a contiguous block of it (2-D products): the runner lets each step read its rows
/// of the stacked result in place and runs no kernel for the cut (its profile entry launches
/// none), with the values of the reference, in the forward and in forward + backward, at level
/// 1 and at the default level 3 (where fusion once merged the cut with the first step's sum,
/// which made it copy every piece: the report says why it is left alone).
#[test]
fn the_cut_of_a_stacked_result_is_read_in_place() {
    let (t, b, i, h) = (7, 5, 9, 6);
    let f32s = |a: ArrayD<f64>| a.mapv(|v| v as f32);
    let (xs, ws, us, bs) = (
        values(&[t, b, i], 31),
        values(&[i, 4 * h], 32).mapv(|v| v * 0.5),
        values(&[h, 4 * h], 33).mapv(|v| v * 0.5),
        values(&[4 * h], 34).mapv(|v| v * 0.1),
    );
    let [x, w, u, bias] = [&xs, &ws, &us, &bs].map(|a| Lazy::from(f32s(a.clone())));
    let hs = layer(&x, &w, &u, &bias);
    let want = layer_reference(&xs, &ws, &us, &bs);
    let seeds: Vec<Lazy<f32>> = (0..t)
        .map(|s| Lazy::from(f32s(values(&[b, h], 40 + s as u64))))
        .collect();
    let pairs: Vec<(&Lazy<f32>, &Lazy<f32>)> = hs.iter().zip(&seeds).collect();
    let grads = ovl::backward(&pairs, &[&x, &w, &u, &bias]).unwrap();
    let outs: Vec<Lazy<f32>> = [&x, &w, &u, &bias]
        .iter()
        .map(|v| grads.of_or_zeros(v))
        .collect();
    let unfused = ovl::evaluate_with(&outs, &options(Options::interpreter(), 0)).unwrap();
    for level in [1, 3] {
        let cuts = kernels_named(&hs, level, "unstack_rows");
        assert_eq!(cuts, [0], "level {level}: one cut, run as views");
        if level == 3 {
            let f = ovl::fusion_with(&hs, &options(Options::cpu(), level)).unwrap();
            assert!(
                f.report
                    .refusals
                    .iter()
                    .any(|r| matches!(r.reason, ovl::Reason::CutReadInPlace { .. })),
                "{}",
                f.report
            );
        }
        steps_close(&hs, &want, level);

        let cuts = kernels_named(&outs, level, "unstack_rows");
        assert!(
            !cuts.is_empty() && cuts.iter().all(|&k| k == 0),
            "level {level}: every cut left runs as views: {cuts:?}"
        );
        gradients_close(&outs, &unfused, level);
    }
}

/// Pieces that are not contiguous blocks of the stacked result (batched products: each batch
/// holds rows of every piece) are still copied by the cut's kernel, in f64, with the values
/// of a plain loop.
#[test]
fn a_cut_into_pieces_that_are_not_contiguous_still_copies() {
    let (s, batch, m, k, n) = (3, 2, 2, 5, 4);
    let xs = values(&[s, batch, m, k], 51);
    let ws = values(&[batch, k, n], 52);
    let (x, w) = (Lazy::from(xs.clone()), Lazy::from(ws.clone()));
    let ys: Vec<Lazy<f64>> = slices(&x, s)
        .iter()
        .map(|x_t| ops::tanh(ops::matmul(x_t, &w)))
        .collect();
    let f = ovl::fusion_with(&ys, &options(Options::cpu(), 1)).unwrap();
    assert_eq!(f.report.stacked.len(), 1, "{}", f.report);
    let cuts = kernels_named(&ys, 1, "unstack_rows");
    assert!(
        !cuts.is_empty() && cuts.iter().all(|&k| k == 1),
        "a batched cut runs its kernel: {cuts:?}"
    );
    let got = ovl::evaluate_with(&ys, &options(Options::cpu(), 1)).unwrap();
    for (t, y) in got.iter().enumerate() {
        for p in 0..batch {
            let a = xs.slice(ndarray::s![t, p, .., ..]).to_owned().into_dyn();
            let b = ws.slice(ndarray::s![p, .., ..]).to_owned().into_dyn();
            let want = product(&a, &b, false, false).mapv(f64::tanh);
            let got = y.slice(ndarray::s![p, .., ..]).to_owned().into_dyn();
            close(&got, &want, 1e-12, &format!("y_{t}[{p}]"));
        }
    }
}

/// A cut whose pieces are requested as graph outputs (written into the caller's arrays, not
/// placed inside the stacked result) still runs its kernel, with the values of a plain loop.
#[test]
fn a_cut_whose_pieces_are_graph_outputs_still_copies() {
    let (s, m, k, n) = (4, 3, 5, 6);
    let xs = values(&[s, m, k], 61);
    let ws = values(&[k, n], 62);
    let (x, w) = (Lazy::from(xs.clone()), Lazy::from(ws.clone()));
    let ys: Vec<Lazy<f64>> = slices(&x, s)
        .iter()
        .map(|x_t| ops::matmul(x_t, &w))
        .collect();
    let f = ovl::fusion_with(&ys, &options(Options::cpu(), 1)).unwrap();
    assert_eq!(f.report.stacked.len(), 1, "{}", f.report);
    let cuts = kernels_named(&ys, 1, "unstack_rows");
    assert_eq!(cuts, [1], "the cut writes the outputs");
    let got = ovl::evaluate_with(&ys, &options(Options::cpu(), 1)).unwrap();
    for (t, y) in got.iter().enumerate() {
        let a = xs.slice(ndarray::s![t, .., ..]).to_owned().into_dyn();
        close(y, &product(&a, &ws, false, false), 1e-12, &format!("y_{t}"));
    }
}
