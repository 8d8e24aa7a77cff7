//! The NUTS operator (`ovl_stdlib::nuts`) on the CUDA backend: the same trajectories as the
//! reference interpreter (on a GPU when there is one; else its kernel is compiled by NVRTC and
//! validated by ptxas for sm_80 and sm_90, and the values come from the interpreter).

use crate::conformance_cuda::cuda_run;
use crate::nuts_setup::{initial_positions, run};
use ndarray::Array1;
use ovl::Options;
use ovl_stdlib::nuts_models::{ar1_precision, logistic_data, Gaussian, Logistic};

fn same(what: &str, a: &crate::nuts_setup::Run, b: &crate::nuts_setup::Run) {
    assert_eq!(a.depth, b.depth, "{what}: tree depths");
    assert_eq!(a.leapfrogs, b.leapfrogs, "{what}: leapfrogs");
    assert_eq!(a.divergent, b.divergent, "{what}: divergences");
    for (x, y) in [(&a.samples, &b.samples), (&a.accept, &b.accept)] {
        for (u, v) in x.iter().zip(y) {
            // CUDA's f64 exp / log are within 2 to 3 ulp of the interpreter's.
            assert!(
                (u - v).abs() <= 1e-10 * (1.0 + u.abs()),
                "{what}: {u} vs {v}"
            );
        }
    }
}

#[test]
fn nuts_trajectories_match_the_interpreter() {
    let cuda = cuda_run();
    let before = ovl::cuda::thread_stats();
    let (dim, key) = (10, [5u32, 6]);
    let prec = [ar1_precision(dim, 0.9).into_dyn()];
    let init = initial_positions(3, dim, 5);
    let ones = Array1::ones(dim);
    let go = |o: &Options| run::<Gaussian>(key, &init, 0.25, &ones, &prec, 3, 10, o);
    same("Gaussian", &go(&Options::interpreter()), &go(&cuda));
    let (x, y, _) = logistic_data(200, 10, 3);
    let data = [x.into_dyn(), y.into_dyn()];
    let init = initial_positions(2, 10, 11).mapv(|v| 0.2 * v);
    let go = |o: &Options| run::<Logistic>(key, &init, 0.1, &ones, &data, 3, 10, o);
    same("logistic", &go(&Options::interpreter()), &go(&cuda));
    let after = ovl::cuda::thread_stats();
    assert!(
        after.nvrtc_compiles >= before.nvrtc_compiles + 2,
        "both kernels compiled by NVRTC"
    );
}
