//! A long graph builds, fuses, evaluates and drops in constant stack space and in time
//! near-linear in its length (issue 31): 20,000 chained handles on a thread with a 2 MiB stack,
//! the default of spawned threads. Dropping the chain recursed once per node before; freeing
//! the runner's intermediates was quadratic, and so was fusing the chain (one merge per step
//! into an ever-growing operator; now merges of similar sizes in sweeps).

use ndarray::array;
use ovl::prelude::*;

const LENGTH: usize = 20_000;

/// `0 + 1 + 1 + ...`: `n` additions, one operator each.
fn long_chain(n: usize) -> Lazy<f32> {
    let one = Lazy::from(array![1.0f32]);
    let mut y = Lazy::from(array![0.0f32]);
    for _ in 0..n {
        y = &y + &one;
    }
    y
}

/// Builds [`long_chain`], evaluates it and drops it.
fn chain(n: usize, options: &Options) -> ndarray::ArrayD<f32> {
    let y = long_chain(n);
    let got = ovl::evaluate_with(&y, options).expect("evaluate the chain");
    drop(y);
    got
}

fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let worker = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(f)
        .expect("spawn a thread");
    ovl_testkit::without_hang("the long chain", move || {
        worker.join().expect("no overflow")
    })
}

#[test]
fn a_chain_of_20000_operators_evaluates_and_drops_on_a_2_mib_stack() {
    // Unfused: one interpreted operator per handle.
    let got = on_small_stack(|| chain(LENGTH, &Options::interpreter().with_opt_level(0)));
    assert_eq!(got, array![LENGTH as f32].into_dyn());
}

#[test]
fn a_chain_of_20000_handles_drops_on_a_2_mib_stack_without_evaluating() {
    let dropped = on_small_stack(|| {
        let one = Lazy::from(array![1.0f32]);
        let mut y = Lazy::from(array![0.0f32]);
        for _ in 0..LENGTH {
            y = &y + &one;
        }
        drop(y);
        // `one` is still usable: only the chain was freed.
        ovl::evaluate_with(&(&one + &one), &Options::interpreter()).expect("evaluate")
    });
    assert_eq!(dropped, array![2.0f32].into_dyn());
}

#[test]
fn a_chain_of_20000_operators_fuses_into_one_kernel() {
    let got = on_small_stack(|| {
        let f = ovl::fusion_with(long_chain(LENGTH), &Options::interpreter()).expect("fuse");
        (f.report.kernels_before, f.report.kernels_after)
    });
    assert_eq!(got, (LENGTH, 1));
}

#[test]
fn a_fused_chain_gives_the_same_sum() {
    let got = on_small_stack(|| chain(LENGTH, &Options::interpreter()));
    assert_eq!(got, array![LENGTH as f32].into_dyn());
}
