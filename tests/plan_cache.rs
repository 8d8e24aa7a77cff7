//! The plan cache behind `evaluate`: a graph seen before is a hit that runs on the new host
//! data; any change to what the graph computes (a constant, a trace-time argument, an input
//! shape or dtype, the options, the operator itself) is a miss, never a stale hit. The cache
//! stays within its capacity and is safe to use from several threads.
//!
//! The tests share the process-wide cache and its counters, so they run one at a time
//! (`SERIAL`); each starts from an empty cache.

use ndarray::{array, Array1, ArrayD, IxDyn};
use ovl::prelude::*;
use ovl::CacheCounters;
use std::sync::{Mutex, MutexGuard};

#[path = "support/plan_caches.rs"]
mod plan_caches;
use plan_caches::{clear_plans, plan_capacity};

static SERIAL: Mutex<()> = Mutex::new(());

/// Takes the lock and starts from an empty cache of the default capacity.
fn fresh() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    plan_capacity(128);
    clear_plans();
    guard
}

fn stats() -> CacheCounters {
    ovl::cache_stats().plans
}

#[operator]
fn affine(x: Tensor<f32>, scale: f32, shift: f32) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * scale + shift;
    out
}

#[operator]
fn twice<T: Num>(x: Tensor<T>) -> Tensor<T> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] + x[[i]];
    out
}

mod first {
    use ovl::prelude::*;

    #[operator]
    pub fn scale(x: Tensor<f32>) -> Tensor<f32> {
        let i = position_in(x.shape())[0];
        let out = output_like(&x);
        out[[i]] = x[[i]] * 2.0;
        out
    }
}

mod second {
    use ovl::prelude::*;

    /// The same name as `first::scale`, another body.
    #[operator]
    pub fn scale(x: Tensor<f32>) -> Tensor<f32> {
        let i = position_in(x.shape())[0];
        let out = output_like(&x);
        out[[i]] = x[[i]] * 3.0;
        out
    }
}

mod third {
    use ovl::prelude::*;

    /// The same name and body as `first::scale`, at another line.
    #[operator]
    pub fn scale(x: Tensor<f32>) -> Tensor<f32> {
        let i = position_in(x.shape())[0];
        let out = output_like(&x);
        out[[i]] = x[[i]] * 2.0;
        out
    }
}

fn interp() -> Options {
    Options::interpreter()
}

/// Generated C++, in `OVL_CACHE_DIR` when it is set, else in a directory of the temp dir.
fn cpu() -> Options {
    Options {
        cache_dir: std::env::var_os("OVL_CACHE_DIR")
            .is_none()
            .then(|| std::env::temp_dir().join("ovl-plan-cache-tests")),
        ..Options::cpu()
    }
}

fn data(n: usize, offset: f32) -> Array1<f32> {
    Array1::from_iter((0..n).map(|k| k as f32 - 1.5 + offset))
}

/// `affine` then `twice`: two operators, so that the opt level changes the plan.
fn chain(x: &Array1<f32>, scale: f32, shift: f32) -> Lazy<f32> {
    twice(affine(x, scale, shift))
}

fn chain_expected(x: &Array1<f32>, scale: f32, shift: f32) -> ArrayD<f32> {
    x.mapv(|v| 2.0 * (v * scale + shift)).into_dyn()
}

#[test]
fn the_same_graph_on_new_host_data_is_a_hit_with_fresh_results() {
    let _g = fresh();
    for k in 0..4 {
        let x = data(5, k as f32);
        let y = evaluate_with(&chain(&x, 2.0, 0.5), &interp()).unwrap();
        assert_eq!(y, chain_expected(&x, 2.0, 0.5));
    }
    let s = stats();
    assert_eq!((s.misses, s.hits, s.entries), (1, 3, 1));

    // evaluate_into_all and profile share the plan.
    let x = data(5, 10.0);
    let mut out = vec![ArrayD::<f32>::zeros(IxDyn(&[5]))];
    ovl::evaluate_into_all([&chain(&x, 2.0, 0.5)], &mut out, &interp()).unwrap();
    assert_eq!(out[0], chain_expected(&x, 2.0, 0.5));
    let x = data(5, 20.0);
    let (y, _) = ovl::profile(&chain(&x, 2.0, 0.5), &interp(), 2).unwrap();
    assert_eq!(y, chain_expected(&x, 2.0, 0.5));
    let s = stats();
    assert_eq!((s.misses, s.hits), (1, 5));
}

#[test]
fn generated_cpp_reuses_the_plan_and_reads_new_data() {
    let _g = fresh();
    for k in 0..3 {
        let x = data(16, k as f32);
        let y = evaluate_with(&chain(&x, -1.0, 4.0), &cpu()).unwrap();
        assert_eq!(y, chain_expected(&x, -1.0, 4.0));
    }
    let s = stats();
    assert_eq!((s.misses, s.hits), (1, 2));
}

#[test]
fn a_changed_constant_is_a_miss() {
    let _g = fresh();
    let x = Lazy::from(array![1.0f32, 2.0, 3.0]);
    let a = evaluate_with(&(2.0f32 * &x), &interp()).unwrap();
    let b = evaluate_with(&(3.0f32 * &x), &interp()).unwrap();
    assert_eq!(a, array![2.0f32, 4.0, 6.0].into_dyn());
    assert_eq!(b, array![3.0f32, 6.0, 9.0].into_dyn());
    let s = stats();
    assert_eq!((s.misses, s.hits), (2, 0));
}

#[test]
fn a_changed_trace_time_argument_is_a_miss() {
    let _g = fresh();
    let x = data(4, 0.0);
    let a = evaluate_with(&chain(&x, 2.0, 0.5), &interp()).unwrap();
    let b = evaluate_with(&chain(&x, 2.0, 0.25), &interp()).unwrap();
    assert_eq!(a, chain_expected(&x, 2.0, 0.5));
    assert_eq!(b, chain_expected(&x, 2.0, 0.25));
    let s = stats();
    assert_eq!((s.misses, s.hits), (2, 0));
}

#[test]
fn a_changed_input_shape_is_a_miss() {
    let _g = fresh();
    let (x4, x5) = (data(4, 0.0), data(5, 0.0));
    let a = evaluate_with(&chain(&x4, 2.0, 0.5), &interp()).unwrap();
    let b = evaluate_with(&chain(&x5, 2.0, 0.5), &interp()).unwrap();
    assert_eq!(a, chain_expected(&x4, 2.0, 0.5));
    assert_eq!(b, chain_expected(&x5, 2.0, 0.5));
    let s = stats();
    assert_eq!((s.misses, s.hits), (2, 0));
}

#[test]
fn a_changed_dtype_is_a_miss() {
    let _g = fresh();
    let a = evaluate_with(&twice(array![1.5f32, -2.0]), &interp()).unwrap();
    let b = evaluate_with(&twice(array![1.5f64, -2.0]), &interp()).unwrap();
    let c = evaluate_with(&twice(array![3i32, -2]), &interp()).unwrap();
    assert_eq!(a, array![3.0f32, -4.0].into_dyn());
    assert_eq!(b, array![3.0f64, -4.0].into_dyn());
    assert_eq!(c, array![6i32, -4].into_dyn());
    let s = stats();
    assert_eq!((s.misses, s.hits), (3, 0));
}

#[test]
fn changed_options_are_a_miss() {
    let _g = fresh();
    let x = data(6, 0.0);
    let want = chain_expected(&x, 2.0, 0.5);
    let fused = evaluate_with(&chain(&x, 2.0, 0.5), &interp()).unwrap();
    let unfused = evaluate_with(&chain(&x, 2.0, 0.5), &interp().with_opt_level(0)).unwrap();
    let cpp = evaluate_with(&chain(&x, 2.0, 0.5), &cpu().with_opt_level(0)).unwrap();
    assert_eq!((&fused, &unfused, &cpp), (&want, &want, &want));
    assert_eq!((stats().misses, stats().hits), (3, 0));
    // The kernel counts tell the plans apart: one fused kernel, two unfused.
    let (_, p0) = ovl::profile(&chain(&x, 2.0, 0.5), &interp().with_opt_level(0), 1).unwrap();
    let (_, p3) = ovl::profile(&chain(&x, 2.0, 0.5), &interp(), 1).unwrap();
    assert_eq!((p0.kernel_count(), p3.kernel_count()), (2, 1));
    assert_eq!((stats().misses, stats().hits), (3, 2));
    // Threads are fed at run time: not a new plan.
    evaluate_with(
        &chain(&x, 2.0, 0.5),
        &cpu().with_opt_level(0).with_threads(1),
    )
    .unwrap();
    assert_eq!((stats().misses, stats().hits), (3, 3));
}

#[test]
fn another_operator_of_the_same_name_is_a_miss() {
    let _g = fresh();
    let x = array![1.0f32, -2.0, 0.5];
    let a = evaluate_with(&first::scale(&x), &interp()).unwrap();
    let b = evaluate_with(&second::scale(&x), &interp()).unwrap();
    assert_eq!(a, array![2.0f32, -4.0, 1.0].into_dyn());
    assert_eq!(b, array![3.0f32, -6.0, 1.5].into_dyn());
    assert_eq!((stats().misses, stats().hits), (2, 0));
    // The same body at another line is another operator too (its errors name its own line).
    let c = evaluate_with(&third::scale(&x), &interp()).unwrap();
    assert_eq!(c, a);
    assert_eq!((stats().misses, stats().hits), (3, 0));
}

#[test]
fn the_cache_stays_within_its_capacity() {
    let _g = fresh();
    plan_capacity(2);
    let x = data(3, 0.0);
    for round in 0..2 {
        for shift in [1.0f32, 2.0, 3.0, 4.0] {
            let y = evaluate_with(&chain(&x, 1.0, shift), &interp()).unwrap();
            assert_eq!(y, chain_expected(&x, 1.0, shift), "round {round}");
            assert!(stats().entries <= 2);
        }
    }
    // Least recently used first: cycling through 4 graphs with room for 2 never hits.
    let s = stats();
    assert_eq!((s.misses, s.hits, s.evictions, s.entries), (8, 0, 6, 2));
    // The two most recent are kept.
    evaluate_with(&chain(&x, 1.0, 4.0), &interp()).unwrap();
    evaluate_with(&chain(&x, 1.0, 3.0), &interp()).unwrap();
    assert_eq!((stats().misses, stats().hits), (8, 2));
    // Shrinking evicts, 0 turns the cache off.
    plan_capacity(1);
    assert_eq!(stats().entries, 1);
    plan_capacity(0);
    let y = evaluate_with(&chain(&x, 1.0, 3.0), &interp()).unwrap();
    assert_eq!(y, chain_expected(&x, 1.0, 3.0));
    let s = stats();
    assert_eq!((s.misses, s.hits, s.entries), (8, 2, 0));
    plan_capacity(128);
}

#[test]
fn clearing_the_cache_forgets_every_plan() {
    let _g = fresh();
    let x = data(3, 0.0);
    evaluate_with(&chain(&x, 1.0, 1.0), &interp()).unwrap();
    clear_plans();
    assert_eq!(
        stats(),
        CacheCounters {
            capacity: 128,
            ..Default::default()
        }
    );
    let y = evaluate_with(&chain(&x, 1.0, 1.0), &interp()).unwrap();
    assert_eq!(y, chain_expected(&x, 1.0, 1.0));
    assert_eq!((stats().misses, stats().hits), (1, 0));
}

#[test]
fn placeholders_are_refused_on_a_hit_too() {
    let _g = fresh();
    let p = ovl::placeholder::<f32>("p", &[3]);
    for _ in 0..2 {
        let err = evaluate_with(&twice(&p), &interp()).unwrap_err();
        assert!(
            matches!(err, ovl::Error::Placeholder { ref name } if name == "p"),
            "{err}"
        );
    }
    assert_eq!((stats().misses, stats().hits), (1, 1));
}

#[test]
fn trace_errors_are_reported_on_every_call() {
    let _g = fresh();
    // Shapes that do not broadcast: the lazy `+` records a trace error.
    for _ in 0..2 {
        let a = Lazy::from(array![1.0f32, 2.0]);
        let b = Lazy::from(array![1.0f32, 2.0, 3.0]);
        assert!(evaluate_with(&(&a + &b), &interp()).is_err());
    }
    assert_eq!((stats().misses, stats().hits), (0, 0));
}

#[test]
fn several_threads_share_the_cache() {
    let _g = fresh();
    std::thread::scope(|s| {
        for t in 0..4 {
            s.spawn(move || {
                for k in 0..25 {
                    let x = data(7, (t * 100 + k) as f32);
                    let shift = (k % 3) as f32;
                    let y = evaluate_with(&chain(&x, 2.0, shift), &interp()).unwrap();
                    assert_eq!(y, chain_expected(&x, 2.0, shift), "thread {t} call {k}");
                }
            });
        }
    });
    let s = stats();
    assert_eq!(s.hits + s.misses, 100);
    // Three graphs; threads missing one at the same time may each prepare it.
    assert!((3..=12).contains(&s.misses), "{s:?}");
    assert_eq!(s.entries, 3);
}

/// `cache_stats` reports every in-memory cache under one policy, `clear_caches` empties them
/// all, and `set_cache_capacity` bounds each (least recently used evicted first).
#[test]
fn every_in_memory_cache_reports_clears_and_is_bounded_alike() {
    use ovl::{Cache, CacheCounters};
    let _g = fresh();
    ovl::clear_caches();
    let empty = ovl::cache_stats();
    for cache in Cache::ALL {
        let c = empty.get(cache);
        assert_eq!(
            (c.hits, c.misses, c.evictions, c.entries),
            (0, 0, 0, 0),
            "{cache:?}"
        );
    }
    assert_eq!(
        empty.plans,
        CacheCounters {
            capacity: 128,
            ..Default::default()
        }
    );
    assert_eq!(Cache::Fusion.name(), "fusion");

    // The same graph twice: the second evaluation hits the trace memo and the plan cache, and
    // so never asks the fusion cache again.
    let x = data(4, 0.0);
    for _ in 0..2 {
        let y = evaluate_with(&chain(&x, 3.0, 1.0), &interp()).unwrap();
        assert_eq!(y, chain_expected(&x, 3.0, 1.0));
    }
    let s = ovl::cache_stats();
    assert_eq!(s.plans, stats());
    assert_eq!((s.plans.misses, s.plans.hits), (1, 1));
    assert_eq!((s.trace_memo.misses, s.trace_memo.hits), (2, 2));
    assert_eq!(
        (s.fusion.misses, s.fusion.hits, s.fusion.entries),
        (1, 0, 1)
    );

    // With the plan cache off, every evaluation asks the fusion cache: a capacity of 1 keeps
    // only the graph of the last evaluation.
    plan_capacity(0);
    ovl::set_cache_capacity(Cache::Fusion, 1);
    assert_eq!(ovl::cache_stats().fusion.entries, 1);
    for scale in [3.0, 3.0, 4.0, 3.0] {
        // Another scale is another trace, so another graph.
        evaluate_with(&chain(&x, scale, 1.0), &interp()).unwrap();
    }
    let f = ovl::cache_stats().fusion;
    // 3.0 hits the entry kept from before, 4.0 misses and evicts it, 3.0 misses again.
    assert_eq!(
        (f.hits, f.misses, f.evictions, f.entries, f.capacity),
        (2, 3, 2, 1, 1)
    );

    ovl::clear_caches();
    let s = ovl::cache_stats();
    for cache in Cache::ALL {
        assert_eq!(s.get(cache).entries, 0, "{cache:?}");
        assert_eq!(s.get(cache).hits, 0, "{cache:?}");
    }
    assert_eq!(s.fusion.capacity, 1, "clearing keeps the capacity");
    ovl::set_cache_capacity(Cache::Fusion, 512); // the default
    plan_capacity(128);
}

/// The names this release replaced still answer, through the one cache API.
#[test]
#[allow(deprecated)]
fn the_replaced_names_still_answer() {
    let _g = fresh();
    let x = data(3, 0.0);
    evaluate_with(&chain(&x, 1.0, 1.0), &interp()).unwrap();
    assert_eq!(ovl::plan_cache_stats(), stats());
    assert_eq!(ovl::plan_cache_stats().entries, 1);
    assert_eq!(
        ovl::trace_memo_stats().entries,
        ovl::cache_stats().trace_memo.entries
    );
    assert_eq!(
        ovl::backward_cache_stats().capacity,
        ovl::cache_stats().backward_graphs.capacity
    );
    ovl::set_plan_cache_capacity(7);
    assert_eq!(
        (
            stats().capacity,
            ovl::cache_stats().backward_graphs.capacity
        ),
        (7, 7)
    );
    ovl::clear_plan_cache();
    assert_eq!((stats().entries, stats().misses), (0, 0));
    plan_capacity(128);
}
