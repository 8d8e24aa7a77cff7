//! A long graph builds, evaluates and drops in constant stack space (issue 31): 20,000 chained
//! handles on a thread with a 2 MiB stack, the default of spawned threads. Dropping the chain
//! recursed once per node before; freeing the runner's intermediates was quadratic.

use ndarray::array;
use ovl::prelude::*;

const LENGTH: usize = 20_000;

/// Builds `0 + 1 + 1 + ...` (`n` additions, one operator each), evaluates it and drops it.
fn chain(n: usize, options: &Options) -> ndarray::ArrayD<f32> {
    let one = Lazy::from(array![1.0f32]);
    let mut y = Lazy::from(array![0.0f32]);
    for _ in 0..n {
        y = &y + &one;
    }
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
    // Unfused: one interpreted operator per handle (the fusion search merges a chain pairwise,
    // which takes time quadratic in its length; see the fused test below).
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
fn a_fused_chain_gives_the_same_sum() {
    let got = on_small_stack(|| chain(300, &Options::interpreter()));
    assert_eq!(got, array![300.0f32].into_dyn());
}
