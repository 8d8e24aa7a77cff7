//! `ovl::compile`: a graph on placeholders fused and compiled once, run with new data each call.

use crate::lstm_small_ops;

use ndarray::{Array2, ArrayD, IxDyn};
use ovl::prelude::*;
use ovl::{CompiledError, Mismatch};

#[operator]
fn axpy(a: Tensor<f32>, x: Tensor<f32>, y: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = a[[0]] * x[[i]] + y[[i]];
    out
}

#[operator]
fn negate_i32(x: Tensor<i32>) -> Tensor<i32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = -x[[i]];
    out
}

fn cpu() -> Options {
    Options::cpu()
}

/// The plain-Rust LSTM cell nonlinearity (forget bias 1).
fn lstm_reference(z: &Array2<f32>, c: &Array2<f32>) -> (Array2<f32>, Array2<f32>) {
    let (b, h) = c.dim();
    let sig = |x: f32| 1.0 / (1.0 + (-x).exp());
    let mut nc = Array2::zeros((b, h));
    let mut nh = Array2::zeros((b, h));
    for r in 0..b {
        for k in 0..h {
            let i = sig(z[[r, k]]);
            let j = z[[r, k + h]].tanh();
            let f = sig(z[[r, k + 2 * h]] + 1.0);
            let o = sig(z[[r, k + 3 * h]]);
            nc[[r, k]] = c[[r, k]] * f + i * j;
            nh[[r, k]] = nc[[r, k]].tanh() * o;
        }
    }
    (nc, nh)
}

#[test]
fn a_fused_lstm_cell_runs_again_with_new_data() {
    let (b, h) = (3, 40);
    let z = ovl::placeholder::<f32>("z", &[b, 4 * h]);
    let c = ovl::placeholder::<f32>("c", &[b, h]);
    let (nc, nh) = lstm_small_ops::lstm_cell(&z, &c, 1.0);
    let step = ovl::compile((&z, &c), (&nc, &nh), &cpu()).unwrap();
    assert_eq!(step.kernel_count(), 1, "the cell fuses into one kernel");
    let mut dests = vec![ArrayD::<f32>::zeros(IxDyn(&[b, h])); 2];
    for seed in 0..3 {
        let (zv, cv) = (
            lstm_small_ops::pseudo_random((b, 4 * h), 2 * seed + 1),
            lstm_small_ops::pseudo_random((b, h), 2 * seed + 2),
        );
        step.run_into(
            (&Lazy::from(zv.clone()), &Lazy::from(cv.clone())),
            &mut dests,
        )
        .unwrap();
        let (want_c, want_h) = lstm_reference(&zv, &cv);
        for (got, want) in dests.iter().zip([want_c, want_h]) {
            for (g, w) in got.iter().zip(want.iter()) {
                assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{g} vs {w}");
            }
        }
    }
}

#[test]
fn host_data_is_kept_and_an_unread_placeholder_is_allowed() {
    let x = ovl::placeholder::<f32>("x", &[3]);
    let y = ovl::placeholder::<f32>("y", &[3]);
    let unused = ovl::placeholder::<i32>("unused", &[5]);
    let a = Lazy::from(ndarray::array![-1.5f32]);
    let step = ovl::compile((&x, &unused, &y), axpy(&a, &x, &y), &cpu()).unwrap();
    let mut out = vec![ArrayD::<f32>::zeros(IxDyn(&[3]))];
    let xv = Lazy::from(ndarray::array![1.0f32, 2.0, 4.0]);
    let uv = Lazy::from(ndarray::Array1::<i32>::zeros(5));
    let yv = Lazy::from(ndarray::array![0.5f32, 0.0, -1.0]);
    step.run_into((&xv, &uv, &yv), &mut out).unwrap();
    assert_eq!(out[0], ndarray::array![-1.0f32, -3.0, -7.0].into_dyn());
}

fn compile_error(result: Result<ovl::Compiled, ovl::Error>) -> CompiledError {
    match result {
        Ok(_) => panic!("compiling should fail"),
        Err(ovl::Error::Compiled(e)) => e,
        Err(e) => panic!("not a compiled-graph error: {e}"),
    }
}

fn run_error(result: Result<(), ovl::Error>) -> CompiledError {
    match result {
        Ok(()) => panic!("running should fail"),
        Err(ovl::Error::Compiled(e)) => e,
        Err(e) => panic!("not a compiled-graph error: {e}"),
    }
}

#[test]
fn compiling_reports_bad_inputs() {
    let x = ovl::placeholder::<f32>("x", &[3]);
    let y = ovl::placeholder::<f32>("y", &[3]);
    let a = Lazy::from(ndarray::array![2.0f32]);
    let out = axpy(&a, &x, &y);
    let e = compile_error(ovl::compile((&x, &a), &out, &cpu()));
    assert_eq!(
        e,
        CompiledError::NotAPlaceholder {
            input: 1,
            what: "f32[1]".into()
        }
    );
    assert_eq!(
        e.to_string(),
        "input 1 (f32[1]) is not a placeholder; create the inputs with `ovl::placeholder`"
    );
    let e = compile_error(ovl::compile((&x, &x, &y), &out, &cpu()));
    assert_eq!(e, CompiledError::ListedTwice { name: "x".into() });
    let e = compile_error(ovl::compile(&x, &out, &cpu()));
    assert_eq!(e, CompiledError::MissingPlaceholder { name: "y".into() });
}

#[test]
fn running_reports_bad_feeds_and_outputs() {
    let x = ovl::placeholder::<i32>("x", &[4]);
    let step = ovl::compile(&x, negate_i32(&x), &cpu()).unwrap();
    let mut out = vec![ArrayD::<i32>::zeros(IxDyn(&[4]))];
    let good = Lazy::from(ndarray::array![1i32, -2, 3, 0]);

    let short = Lazy::from(ndarray::array![1i32, 2, 3]);
    let e = run_error(step.run_into(&short, &mut out));
    assert_eq!(
        e.to_string(),
        "the data for placeholder 0 (`x`) is i32[3], the placeholder is i32[4]"
    );
    let floats = Lazy::from(ndarray::array![1.0f32, 2.0, 3.0, 4.0]);
    let e = run_error(step.run_into(&floats, &mut out));
    assert_eq!(
        e,
        CompiledError::FeedType {
            index: 0,
            name: "x".into(),
            given: "f32[4]".into(),
            wanted: "i32[4]".into()
        }
    );
    let computed = negate_i32(&good);
    let e = run_error(step.run_into(&computed, &mut out));
    assert_eq!(
        e,
        CompiledError::NotHostData {
            index: 0,
            name: "x".into()
        }
    );
    let e = run_error(step.run_into((&good, &good), &mut out));
    assert_eq!(
        e,
        CompiledError::FeedCount {
            device: false,
            given: 2,
            placeholders: 1
        }
    );
    let mut two = vec![ArrayD::<i32>::zeros(IxDyn(&[4])); 2];
    let e = step.run_into(&good, &mut two).unwrap_err();
    assert!(
        matches!(
            e,
            ovl::Error::OutputMismatch(Mismatch::OutputCount {
                outputs: 1,
                arrays: 2
            })
        ),
        "{e}"
    );
    let mut wrong = vec![ArrayD::<i32>::zeros(IxDyn(&[5]))];
    let e = step.run_into(&good, &mut wrong).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the array for output 0 is i32[5], but the graph makes i32[4]; pass an array of the \
         output's dtype and shape"
    );
    assert!(
        matches!(&e, ovl::Error::OutputMismatch(Mismatch::Output { output: 0, given, .. }) if given == "i32[5]"),
        "{e}"
    );
    assert_eq!(
        wrong[0].shape(),
        &[5],
        "the array keeps its shape after an error"
    );

    step.run_into(&good, &mut out).unwrap();
    assert_eq!(out[0], ndarray::array![-1i32, 2, -3, 0].into_dyn());
}

/// Two outputs of different dtypes, written into a mixed list of destinations per call.
#[operator]
fn scaled_and_rounded(x: Tensor<f32>) -> (Tensor<f32>, Tensor<i64>) {
    let i = position_in(x.shape())[0];
    let (s, r) = (output_like(&x), output::<i64>(x.shape()));
    s[[i]] = x[[i]] * 2.0;
    r[[i]] = (x[[i]] * 2.0) as i64;
    (s, r)
}

#[test]
fn run_into_writes_outputs_of_mixed_dtypes() {
    use ovl::Destination;
    let x = ovl::placeholder::<f32>("x", &[3]);
    let (s, r) = scaled_and_rounded(&x);
    let step = ovl::compile(&x, (&s, &r), &Options::interpreter()).unwrap();
    let mut scaled = ndarray::Array1::<f32>::zeros(3);
    let mut rounded = ovl::HostTensor::zeros(ovl::DType::I64, &[3]);
    for k in 0..2 {
        let xv = Lazy::from(ndarray::array![0.75f32, 1.5, -2.25] * (k + 1) as f32);
        let mut dests = [
            Destination::from(&mut scaled),
            Destination::from(&mut rounded),
        ];
        step.run_into(&xv, &mut dests).unwrap();
        let m = (k + 1) as f32;
        assert_eq!(scaled, ndarray::array![1.5f32 * m, 3.0 * m, -4.5 * m]);
        let want: Vec<i64> = [1.5f32 * m, 3.0 * m, -4.5 * m]
            .iter()
            .map(|&v| v as i64)
            .collect();
        assert_eq!(rounded.as_slice::<i64>(), Some(&want[..]));
    }
}
