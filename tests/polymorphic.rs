//! Programs with a batch size known only at run time (`ovl::as_tensorflow_polymorphic`): one
//! exported program runs every batch size, with the values a plain Rust reference computes
//! (forward, gradients, reductions over the batch, vmapped graphs), one compilation serves five
//! batch sizes, batch 0 gives empty outputs, and what cannot be made polymorphic or does not fit
//! is a clear error.

use ndarray::{Array2, ArrayD, IxDyn};
use ovl::prelude::*;
use ovl::{Batched, HostTensor, Shared};

#[path = "support/lstm_small_ops.rs"]
mod lstm_small_ops;
use lstm_small_ops::{lstm_cell, pseudo_random};

const HIDDEN: usize = 6;
const SIZES: [usize; 5] = [0, 1, 2, 7, 64];

/// Tests of this file that count compiler invocations must not see another test compile: they
/// run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn targets() -> [(&'static str, Options); 2] {
    [
        ("interpreter", Options::interpreter()),
        ("cpu", Options::cpu()),
    ]
}

fn host(a: &Array2<f32>) -> HostTensor {
    HostTensor::from_vec(a.shape(), a.iter().copied().collect()).unwrap()
}

fn array(t: &HostTensor) -> ArrayD<f32> {
    ArrayD::from_shape_vec(t.shape.clone(), t.as_slice::<f32>().unwrap().to_vec()).unwrap()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The LSTM cell in f64: (new_c, new_h).
fn reference_cell(z: &Array2<f32>, c: &Array2<f32>, bias: f64) -> (Array2<f64>, Array2<f64>) {
    let (b, h) = c.dim();
    let mut new_c = Array2::zeros((b, h));
    let mut new_h = Array2::zeros((b, h));
    for r in 0..b {
        for k in 0..h {
            let g = |q: usize| z[[r, q * h + k]] as f64;
            let nc = c[[r, k]] as f64 * sigmoid(g(2) + bias) + sigmoid(g(0)) * g(1).tanh();
            new_c[[r, k]] = nc;
            new_h[[r, k]] = nc.tanh() * sigmoid(g(3));
        }
    }
    (new_c, new_h)
}

fn assert_close(what: &str, got: &ArrayD<f32>, want: &Array2<f64>) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    for (g, w) in got.iter().zip(want.iter()) {
        assert!(
            (*g as f64 - w).abs() <= 1e-5 + 1e-5 * w.abs(),
            "{what}: got {g}, want {w}"
        );
    }
}

fn lstm_export(batch: usize, options: &Options) -> ovl::TfExport {
    let z = ovl::placeholder::<f32>("z", &[batch, 4 * HIDDEN]);
    let c = ovl::placeholder::<f32>("c", &[batch, HIDDEN]);
    let (new_c, new_h) = lstm_cell(&z, &c, 1.0);
    ovl::as_tensorflow((&z, &c), (&new_c, &new_h))
        .name("lstm")
        .options(options)
}

#[test]
fn one_program_runs_every_batch_size_with_the_reference_values() {
    let _serial = serial();
    for (target, options) in targets() {
        let bundle = ovl::as_tensorflow_polymorphic(|b| lstm_export(b, &options))
            .build()
            .unwrap();
        let graph = bundle.program.graph.as_ref().unwrap();
        assert_eq!(graph.symbols, ["batch"]);
        assert_eq!(bundle.kernel_count(), 1, "{target}: the fused cell");
        let loaded = ovl::program::LoadedProgram::new(bundle.program.clone(), &options).unwrap();
        assert_eq!(
            loaded.feed_dims(),
            [vec![None, Some(4 * HIDDEN)], vec![None, Some(HIDDEN)]]
        );
        let compiled_before = ovl::compiler_invocations();
        for (k, b) in SIZES.into_iter().enumerate() {
            let z = pseudo_random((b, 4 * HIDDEN), 3 + k as u64);
            let c = pseudo_random((b, HIDDEN), 40 + k as u64);
            let out = loaded.run_host(&[&host(&z), &host(&c)], 0).unwrap();
            let (want_c, want_h) = reference_cell(&z, &c, 1.0);
            assert_close(
                &format!("{target} new_c at batch {b}"),
                &array(&out[0]),
                &want_c,
            );
            assert_close(
                &format!("{target} new_h at batch {b}"),
                &array(&out[1]),
                &want_h,
            );
        }
        assert_eq!(
            ovl::compiler_invocations(),
            compiled_before,
            "{target}: five batch sizes compile nothing more"
        );
    }
}

/// The estimated work the TensorFlow bridge reads to keep a run on its calling thread: workers
/// times a worker's cost, so it follows the batch bound; and a run on the calling thread
/// (`threads` = 1) gives bit for bit what a run split over threads gives.
#[test]
fn the_largest_work_follows_the_bound_batch_and_inline_runs_match_threaded_ones() {
    let _serial = serial();
    let options = Options::cpu();
    let bundle = ovl::as_tensorflow_polymorphic(|b| lstm_export(b, &options))
        .build()
        .unwrap();
    let loaded = ovl::program::LoadedProgram::new(bundle.program.clone(), &options).unwrap();
    let work = |b: usize| {
        let binding = loaded.bind(&[&[b, 4 * HIDDEN], &[b, HIDDEN]]).unwrap();
        loaded.largest_work(&binding)
    };
    let (w10, w20) = (work(10), work(20));
    assert!(
        w10 >= (10 * HIDDEN) as u64,
        "at least one unit per worker: {w10}"
    );
    assert_eq!(w20, 2 * w10, "twice the workers, twice the work");
    // Large enough for the runtime to split it over threads.
    let b = 8192;
    assert!(work(b) >= ovl_runtime::PARALLEL_MIN_WORK, "{}", work(b));
    let z = host(&pseudo_random((b, 4 * HIDDEN), 5));
    let c = host(&pseudo_random((b, HIDDEN), 6));
    let inline = loaded.run_host(&[&z, &c], 1).unwrap();
    let threaded = loaded.run_host(&[&z, &c], 2).unwrap();
    assert_eq!(inline, threaded);
    // The interpreter's kernels report no work of compiled code.
    let interp = Options::interpreter();
    let bundle = ovl::as_tensorflow_polymorphic(|b| lstm_export(b, &interp))
        .build()
        .unwrap();
    let loaded = ovl::program::LoadedProgram::new(bundle.program, &interp).unwrap();
    let binding = loaded.bind(&[&[10, 4 * HIDDEN], &[10, HIDDEN]]).unwrap();
    assert_eq!(loaded.largest_work(&binding), 0);
}

/// `tanh(x @ w + b)` and its gradient from `ovl::backward`: the gradients of `w` and `b` sum over
/// the batch, a loop whose trip count is the batch size.
fn dense_export(batch: usize, options: &Options) -> Result<ovl::TfExport, ovl::Error> {
    let x = ovl::placeholder::<f32>("x", &[batch, 3]);
    let w = ovl::placeholder::<f32>("w", &[3, 2]);
    let b = ovl::placeholder::<f32>("b", &[2]);
    let y = ovl_stdlib::tanh(ovl_stdlib::add(ovl_stdlib::matmul(&x, &w), &b));
    let dy = ovl::placeholder::<f32>("dy", &[batch, 2]);
    let g = ovl::backward(&[(&y, &dy)], &[&x, &w, &b])?;
    let (dx, dw, db) = (g.of(&x).unwrap(), g.of(&w).unwrap(), g.of(&b).unwrap());
    Ok(ovl::as_tensorflow((&x, &w, &b), &y)
        .gradient(&dy, (&dx, &dw, &db))
        .options(options))
}

#[test]
fn gradients_that_sum_over_the_batch_are_polymorphic_too() {
    let _serial = serial();
    for (target, options) in targets() {
        let bundle = ovl::as_tensorflow_polymorphic(|b| dense_export(b, &options))
            .build()
            .unwrap();
        let gradient = bundle.gradient.as_ref().unwrap();
        assert_eq!(gradient.graph.as_ref().unwrap().symbols, ["batch"]);
        for b in SIZES {
            let x = pseudo_random((b, 3), 1);
            let w = pseudo_random((3, 2), 2);
            let bias = pseudo_random((1, 2), 3).into_shape_with_order(2).unwrap();
            let dy = pseudo_random((b, 2), 4);
            let feeds = vec![
                host(&x),
                host(&w),
                HostTensor::from_vec(&[2], bias.to_vec()).unwrap(),
                host(&dy),
            ];
            let out = ovl::program::run_program(gradient, feeds, &options).unwrap();
            // Reference: t = tanh(x w + b); g = dy (1 - t^2); dx = g w^T, dw = x^T g, db = sum g.
            let mut dx = Array2::<f64>::zeros((b, 3));
            let mut dw = Array2::<f64>::zeros((3, 2));
            let mut db = Array2::<f64>::zeros((1, 2));
            for r in 0..b {
                for u in 0..2 {
                    let pre: f64 = (0..3)
                        .map(|f| x[[r, f]] as f64 * w[[f, u]] as f64)
                        .sum::<f64>()
                        + bias[u] as f64;
                    let g = dy[[r, u]] as f64 * (1.0 - pre.tanh().powi(2));
                    db[[0, u]] += g;
                    for f in 0..3 {
                        dx[[r, f]] += g * w[[f, u]] as f64;
                        dw[[f, u]] += x[[r, f]] as f64 * g;
                    }
                }
            }
            assert_close(&format!("{target} dx at batch {b}"), &array(&out[0]), &dx);
            assert_close(&format!("{target} dw at batch {b}"), &array(&out[1]), &dw);
            let db_got = array(&out[2])
                .into_shape_with_order(IxDyn(&[1, 2]))
                .unwrap();
            assert_close(&format!("{target} db at batch {b}"), &db_got, &db);
        }
    }
}

#[test]
fn a_softmax_over_the_batch_is_polymorphic() {
    let _serial = serial();
    // From ops, over axis 0: its division runs as a loop over the batch inside the column
    // sums' workers, and `exp(x - max)` would be kept in a row buffer if the batch were a
    // fixed size; sized at run time it is computed again instead (no buffer can be).
    for (name, options) in targets() {
        let bundle = ovl::as_tensorflow_polymorphic(|b| {
            let x = ovl::placeholder::<f32>("x", &[b, 5]);
            let e = ovl_stdlib::exp(ovl_stdlib::sub(&x, ovl_stdlib::max_keepdim(&x, 0)));
            let y = ovl_stdlib::div(&e, ovl_stdlib::sum_keepdim(&e, 0));
            ovl::as_tensorflow(&x, &y).options(&options)
        })
        .build()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        for b in [1usize, 3, 40] {
            let x = pseudo_random((b, 5), 4);
            let out = ovl::program::run_program(&bundle.program, vec![host(&x)], &options).unwrap();
            let x = x.mapv(f64::from);
            for c in 0..5 {
                let top = x.column(c).fold(f64::MIN, |m, &v| m.max(v));
                let total: f64 = x.column(c).iter().map(|v| (v - top).exp()).sum();
                for r in 0..b {
                    let want = (x[[r, c]] - top).exp() / total;
                    let got = array(&out[0])[[r, c]] as f64;
                    assert!(
                        (got - want).abs() < 1e-6,
                        "{name} batch {b} [{r}, {c}]: {got} vs {want}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_mean_over_the_batch_divides_by_the_run_time_size() {
    let _serial = serial();
    let options = Options::interpreter();
    let bundle = ovl::as_tensorflow_polymorphic(|b| {
        let x = ovl::placeholder::<f32>("x", &[b, 3]);
        ovl::as_tensorflow(&x, ovl_stdlib::mean(&x, 0)).options(&options)
    })
    .build()
    .unwrap();
    for b in [1usize, 3, 10] {
        let x = pseudo_random((b, 3), 9);
        let out = ovl::program::run_program(&bundle.program, vec![host(&x)], &options).unwrap();
        let want = x.mapv(f64::from).mean_axis(ndarray::Axis(0)).unwrap();
        for (g, w) in array(&out[0]).iter().zip(want.iter()) {
            assert!((*g as f64 - w).abs() < 1e-5, "batch {b}: got {g}, want {w}");
        }
    }
    // An empty batch: the mean of nothing is NaN, as for a fixed empty axis.
    let x = HostTensor::from_vec(&[0, 3], Vec::<f32>::new()).unwrap();
    let out = ovl::program::run_program(&bundle.program, vec![x], &options).unwrap();
    assert!(array(&out[0]).iter().all(|v| v.is_nan()));
}

#[operator]
fn scale_cols(x: Tensor<f32>, w: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * w[[i]];
    out
}

#[test]
fn a_vmapped_graph_exports_for_any_batch() {
    let _serial = serial();
    let options = Options::interpreter();
    let bundle = ovl::as_tensorflow_polymorphic(|b| {
        let x = ovl::placeholder::<f32>("x", &[b, 4]);
        let w = ovl::placeholder::<f32>("w", &[4]);
        let y = ovl::vmap(|(x, w)| scale_cols(&x, &w), (Batched(&x), Shared(&w))).unwrap();
        ovl::as_tensorflow((&x, &w), &y).options(&options)
    })
    .build()
    .unwrap();
    let w = HostTensor::from_vec(&[4], vec![1.0f32, -2.0, 0.5, 3.0]).unwrap();
    for b in [0usize, 1, 5] {
        let x = pseudo_random((b, 4), 5);
        let out = ovl::program::run_program(&bundle.program, vec![host(&x), w.clone()], &options)
            .unwrap();
        let want = Array2::from_shape_fn((b, 4), |(r, k)| {
            (x[[r, k]] * [1.0f32, -2.0, 0.5, 3.0][k]) as f64
        });
        assert_close(&format!("batch {b}"), &array(&out[0]), &want);
    }
}

/// Scales by the reciprocal of the row count: a literal that is not a whole multiple of the
/// batch, so the operator cannot be made polymorphic.
#[operator]
fn divide_by_rows(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let p = position_in([rows, cols]);
    let out = output_like(&x);
    out[[p[0], p[1]]] = x[[p[0], p[1]]] * (1.0 / rows as f32);
    out
}

#[test]
fn bad_input_is_a_clear_error() {
    let _serial = serial();
    let options = Options::interpreter();
    // A literal that is not affine in the batch: the error names the operator and its line.
    let e = ovl::as_tensorflow_polymorphic(|b| {
        let x = ovl::placeholder::<f32>("x", &[b, 2]);
        ovl::as_tensorflow(&x, divide_by_rows(&x)).options(&options)
    })
    .build()
    .unwrap_err()
    .to_string();
    assert!(e.contains("operator `divide_by_rows`"), "{e}");
    assert!(e.contains("tests/polymorphic.rs:"), "{e}");
    assert!(e.contains("not a whole multiple of `batch`"), "{e}");

    // Nothing depends on the size.
    let e = ovl::as_tensorflow_polymorphic(|_| lstm_export(3, &options))
        .build()
        .unwrap_err();
    assert!(
        matches!(&e, ovl::Error::Export { why, .. }
            if matches!(**why, ovl::ExportError::SizeIndependent { .. })),
        "{e}"
    );

    // A constant made from host data of the batch's size.
    let e = ovl::as_tensorflow_polymorphic(|b| {
        let x = ovl::placeholder::<f32>("x", &[b, 2]);
        let k = ndarray::Array2::<f32>::ones((b, 2));
        ovl::as_tensorflow(&x, ovl_stdlib::add(&x, k)).options(&options)
    })
    .build()
    .unwrap_err();
    assert!(
        matches!(&e, ovl::Error::Export { why, .. } if matches!(**why,
        ovl::ExportError::Unify {
            gradient: false,
            why: ovl::UnifyProgramError::ConstantDiffers { .. },
        })),
        "{e}"
    );

    // At run time: inputs that disagree about the batch, and a wrong fixed dimension.
    let bundle = ovl::as_tensorflow_polymorphic(|b| lstm_export(b, &options))
        .build()
        .unwrap();
    let run = |zb: usize, cb: usize, h: usize| {
        let z = pseudo_random((zb, 4 * HIDDEN), 1);
        let c = pseudo_random((cb, h), 2);
        ovl::program::run_program(&bundle.program, vec![host(&z), host(&c)], &options)
            .unwrap_err()
            .to_string()
    };
    let e = run(5, 6, HIDDEN);
    assert!(
        e.contains("makes batch = 6, but input 0 (`z`) made batch = 5"),
        "{e}"
    );
    let e = run(5, 5, HIDDEN + 1);
    assert!(e.contains("input 1 (`c`)"), "{e}");
    assert!(e.contains("[batch, 6]"), "{e}");
}
