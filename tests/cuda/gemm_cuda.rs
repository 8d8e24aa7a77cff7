//! Matrix products on the GPU through cuBLAS (`ovl::cuda::CublasGemm`, `Target::Cuda`): every
//! transposed form on odd sizes, batched, `f32`, `f64`, `f16` and `bf16`, an empty inner dimension, NaN, a sum
//! of products (a weight's gradient over steps), and the LSTM step on device tensors, each
//! against the reference product by a plain loop or the interpreter. A GEMM that cuBLAS runs
//! compiles no kernel. Without a GPU or without cuBLAS each test says it did not run.

use crate::gemm_values;
use crate::lstm_small_ops;

use gemm_values::{close, options, reference, shapes, values, FORMS, SIZES};
use ndarray::{ArrayD, IxDyn};
use ovl::cuda::DeviceTensor;
use ovl::{HostTensor, Lazy, Options};
use std::io::Write as _;

fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// Whether this machine runs GEMMs through cuBLAS; says why not when it does not.
fn ready(test: &str) -> bool {
    if let Err(e) = ovl::cuda::gpu_status() {
        say(&format!("{test}: did not run: no GPU ({e})"));
        return false;
    }
    match ovl::cuda::cublas_status() {
        Ok(info) => {
            say(&format!(
                "{test}: runs on the GPU through cuBLAS ({info:?})"
            ));
            true
        }
        Err(e) => {
            say(&format!("{test}: did not run: no cuBLAS ({e})"));
            false
        }
    }
}

fn eval<T: ovl::Scalar>(y: &Lazy<T>, o: &Options) -> ArrayD<T> {
    ovl::evaluate_with(y, &options(o.clone())).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn cublas_matches_the_reference_in_every_form_batched_in_f32_and_f64() {
    if !ready("cublas_matches_the_reference") {
        return;
    }
    // A graph of one product compiles nothing: cuBLAS runs it (a fresh cache would see the
    // reference program compiled otherwise).
    let cache = tempfile::tempdir().expect("a temporary cache");
    let cuda = Options {
        cache_dir: Some(cache.path().to_path_buf()),
        ..Options::cuda()
    };
    let before = ovl::cuda::thread_stats().nvrtc_compiles;
    for (seed, &(m, k, n)) in SIZES.iter().chain(&[(130, 257, 65)]).enumerate() {
        for (ta, tb) in FORMS {
            for batch in [&[][..], &[2, 3][..]] {
                let [sa, sb] = shapes(batch, (m, k, n), ta, tb);
                let (a, b) = (values(&sa, seed as u64 + 7), values(&sb, seed as u64 + 70));
                let (want, mag) = reference(&a, &b, ta, tb);
                let what = format!("{sa:?} x {sb:?} (transposed {ta}, {tb})");
                let y = ovl::gemm(&Lazy::from(a.clone()), &Lazy::from(b.clone()), ta, tb);
                close(&eval(&y, &cuda), &want, &mag, 1e-14, &format!("f64 {what}"));
                let (a32, b32) = (a.mapv(|v| v as f32), b.mapv(|v| v as f32));
                let y = ovl::gemm(&Lazy::from(a32), &Lazy::from(b32), ta, tb);
                let got = eval(&y, &cuda);
                close(&got, &want, &mag, 1e-6, &format!("f32 {what}"));
                if k == 0 {
                    assert!(got.iter().all(|v| v.to_bits() == 0), "k = 0 gives +0.0");
                }
            }
        }
    }
    assert_eq!(
        ovl::cuda::thread_stats().nvrtc_compiles,
        before,
        "no kernel compiled for a product"
    );
    // NaN and infinity propagate as in the reference: a NaN in row 1 of A makes row 1 of C NaN.
    let mut a = values(&[3, 4], 1).mapv(|v| v as f32);
    a[[1, 2]] = f32::NAN;
    let b = values(&[4, 5], 2).mapv(|v| v as f32);
    let got = eval(
        &ovl::gemm(&Lazy::from(a.clone()), &Lazy::from(b), false, false),
        &cuda,
    );
    for ((i, _), v) in got.indexed_iter().map(|(ix, v)| ((ix[0], ix[1]), v)) {
        assert_eq!(v.is_nan(), i == 1, "row {i}: {v}");
    }
}

/// Half products through `cublasGemmStridedBatchedEx` (inputs and C in the half type, f32
/// compute on tensor cores): every transposed form, batched, against the f64 product of the
/// exact half values: within one ulp of the half type plus f32 accumulation's error (C is
/// rounded once). No kernel is compiled for them.
#[test]
fn half_products_run_on_cublas_with_f32_accumulation() {
    use ovl::half::{bf16, f16};
    if !ready("half_products_run_on_cublas") {
        return;
    }
    let before = ovl::cuda::thread_stats().nvrtc_compiles;
    for (seed, &(m, k, n)) in SIZES.iter().chain(&[(130, 257, 65)]).enumerate() {
        for (ta, tb) in FORMS {
            for batch in [&[][..], &[2, 3][..]] {
                let [sa, sb] = shapes(batch, (m, k, n), ta, tb);
                let (a, b) = (values(&sa, seed as u64 + 9), values(&sb, seed as u64 + 90));
                let what = format!("{sa:?} x {sb:?} (transposed {ta}, {tb})");
                // f16: 10 fraction bits; bf16: 7.
                let (a16, b16) = (a.mapv(f16::from_f64), b.mapv(f16::from_f64));
                let (want, mag) = reference(&a16.mapv(f64::from), &b16.mapv(f64::from), ta, tb);
                let y = ovl::gemm(&Lazy::from(a16), &Lazy::from(b16), ta, tb);
                let got = eval(&y, &Options::cuda()).mapv(f64::from);
                close(&got, &want, &mag, 2f64.powi(-10), &format!("f16 {what}"));
                let (ab, bb) = (a.mapv(bf16::from_f64), b.mapv(bf16::from_f64));
                let (want, mag) = reference(&ab.mapv(f64::from), &bb.mapv(f64::from), ta, tb);
                let y = ovl::gemm(&Lazy::from(ab), &Lazy::from(bb), ta, tb);
                let got = eval(&y, &Options::cuda()).mapv(f64::from);
                close(&got, &want, &mag, 2f64.powi(-7), &format!("bf16 {what}"));
            }
        }
    }
    assert_eq!(
        ovl::cuda::thread_stats().nvrtc_compiles,
        before,
        "no kernel compiled for a half product"
    );
}

/// A weight used in five products: its gradient is one call summing five products (cuBLAS
/// adding each to C), equal to the CPU's; then the LSTM step (two products and the fused cell)
/// on device tensors, equal to the interpreter's values.
#[test]
fn a_sum_of_products_and_the_lstm_step_on_device_tensors() {
    if !ready("a_sum_of_products_and_the_lstm_step") {
        return;
    }
    let (steps, (m, k, n)) = (5, (3, 7, 6));
    for (ta, tb) in FORMS {
        let [sa, sb] = shapes(&[], (m, k, n), ta, tb);
        let lw = Lazy::from(values(&sb, 30).mapv(|v| v as f32));
        let lxs: Vec<Lazy<f32>> = (0..steps)
            .map(|t| Lazy::from(values(&sa, 20 + t).mapv(|v| v as f32)))
            .collect();
        let ys: Vec<Lazy<f32>> = lxs
            .iter()
            .map(|x| ovl_stdlib::matmul_t(x, &lw, ta, tb))
            .collect();
        let gs: Vec<Lazy<f32>> = (0..steps)
            .map(|t| Lazy::from(values(&[m, n], 40 + t).mapv(|v| v as f32)))
            .collect();
        let pairs: Vec<(&Lazy<f32>, &Lazy<f32>)> = ys.iter().zip(&gs).collect();
        let grads = ovl::backward(&pairs, &[&lw]).unwrap();
        let dw = grads.of(&lw).unwrap();
        let cpu = eval(&dw, &Options::cpu());
        let gpu = eval(&dw, &Options::cuda());
        for (p, q) in gpu.iter().zip(&cpu) {
            assert!(
                (p - q).abs() <= 1e-5 * (1.0 + q.abs()),
                "({ta}, {tb}): {p} vs {q}"
            );
        }
    }

    let (batch, input, hidden) = (4, 24, 40);
    let x = ovl::placeholder::<f32>("x", &[batch, input]);
    let h = ovl::placeholder::<f32>("h", &[batch, hidden]);
    let c = ovl::placeholder::<f32>("c", &[batch, hidden]);
    let w = Lazy::from(values(&[input, 4 * hidden], 4).mapv(|v| v as f32 * 0.3));
    let u = Lazy::from(values(&[hidden, 4 * hidden], 5).mapv(|v| v as f32 * 0.3));
    let z = ovl_stdlib::add(ovl_stdlib::matmul(&x, &w), ovl_stdlib::matmul(&h, &u));
    let (new_c, new_h) = lstm_small_ops::lstm_cell(&z, &c, 1.0);
    let feeds: Vec<ArrayD<f32>> = [
        (&[batch, input], 1),
        (&[batch, hidden], 2),
        (&[batch, hidden], 3),
    ]
    .iter()
    .map(|(s, seed)| values(&s[..], *seed).mapv(|v| v as f32))
    .collect();
    let want: Vec<ArrayD<f32>> = {
        let interp = ovl::compile(
            (&x, &h, &c),
            (&new_c, &new_h),
            &options(Options::interpreter()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let mut outs = vec![ArrayD::zeros(IxDyn(&[batch, hidden])); 2];
        let lazies: Vec<Lazy<f32>> = feeds.iter().map(|f| Lazy::from(f.clone())).collect();
        interp
            .run_into((&lazies[0], &lazies[1], &lazies[2]), &mut outs)
            .unwrap_or_else(|e| panic!("{e}"));
        outs
    };
    let compiled = ovl::compile((&x, &h, &c), (&new_c, &new_h), &options(Options::cuda()))
        .unwrap_or_else(|e| panic!("{e}"));
    let uploads: Vec<DeviceTensor> = feeds
        .iter()
        .map(|f| {
            let host = HostTensor::from_vec(f.shape(), f.iter().copied().collect())
                .expect("a host tensor");
            DeviceTensor::upload(&host).expect("upload")
        })
        .collect();
    let outs = compiled
        .run_device(&uploads.iter().collect::<Vec<_>>())
        .unwrap_or_else(|e| panic!("{e}"));
    for (out, want) in outs.iter().zip(&want) {
        let got = out.to_host().expect("download");
        for (p, q) in got.as_slice::<f32>().expect("f32").iter().zip(want) {
            assert!((p - q).abs() <= 1e-5, "LSTM step: {p} vs {q}");
        }
    }
}

/// `Options::cuda_tf32`: f32 products on TF32 tensor cores (GPUs from sm_80 on) are within the
/// rounding of 10-bit-mantissa inputs of the reference, and differ from the full-precision
/// products (so the option reached cuBLAS; the plan cache keeps the two apart).
#[test]
fn tf32_products_are_within_their_rounding_and_differ_from_f32() {
    if !ready("tf32_products") {
        return;
    }
    match ovl::cuda::gpu_status() {
        Ok(info) if info.arch >= 80 => {}
        other => {
            say(&format!(
                "tf32_products: did not run: no TF32 tensor cores ({other:?})"
            ));
            return;
        }
    }
    let (a, b) = (values(&[64, 256], 3), values(&[256, 96], 4));
    let (want, mag) = reference(&a, &b, false, false);
    let y = ovl::gemm(
        &Lazy::from(a.mapv(|v| v as f32)),
        &Lazy::from(b.mapv(|v| v as f32)),
        false,
        false,
    );
    let full = eval(&y, &Options::cuda());
    close(&full, &want, &mag, 1e-6, "f32");
    let tf32 = eval(&y, &Options::cuda().with_cuda_tf32(true));
    close(&tf32, &want, &mag, 2e-3, "tf32");
    assert!(
        tf32.iter().zip(&full).any(|(p, q)| p != q),
        "TF32 products equal the f32 ones everywhere: the option did not reach cuBLAS"
    );
}
