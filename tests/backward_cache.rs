//! The cache of backward graphs behind `ovl::backward`: a forward graph seen before (same
//! operators, wiring, shapes and dtypes, same gradient functions, same seeds and requested
//! tensors) replays the backward graph built the first time, whose evaluation is a plan-cache
//! hit and gives the values of a fresh backward pass on the new data. Any change to what the
//! backward graph would be (a constant, a shape, a dtype, a gradient function or what it
//! captures, the tensors asked for, the seeds) is a miss, never a stale reuse. The cache stays
//! within its capacity, is cleared with the plan cache, and is safe to share between threads.
//!
//! The tests share the process-wide caches and their counters, so they run one at a time
//! (`SERIAL`); each starts from empty caches.

use ndarray::{Array1, Array2, ArrayD};
use ovl::prelude::*;
use ovl::{CacheCounters, GradientCall, LazyTensor};
use ovl_stdlib as ops;
use std::sync::{Mutex, MutexGuard};

#[path = "support/plan_caches.rs"]
mod plan_caches;
use plan_caches::{clear_plans, plan_capacity};

static SERIAL: Mutex<()> = Mutex::new(());

/// Takes the lock and starts from empty caches of the default capacity.
fn fresh() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    ovl::set_trace_memo(true);
    plan_capacity(128);
    clear_plans();
    guard
}

fn stats() -> CacheCounters {
    ovl::cache_stats().backward_graphs
}

/// (hits, misses, bypassed) of the backward cache.
fn counts() -> (u64, u64, u64) {
    let s = stats();
    (s.hits, s.misses, s.bypassed)
}

fn interp() -> Options {
    Options::interpreter()
}

fn data(n: usize, offset: f64) -> Array1<f64> {
    Array1::from_iter((0..n).map(|k| 0.3 * k as f64 - 1.1 + offset))
}

fn close(a: &ArrayD<f64>, b: &ArrayD<f64>) -> bool {
    a.shape() == b.shape() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-12)
}

/// `y = x * tanh(x) + x`; returns dy/dx * seed evaluated, and the expected value.
fn tanh_chain(x: &Array1<f64>, seed: &Array1<f64>) -> (ArrayD<f64>, ArrayD<f64>) {
    let xl = Lazy::from(x.clone());
    let y = ops::add(ops::mul(&xl, ops::tanh(&xl)), &xl);
    let s = Lazy::from(seed.clone());
    let grads = ovl::backward(&[(&y, &s)], &[&xl]).unwrap();
    let got = evaluate_with(&grads.of(&xl).unwrap(), &interp()).unwrap();
    let want = ndarray::Zip::from(x)
        .and(seed)
        .map_collect(|&v, &g| g * (v.tanh() + v * (1.0 - v.tanh() * v.tanh()) + 1.0))
        .into_dyn();
    (got, want)
}

#[test]
fn a_repeated_backward_pass_is_a_hit_with_fresh_values_and_a_plan_cache_hit() {
    let _g = fresh();
    for k in 0..4 {
        let x = data(6, k as f64);
        let seed = data(6, 0.5 * k as f64);
        let (got, want) = tanh_chain(&x, &seed);
        assert!(close(&got, &want), "call {k}: {got} vs {want}");
    }
    assert_eq!(counts(), (3, 1, 0));
    let plans = ovl::cache_stats().plans;
    assert_eq!(
        (plans.misses, plans.hits),
        (1, 3),
        "the replayed graph's plan is reused"
    );
}

/// The LSTM cell of the benchmark, forward and backward from stdlib operators, evaluated
/// together: a hit gives what a backward pass built afresh gives.
#[test]
fn the_lstm_cell_replayed_equals_the_uncached_path() {
    let _g = fresh();
    let (b, h) = (3, 5);
    let cell = |seed: u64| {
        let gen = |shape: (usize, usize), s: u64| {
            Array2::from_shape_fn(shape, |(i, j)| {
                (((i * 31 + j * 17) as u64 * (s + 3) % 97) as f32) / 24.0 - 2.0
            })
        };
        let z = Lazy::from(gen((b, 4 * h), seed));
        let c = Lazy::from(gen((b, h), seed + 1));
        let dc = Lazy::from(gen((b, h), seed + 2));
        let dh = Lazy::from(gen((b, h), seed + 3));
        let gates = ops::split(&z, 1, 4);
        let bias = Lazy::from(ndarray::arr0(1.0f32));
        let new_c = ops::add(
            ops::mul(&c, ops::sigmoid(ops::add(&gates[2], bias))),
            ops::mul(ops::sigmoid(&gates[0]), ops::tanh(&gates[1])),
        );
        let new_h = ops::mul(ops::tanh(&new_c), ops::sigmoid(&gates[3]));
        let grads = ovl::backward(&[(&new_c, &dc), (&new_h, &dh)], &[&z, &c]).unwrap();
        let (dz, dcp) = (grads.of(&z).unwrap(), grads.of(&c).unwrap());
        let mut outs: Vec<ArrayD<f32>> = vec![
            ArrayD::zeros(ndarray::IxDyn(&[b, h])),
            ArrayD::zeros(ndarray::IxDyn(&[b, h])),
            ArrayD::zeros(ndarray::IxDyn(&[b, 4 * h])),
            ArrayD::zeros(ndarray::IxDyn(&[b, h])),
        ];
        ovl::evaluate_into_all([&new_c, &new_h, &dz, &dcp], &mut outs, &interp()).unwrap();
        outs
    };
    let first = cell(1);
    let cached: Vec<_> = (2..5).map(cell).collect();
    assert_eq!(counts(), (3, 1, 0));
    // The same calls with every cache off: a backward pass built at every call.
    plan_capacity(0);
    let fresh_first = cell(1);
    let uncached: Vec<_> = (2..5).map(cell).collect();
    plan_capacity(128);
    assert_eq!(first, fresh_first);
    assert_eq!(
        cached, uncached,
        "replayed gradients equal the uncached ones"
    );
    assert_ne!(cached[0], cached[1], "new data gives new values");
}

#[operator]
fn scaled(x: Tensor<f64>, k: f64) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * k;
    out
}

/// `scaled` with a gradient that captures `factor` (keyed by it): dy * factor.
fn scaled_keyed(x: &Lazy<f64>, k: f64, factor: f64) -> Lazy<f64> {
    let y = scaled(x, k);
    ovl::set_gradient_keyed(&y, &factor, move |c| {
        vec![Some(scaled(c.output_grad::<f64>(0), factor).into_untyped())]
    });
    y
}

fn grad_of(y: &Lazy<f64>, x: &Lazy<f64>) -> ArrayD<f64> {
    let seed = Lazy::from(ArrayD::from_elem(ndarray::IxDyn(y.shape()), 1.0f64));
    let grads = ovl::backward(&[(y, &seed)], &[x]).unwrap();
    evaluate_with(&grads.of(x).unwrap(), &interp()).unwrap()
}

#[test]
fn a_changed_constant_is_a_miss() {
    let _g = fresh();
    let x = Lazy::from(data(4, 0.0));
    // The forward constant changes the operator: its gradient closure's key is the same.
    let g1 = grad_of(&ops::tanh(scaled_keyed(&x, 2.0, 1.0)), &x);
    let g2 = grad_of(&ops::tanh(scaled_keyed(&x, 3.0, 1.0)), &x);
    assert_eq!(counts(), (0, 2, 0));
    let want = |k: f64| {
        data(4, 0.0)
            .mapv(|v| 1.0 - (k * v).tanh().powi(2))
            .into_dyn()
    };
    assert!(close(&g1, &want(2.0)) && close(&g2, &want(3.0)));
    // A constant captured by the gradient function (its key) changes the backward graph.
    let g3 = grad_of(&scaled_keyed(&x, 2.0, 5.0), &x);
    let g4 = grad_of(&scaled_keyed(&x, 2.0, 7.0), &x);
    let g5 = grad_of(&scaled_keyed(&x, 2.0, 5.0), &x);
    assert_eq!(counts(), (1, 4, 0));
    assert_eq!(g3, ArrayD::from_elem(ndarray::IxDyn(&[4]), 5.0));
    assert_eq!(g4, ArrayD::from_elem(ndarray::IxDyn(&[4]), 7.0));
    assert_eq!(g5, g3);
}

#[test]
fn a_changed_shape_or_dtype_is_a_miss() {
    let _g = fresh();
    let (a, wa) = tanh_chain(&data(3, 0.0), &data(3, 1.0));
    let (b, wb) = tanh_chain(&data(5, 0.0), &data(5, 1.0));
    assert!(close(&a, &wa) && close(&b, &wb));
    assert_eq!(counts(), (0, 2, 0));
    // The same chain in f32.
    let x = Lazy::from(data(3, 0.0).mapv(|v| v as f32));
    let y = ops::add(ops::mul(&x, ops::tanh(&x)), &x);
    let seed = Lazy::from(data(3, 1.0).mapv(|v| v as f32));
    let grads = ovl::backward(&[(&y, &seed)], &[&x]).unwrap();
    let got = evaluate_with(&grads.of(&x).unwrap(), &interp()).unwrap();
    assert_eq!(counts(), (0, 3, 0));
    for (g, w) in got.iter().zip(wa.iter()) {
        assert!((*g as f64 - w).abs() < 1e-5, "{g} vs {w}");
    }
}

#[operator]
fn cube(x: Tensor<f64>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * x[[i]] * x[[i]];
    out
}

/// The true gradient of `cube`: 3 x² dy.
fn cube_grad(c: &GradientCall) -> Vec<Option<LazyTensor>> {
    let x = c.input::<f64>(0);
    vec![Some(
        ops::mul(ops::mul(&x, &x), scaled(c.output_grad::<f64>(0), 3.0)).into_untyped(),
    )]
}

/// Another gradient for the same operator: dy.
fn identity_grad(c: &GradientCall) -> Vec<Option<LazyTensor>> {
    vec![Some(c.output_grad::<f64>(0).into_untyped())]
}

#[test]
fn a_changed_gradient_function_is_a_miss() {
    let _g = fresh();
    let x = Lazy::from(data(4, 0.0));
    let with = |g: fn(&GradientCall) -> Vec<Option<LazyTensor>>| {
        let y = cube(&x);
        ovl::set_gradient(&y, g);
        y
    };
    let three_x2 = data(4, 0.0).mapv(|v| 3.0 * v * v).into_dyn();
    let ones = ArrayD::from_elem(ndarray::IxDyn(&[4]), 1.0);
    // A function pointer is not zero-sized: it could be any function, so it is never cached.
    assert!(close(&grad_of(&with(cube_grad), &x), &three_x2));
    assert_eq!(grad_of(&with(identity_grad), &x), ones);
    assert_eq!(counts(), (0, 0, 2));
    // Function items and closures without captures are identified by their type.
    let by_item = |use_cube: bool| {
        let y = cube(&x);
        if use_cube {
            ovl::set_gradient(&y, cube_grad);
        } else {
            ovl::set_gradient(&y, identity_grad);
        }
        grad_of(&y, &x)
    };
    assert!(close(&by_item(true), &three_x2));
    assert_eq!(by_item(false), ones);
    assert!(close(&by_item(true), &three_x2));
    assert_eq!(by_item(false), ones);
    assert_eq!(counts(), (2, 2, 2));
    // No gradient function: the gradient derived from the IR, never a reuse of another call's
    // gradient function; derived gradients are cached too (the IR is in the graph key).
    assert!(close(&grad_of(&cube(&x), &x), &three_x2));
    assert_eq!(counts(), (2, 3, 2));
    assert!(close(&grad_of(&cube(&x), &x), &three_x2));
    assert_eq!(counts(), (3, 3, 2));
}

#[test]
fn a_closure_with_unkeyed_captures_is_built_every_time() {
    let _g = fresh();
    let x = Lazy::from(data(4, 0.0));
    for factor in [2.0f64, 3.0, 3.0, 2.0] {
        let y = scaled(&x, 1.0);
        ovl::set_gradient(&y, move |c| {
            vec![Some(scaled(c.output_grad::<f64>(0), factor).into_untyped())]
        });
        assert_eq!(
            grad_of(&y, &x),
            ArrayD::from_elem(ndarray::IxDyn(&[4]), factor)
        );
    }
    assert_eq!(counts(), (0, 0, 4));
}

#[test]
fn changed_requested_tensors_or_seeds_are_a_miss() {
    let _g = fresh();
    let (xv, yv) = (data(4, 0.0), data(4, 2.0));
    let run = |wrt_x: bool, wrt_y: bool, seed_both: bool| {
        let (x, y) = (Lazy::from(xv.clone()), Lazy::from(yv.clone()));
        let p = ops::mul(&x, &y);
        let q = ops::sin(&x);
        let ones = Lazy::from(Array1::from_elem(4, 1.0f64));
        let mut seeds = vec![(&p, &ones)];
        if seed_both {
            seeds.push((&q, &ones));
        }
        let mut wrt = Vec::new();
        if wrt_x {
            wrt.push(&x);
        }
        if wrt_y {
            wrt.push(&y);
        }
        let grads = ovl::backward(&seeds, &wrt).unwrap();
        let get = |t: &Lazy<f64>| {
            grads.of(t).map(|g| {
                evaluate_with(&g, &interp())
                    .unwrap()
                    .into_dimensionality()
                    .unwrap()
            })
        };
        (get(&x), get(&y))
    };
    let dx = |both: bool| {
        ndarray::Zip::from(&xv)
            .and(&yv)
            .map_collect(|&a, &b| b + if both { a.cos() } else { 0.0 })
    };
    for _ in 0..2 {
        assert_eq!(run(true, false, false), (Some(dx(false)), None));
        assert_eq!(run(false, true, false), (None, Some(xv.clone())));
        assert_eq!(run(true, true, false), (Some(dx(false)), Some(xv.clone())));
        let (gx, gy) = run(true, true, true);
        assert!(gx
            .unwrap()
            .iter()
            .zip(dx(true).iter())
            .all(|(a, b)| (a - b).abs() < 1e-12));
        assert_eq!(gy, Some(xv.clone()));
    }
    assert_eq!(counts(), (4, 4, 0));
    // A seed of the wrong shape is an error every time.
    let x = Lazy::from(xv.clone());
    let y = ops::sin(&x);
    let bad = Lazy::from(Array1::from_elem(3, 1.0f64));
    for _ in 0..2 {
        assert!(matches!(
            ovl::backward(&[(&y, &bad)], &[&x]),
            Err(ovl::GradError::SeedMismatch { .. })
        ));
    }
}

#[test]
fn second_order_through_a_replayed_graph() {
    let _g = fresh();
    // The gradient of split is a concat, whose own gradient is a split: differentiate the
    // backward graph with respect to a seed, on a replayed graph too.
    for k in 0..3 {
        let x = Lazy::from(data(6, k as f64));
        let pieces = ops::split(&x, 0, 2);
        let d0 = Lazy::from(data(3, 10.0 + k as f64));
        let d1 = Lazy::from(data(3, 20.0));
        let grads = ovl::backward(&[(&pieces[0], &d0), (&pieces[1], &d1)], &[&x]).unwrap();
        let gx = grads.of(&x).unwrap();
        let e = Lazy::from(data(6, 30.0 + k as f64));
        let second = ovl::backward(&[(&gx, &e)], &[&d0]).unwrap();
        let got = evaluate_with(&second.of(&d0).unwrap(), &interp()).unwrap();
        assert_eq!(
            got,
            data(6, 30.0 + k as f64)
                .slice(ndarray::s![..3])
                .to_owned()
                .into_dyn()
        );
    }
    let s = stats();
    assert_eq!((s.hits, s.misses), (4, 2), "{s:?}");
}

#[test]
fn the_cache_stays_within_its_capacity_and_is_cleared_with_the_plan_cache() {
    let _g = fresh();
    plan_capacity(2);
    for n in [2usize, 3, 4, 2, 3, 4] {
        let (got, want) = tanh_chain(&data(n, 0.0), &data(n, 1.0));
        assert!(close(&got, &want));
        assert!(stats().entries <= 2);
    }
    let s = stats();
    assert_eq!((s.hits, s.misses, s.capacity), (0, 6, 2), "{s:?}");
    assert_eq!(s.evictions, 4);
    tanh_chain(&data(4, 0.0), &data(4, 1.0));
    assert_eq!(stats().hits, 1, "the most recently used entry stays");
    clear_plans();
    assert_eq!(
        stats(),
        CacheCounters {
            capacity: 2,
            ..Default::default()
        }
    );
    tanh_chain(&data(4, 0.0), &data(4, 1.0));
    assert_eq!(counts(), (0, 1, 0));
    // Capacity 0 turns it off.
    plan_capacity(0);
    let (got, want) = tanh_chain(&data(4, 0.0), &data(4, 1.0));
    assert!(close(&got, &want));
    assert_eq!((stats().entries, stats().hits), (0, 0));
    plan_capacity(128);
}

#[test]
fn the_trace_memo_turned_off_bypasses_the_cache() {
    let _g = fresh();
    ovl::set_trace_memo(false);
    for _ in 0..2 {
        let (got, want) = tanh_chain(&data(4, 0.0), &data(4, 1.0));
        assert!(close(&got, &want));
    }
    ovl::set_trace_memo(true);
    assert_eq!(counts(), (0, 0, 0));
}

#[test]
fn several_threads_share_the_cache() {
    let _g = fresh();
    std::thread::scope(|s| {
        for t in 0..4 {
            s.spawn(move || {
                for k in 0..10 {
                    let n = 3 + (k % 2);
                    let (got, want) = tanh_chain(&data(n, t as f64), &data(n, k as f64));
                    assert!(close(&got, &want), "thread {t} call {k}");
                }
            });
        }
    });
    let s = stats();
    assert_eq!(s.hits + s.misses, 40);
    assert!((2..=8).contains(&s.misses), "{s:?}");
    assert_eq!(s.entries, 2);
}

/// `tanh(x * w)` batched with `vmap` over the rows of `x` (`w` shared); returns the gradients
/// of `sum(y * seed)` with respect to `x` and `w`, evaluated, and their expected values.
fn vmapped_tanh_scale(
    x: &Array2<f64>,
    w: &Array1<f64>,
    seed: &Array2<f64>,
) -> [(ArrayD<f64>, ArrayD<f64>); 2] {
    let (xl, wl) = (Lazy::from(x.clone()), Lazy::from(w.clone()));
    let y = ovl::vmap(
        |(x, w): (Lazy<f64>, Lazy<f64>)| ops::tanh(ops::mul(&x, &w)),
        (ovl::Batched(&xl), ovl::Shared(&wl)),
    )
    .unwrap();
    let s = Lazy::from(seed.clone());
    let grads = ovl::backward(&[(&y, &s)], &[&xl, &wl]).unwrap();
    let dx = evaluate_with(&grads.of(&xl).unwrap(), &interp()).unwrap();
    let dw = evaluate_with(&grads.of(&wl).unwrap(), &interp()).unwrap();
    // d/dz tanh(z) = 1 - tanh(z)^2 with z = x * w (w broadcast along the rows).
    let dz = ndarray::Zip::from(x)
        .and(seed)
        .and_broadcast(w)
        .map_collect(|&x, &g, &w| g * (1.0 - (x * w).tanh().powi(2)));
    let want_dx = (&dz * w).into_dyn();
    let want_dw = (&dz * x).sum_axis(ndarray::Axis(0)).into_dyn();
    [(dx, want_dx), (dw, want_dw)]
}

#[test]
fn a_vmapped_graph_replays_its_backward_pass_with_fresh_values() {
    let _g = fresh();
    let w = data(3, 0.2);
    for k in 0..3 {
        let x = Array2::from_shape_fn((4, 3), |(r, c)| 0.25 * (r * 3 + c) as f64 - 1.0 + k as f64);
        let seed = Array2::from_shape_fn((4, 3), |(r, c)| 0.5 - 0.1 * (r + c + k) as f64);
        for (what, (got, want)) in ["dx", "dw"].iter().zip(vmapped_tanh_scale(&x, &w, &seed)) {
            assert!(close(&got, &want), "call {k}, {what}: {got} vs {want}");
        }
    }
    // The batched operators' gradients are identified (the per-example gradients are), so
    // the second and third backward passes are replayed.
    assert_eq!(counts(), (2, 1, 0));
}
