//! The CPU runner's pool of temporaries (`ovl::set_scratch_capacity`, `ovl::scratch_usage`):
//! one pool for the whole process, shared by every thread that runs graphs, never above its
//! capacity in bytes, emptied by `ovl::clear_caches`; runs from pooled (reused, re-zeroed)
//! buffers give the values of runs from fresh ones. One test: the pool is global state.

#[path = "support/lstm_small_ops.rs"]
mod lstm_small_ops;

use ndarray::{ArrayD, IxDyn};
use ovl::prelude::*;
use ovl::Compiled;
use std::sync::Arc;

const B: usize = 16;
const H: usize = 256;

/// The LSTM cell unfused (opt level 0): its operators' results are temporaries of the run.
fn cell(options: &Options) -> Compiled {
    let z = ovl::placeholder::<f32>("z", &[B, 4 * H]);
    let c = ovl::placeholder::<f32>("c", &[B, H]);
    let (nc, nh) = lstm_small_ops::lstm_cell(&z, &c, 1.0);
    ovl::compile((&z, &c), (&nc, &nh), options).unwrap()
}

/// The cell's two results for the inputs drawn from `seed`.
fn run(step: &Compiled, seed: u64) -> Vec<ArrayD<f32>> {
    let z = lstm_small_ops::pseudo_random((B, 4 * H), 2 * seed + 1);
    let c = lstm_small_ops::pseudo_random((B, H), 2 * seed + 2);
    let mut out = vec![ArrayD::<f32>::zeros(IxDyn(&[B, H])); 2];
    step.run_into(&[Lazy::from(&z), Lazy::from(&c)][..], &mut out)
        .unwrap();
    out
}

#[test]
fn one_pool_of_temporaries_serves_every_thread_within_its_capacity() {
    let step = Arc::new(cell(&Options::cpu().with_opt_level(0)));
    assert!(
        step.kernel_count() > 3,
        "unfused: temporaries between kernels"
    );
    // Fresh buffers for every run (nothing pooled): the values every later run must give bit
    // for bit, themselves within rounding of the interpreter's.
    ovl::set_scratch_capacity(0);
    let expected: Vec<_> = (0..16).map(|seed| run(&step, seed)).collect();
    let reference = cell(&Options::interpreter());
    for (seed, got) in expected.iter().enumerate() {
        for (g, want) in got.iter().zip(run(&reference, seed as u64)) {
            let err = (g - &want).mapv(f32::abs).fold(0.0f32, |m, &e| m.max(e));
            assert!(err < 1e-5, "seed {seed}: {err} from the interpreter");
        }
    }

    ovl::set_scratch_capacity(1 << 30);
    ovl::clear_caches();
    assert_eq!(ovl::scratch_usage(), (0, 1 << 30));
    assert_eq!(run(&step, 0), expected[0]);
    let (one_run, _) = ovl::scratch_usage();
    assert!(one_run > 0, "the run's temporaries are kept for the next");

    // Runs one after the other on new threads reuse the same buffers: a pool per thread would
    // hold one run's temporaries per thread.
    for seed in 1..4 {
        let step = Arc::clone(&step);
        let got = std::thread::spawn(move || run(&step, seed)).join().unwrap();
        assert_eq!(got, expected[seed as usize], "seed {seed}");
        assert_eq!(ovl::scratch_usage().0, one_run);
    }

    // Runs at once on 8 threads: right values from reused buffers, at most one run's
    // temporaries per thread kept.
    let concurrent = |step: &Arc<Compiled>| {
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let step = Arc::clone(step);
                std::thread::spawn(move || {
                    (0..6)
                        .map(|r| {
                            let seed = (t * 6 + r) % 16;
                            (seed, run(&step, seed))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for t in threads {
            for (seed, got) in t.join().unwrap() {
                assert_eq!(got, expected[seed as usize], "seed {seed}");
            }
        }
    };
    concurrent(&step);
    let (held, capacity) = ovl::scratch_usage();
    assert!(held >= one_run && held <= 8 * one_run, "{held} bytes held");
    assert_eq!(capacity, 1 << 30);

    // A capacity below what 8 threads give back: the pool never holds more.
    let small = one_run + one_run / 2;
    ovl::set_scratch_capacity(small);
    assert!(
        ovl::scratch_usage().0 <= small,
        "buffers beyond it freed now"
    );
    concurrent(&step);
    assert!(ovl::scratch_usage().0 <= small);

    // Nothing kept: every run from fresh buffers, the same values.
    ovl::set_scratch_capacity(0);
    assert_eq!(ovl::scratch_usage(), (0, 0));
    assert_eq!(run(&step, 5), expected[5]);
    assert_eq!(ovl::scratch_usage(), (0, 0));

    ovl::set_scratch_capacity(1 << 30);
    assert_eq!(run(&step, 6), expected[6]);
    assert!(ovl::scratch_usage().0 > 0);
    ovl::clear_caches();
    assert_eq!(ovl::scratch_usage().0, 0, "clear_caches empties the pool");
    assert_eq!(run(&step, 7), expected[7]);
}
