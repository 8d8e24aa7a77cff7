//! Memoized operator traces: a call with the same input dtypes and shapes and the same
//! trace-time arguments reuses its trace; anything else is traced again (never a stale trace),
//! and calls whose arguments cannot be keyed are never memoized.
//!
//! The tests share the process-wide memo and its counters, so they run one at a time
//! (`SERIAL`); each starts from an empty memo.

use ndarray::{array, ArrayD};
use ovl::prelude::*;
use ovl::CacheCounters;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

fn fresh() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    ovl::set_trace_memo(true);
    ovl::Cache::TraceMemo.clear();
    guard
}

fn stats() -> CacheCounters {
    ovl::cache_stats().trace_memo
}

/// Hits, misses and entries: all zero when nothing was memoized.
fn counts() -> (u64, u64, usize) {
    let c = stats();
    (c.hits, c.misses, c.entries)
}

fn run<T: Scalar>(x: &Lazy<T>) -> ArrayD<T> {
    evaluate_with(x, &Options::interpreter()).unwrap()
}

/// Counts how many times the body of `affine` ran (trace-time code).
static AFFINE_TRACES: AtomicUsize = AtomicUsize::new(0);

#[operator]
fn affine(x: Tensor<f32>, scale: f32, shift: f32) -> Tensor<f32> {
    AFFINE_TRACES.fetch_add(1, Ordering::Relaxed);
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * scale + shift;
    out
}

#[operator]
fn convert<T: Scalar, U: Scalar>(x: Tensor<T>) -> Tensor<U> {
    let i = position_in(x.shape())[0];
    let out = output(x.shape());
    out[[i]] = x[[i]] as U;
    out
}

#[operator]
fn clamp<T: Num>(x: Tensor<T>, lo: T, hi: T) -> Tensor<T> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = min(max(x[[i]], lo), hi);
    out
}

/// Not a trace-time argument type the memo can key.
#[derive(Clone, Copy)]
struct Scale(f32);

#[operator]
fn scaled(x: Tensor<f32>, s: Scale) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * s.0;
    out
}

#[operator]
fn shifted(x: Tensor<f32>, (a, b): (f32, f32)) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * a + b;
    out
}

#[operator]
fn halves(x: Tensor<f32>, parts: usize, names: &[&str]) -> Vec<Tensor<f32>> {
    let n = x.dim(0) / parts;
    let i = position_in([n])[0];
    let mut outs: Vec<Tensor<f32>> = Vec::new();
    for _ in names {
        outs.push(output([n]));
    }
    for (k, out) in outs.iter().enumerate() {
        out[[i]] = x[[i + (k * n) as i64]];
    }
    outs
}

#[test]
fn a_repeated_call_reuses_its_trace() {
    let _g = fresh();
    let before = AFFINE_TRACES.load(Ordering::Relaxed);
    for k in 0..3 {
        let x = array![1.0f32, 2.0, 3.0] + k as f32;
        let y = run(&affine(&x, 2.0, 1.0));
        assert_eq!(y, (x * 2.0 + 1.0).into_dyn());
    }
    assert_eq!(AFFINE_TRACES.load(Ordering::Relaxed) - before, 1);
    let s = stats();
    assert_eq!((s.misses, s.hits, s.entries), (1, 2, 1));
}

#[test]
fn a_changed_argument_shape_or_dtype_is_traced_again() {
    let _g = fresh();
    let x = array![1.0f32, 2.0, 3.0];
    assert_eq!(
        run(&affine(&x, 2.0, 1.0)),
        array![3.0f32, 5.0, 7.0].into_dyn()
    );
    assert_eq!(
        run(&affine(&x, 2.0, -1.0)),
        array![1.0f32, 3.0, 5.0].into_dyn()
    );
    // -0.0 and 0.0 are different arguments (keyed by their bits).
    assert_eq!(
        run(&affine(&x, -0.0, 0.0)),
        array![0.0f32, 0.0, 0.0].into_dyn()
    );
    assert_eq!(
        run(&affine(&x, 0.0, 0.0)),
        array![0.0f32, 0.0, 0.0].into_dyn()
    );
    assert_eq!(
        run(&affine(array![1.0f32, 2.0], 2.0, 1.0)),
        array![3.0f32, 5.0].into_dyn()
    );
    assert_eq!(
        run(&clamp(array![-2.0f32, 0.5, 9.0], -1.0, 1.0)),
        array![-1.0f32, 0.5, 1.0].into_dyn()
    );
    assert_eq!(
        run(&clamp(array![-2.0f64, 0.5, 9.0], -1.0, 1.0)),
        array![-1.0f64, 0.5, 1.0].into_dyn()
    );
    assert_eq!(
        run(&clamp(array![-2.0f64, 0.5, 9.0], 0.0, 1.0)),
        array![0.0f64, 0.5, 1.0].into_dyn()
    );
    let s = stats();
    assert_eq!((s.misses, s.hits), (8, 0));
}

#[test]
fn a_generic_parameter_absent_from_the_inputs_is_part_of_the_key() {
    let _g = fresh();
    let x = array![1.5f32, -2.5];
    let a: Lazy<f64> = convert::<f32, f64>(&x);
    let b: Lazy<i32> = convert::<f32, i32>(&x);
    assert_eq!(run(&a), array![1.5f64, -2.5].into_dyn());
    assert_eq!(run(&b), array![1i32, -2].into_dyn());
    let c: Lazy<i32> = convert::<f32, i32>(&x);
    assert_eq!(run(&c), array![1i32, -2].into_dyn());
    let s = stats();
    assert_eq!((s.misses, s.hits), (2, 1));
}

#[test]
fn unkeyable_arguments_are_never_memoized() {
    let _g = fresh();
    let x = array![1.0f32, 2.0];
    for s in [2.0f32, 3.0, 3.0] {
        assert_eq!(run(&scaled(&x, Scale(s))), (&x * s).into_dyn());
        assert_eq!(run(&shifted(&x, (s, 1.0))), (&x * s + 1.0).into_dyn());
    }
    assert_eq!(counts(), (0, 0, 0));
}

#[test]
fn list_outputs_are_rebuilt_on_a_hit() {
    let _g = fresh();
    for k in 0..2 {
        let x = array![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0] + k as f32;
        let parts = halves(&x, 3, &["a", "b", "c"]);
        assert_eq!(parts.len(), 3);
        for (p, part) in parts.iter().enumerate() {
            assert_eq!(part.shape(), &[2]);
            let want = x.slice(ndarray::s![2 * p..2 * p + 2]).to_owned().into_dyn();
            assert_eq!(run(part), want);
        }
    }
    // Another list length is another key.
    let x = array![1.0f32, 2.0, 3.0, 4.0];
    let parts = halves(&x, 2, &["a", "b"]);
    assert_eq!(run(&parts[1]), array![3.0f32, 4.0].into_dyn());
    let s = stats();
    assert_eq!((s.misses, s.hits), (2, 1));
}

#[test]
fn the_memo_can_be_turned_off() {
    let _g = fresh();
    ovl::set_trace_memo(false);
    let before = AFFINE_TRACES.load(Ordering::Relaxed);
    for _ in 0..2 {
        let x = array![1.0f32];
        assert_eq!(run(&affine(&x, 2.0, 1.0)), array![3.0f32].into_dyn());
    }
    assert_eq!(AFFINE_TRACES.load(Ordering::Relaxed) - before, 2);
    assert_eq!(counts(), (0, 0, 0));
    ovl::set_trace_memo(true);
}

#[operator]
fn repeat(x: Tensor<f32>, times: usize) -> Tensor<f32> {
    if times == 0 {
        trace_error("`times` must be at least 1");
    }
    let n = x.dim(0);
    let i = position_in([n * times.max(1)])[0];
    let out = output([n * times.max(1)]);
    out[[i]] = x[[i % n as i64]];
    out
}

#[test]
fn calls_with_trace_errors_are_not_memoized() {
    let _g = fresh();
    for _ in 0..2 {
        let err = evaluate_with(&repeat(array![1.0f32, 2.0], 0), &Options::interpreter());
        let err = err.unwrap_err().to_string();
        assert!(err.contains("must be at least 1"), "{err}");
    }
    assert_eq!(counts(), (0, 0, 0));
    assert_eq!(
        run(&repeat(array![1.0f32, 2.0], 2)),
        array![1.0f32, 2.0, 1.0, 2.0].into_dyn()
    );
}

#[test]
fn several_threads_share_the_memo() {
    let _g = fresh();
    std::thread::scope(|s| {
        for t in 0..4 {
            s.spawn(move || {
                for k in 0..10 {
                    let x = array![1.0f32, 2.0, 3.0] * (t * 10 + k) as f32;
                    let shift = (k % 2) as f32;
                    let y = run(&affine(&x, 2.0, shift));
                    assert_eq!(y, (x * 2.0 + shift).into_dyn());
                }
            });
        }
    });
    let s = stats();
    assert_eq!(s.hits + s.misses, 40);
    assert_eq!(s.entries, 2);
}

#[test]
fn arithmetic_on_handles_is_memoized_by_literal_and_shape() {
    let _g = fresh();
    let inputs = [
        (2.0f32, array![1.0f32, 2.0]),
        (3.0, array![1.0f32, 2.0]),
        (2.0, array![5.0f32, 6.0]),
        (2.0, array![1.0f32, 2.0, 3.0]),
        (-0.0, array![1.0f32, 2.0]),
        (0.0, array![1.0f32, 2.0]),
    ];
    for (k, x) in inputs {
        let x = Lazy::from(x.clone());
        // One source line: only the literal and the shape tell the calls apart.
        let y = &(k * &x) - &x;
        let want = ovl::evaluate_with(&x, &Options::interpreter()).unwrap() * (k - 1.0);
        assert_eq!(run(&y), want);
    }
    let s = stats();
    // `*`: only 2.0 on [2] repeats (-0.0 and 0.0 differ); `-`: one miss per shape, the other
    // four [2] calls hit.
    assert_eq!((s.hits, s.misses), (1 + 4, 5 + 2));
}
