//! Device-resident tensors: `ovl::compile` + `Compiled::run_device` and `ovl::evaluate_device`
//! on `Options::cuda()` keep data on the GPU. Without a GPU, the errors for a missing GPU and
//! for misuse are checked and the GPU part prints that it did not run; with one (see
//! `scripts/gpu-check.sh`), values are compared with the interpreter's, the allocator is
//! checked to allocate nothing from the driver in a steady state, and bad input (dtype, shape,
//! a fault, running out of memory) is a clear error after which the runtime still works.

use ndarray::{Array1, ArrayD, IxDyn};
use ovl::cuda::{DeviceError, DeviceTensor};
use ovl::prelude::*;
use ovl::HostTensor;
use std::io::Write as _;

#[operator]
fn axpy(a: Tensor<f32>, x: Tensor<f32>, y: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = a[[0]] * x[[i]] + y[[i]];
    out
}

#[operator]
fn square_plus_one(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * x[[i]] + 1.0f32;
    out
}

/// out[i] = x[idx[i]]: a checked index, so the kernel can fault.
#[operator]
fn gather(x: Tensor<f32>, idx: Tensor<i32>) -> Tensor<f32> {
    let i = position_in(idx.shape())[0];
    let out = output::<f32>(idx.shape());
    out[[i]] = x[[idx[[i]]]];
    out
}

fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

fn host(v: &[f32]) -> HostTensor {
    HostTensor::from_vec(&[v.len()], v.to_vec()).expect("a host tensor")
}

/// The graph `square_plus_one(axpy(2, x, y))` on placeholders, unfused (two kernels, an
/// intermediate between them) for `options`.
fn two_kernels(n: usize, options: &Options) -> Result<ovl::Compiled, ovl::Error> {
    let x = ovl::placeholder::<f32>("x", &[n]);
    let y = ovl::placeholder::<f32>("y", &[n]);
    let a = Lazy::from(ndarray::array![2.0f32]);
    let out = square_plus_one(axpy(&a, &x, &y));
    ovl::compile((&x, &y), &out, &options.clone().with_opt_level(0))
}

#[test]
fn without_a_gpu_device_tensors_and_device_runs_say_what_is_missing() {
    // Misuse is an error whatever the machine: a graph compiled for the CPU or the interpreter
    // takes no device tensors.
    let compiled = two_kernels(4, &Options::interpreter()).expect("compiles");
    let err = compiled
        .run_device(&[])
        .expect_err("not compiled for the GPU");
    let msg = err.to_string();
    assert!(
        msg.contains("Options::cuda()") && msg.contains("Interpreter"),
        "{msg}"
    );
    let x = Array1::from(vec![1.0f32, 2.0]);
    let err = ovl::evaluate_device(square_plus_one(&x), &Options::cpu()).expect_err("CPU target");
    assert!(err.to_string().contains("Options::cuda()"), "{err}");

    if ovl::cuda::gpu_status().is_ok() {
        return;
    }
    let err = DeviceTensor::upload(&host(&[1.0, 2.0])).expect_err("no GPU");
    assert!(matches!(err, DeviceError::NoGpu(_)), "{err}");
    assert!(err.to_string().contains("libcuda.so.1"), "{err}");
    let err = ovl::evaluate_device(square_plus_one(&x), &Options::cuda()).expect_err("no GPU");
    assert!(err.to_string().contains("no usable GPU"), "{err}");
    let err = two_kernels(4, &Options::cuda()).err().expect("no GPU");
    assert!(err.to_string().contains("no usable GPU"), "{err}");
    say("device_tensors: GPU EXECUTION DID NOT RUN (no GPU): only the errors were checked");
}

#[test]
fn a_compiled_graph_runs_on_device_tensors_without_host_copies() {
    if let Err(e) = ovl::cuda::gpu_status() {
        say(&format!("device_tensors: did not run: no GPU ({e})"));
        return;
    }
    let n = 1000;
    let xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 100.0).collect();
    let ys: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    // The interpreter's values, the oracle.
    let oracle = two_kernels(n, &Options::interpreter()).expect("compiles");
    let mut expected = vec![ArrayD::<f32>::zeros(IxDyn(&[n]))];
    oracle
        .run_into(
            (
                &Lazy::from(Array1::from(xs.clone())),
                &Lazy::from(Array1::from(ys.clone())),
            ),
            &mut expected,
        )
        .expect("interpreter");
    let expected = expected[0].as_slice().expect("contiguous").to_vec();

    let compiled = two_kernels(n, &Options::cuda()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        compiled.kernel_count(),
        2,
        "unfused: an intermediate on the device"
    );
    let x = DeviceTensor::upload(&host(&xs)).expect("upload");
    let y = DeviceTensor::upload(&host(&ys)).expect("upload");
    let out = compiled
        .run_device(&[&x, &y])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].dtype(), out[0].shape()), (DType::F32, &[n][..]));
    let got = out[0].to_host().expect("download");
    assert_eq!(got.as_slice::<f32>().expect("f32"), &expected[..]);

    // A steady state: the same call into the same output allocates nothing from the driver.
    let mut outs = out;
    compiled
        .run_device_into(&[&x, &y], &mut outs)
        .expect("warm");
    let before = ovl::cuda::allocator_stats();
    for _ in 0..20 {
        compiled
            .run_device_into(&[&x, &y], &mut outs)
            .expect("steady");
    }
    let after = ovl::cuda::allocator_stats();
    assert_eq!(
        after.device_allocations, before.device_allocations,
        "{after:?}"
    );
    assert!(
        after.reused >= before.reused + 20,
        "{before:?} -> {after:?}"
    );
    let got = outs[0].to_host().expect("download");
    assert_eq!(got.as_slice::<f32>().expect("f32"), &expected[..]);

    // evaluate_device: the same values from host inputs, results on the device.
    let lazy = square_plus_one(axpy(
        Lazy::from(ndarray::array![2.0f32]),
        Lazy::from(Array1::from(xs)),
        Lazy::from(Array1::from(ys)),
    ));
    let results = ovl::evaluate_device(&lazy, &Options::cuda()).unwrap_or_else(|e| panic!("{e}"));
    let got = results[0].to_host().expect("download");
    assert_eq!(got.as_slice::<f32>().expect("f32"), &expected[..]);
    say(&format!(
        "device_tensors: ran on the GPU; allocator {after:?}"
    ));
}

#[test]
fn bad_device_input_is_a_clear_error_and_the_runtime_still_works() {
    if let Err(e) = ovl::cuda::gpu_status() {
        say(&format!("device_tensors: did not run: no GPU ({e})"));
        return;
    }
    let compiled = two_kernels(4, &Options::cuda()).unwrap_or_else(|e| panic!("{e}"));
    let x = DeviceTensor::upload(&host(&[1.0, 2.0, 3.0, 4.0])).expect("upload");
    let short = DeviceTensor::upload(&host(&[1.0, 2.0])).expect("upload");
    let ints = DeviceTensor::upload(&HostTensor::from_vec(&[4], vec![1i32, 2, 3, 4]).unwrap())
        .expect("upload");
    let err = compiled.run_device(&[&x, &short]).expect_err("wrong shape");
    assert!(
        err.to_string().contains("placeholder 1 (`y`)") && err.to_string().contains("f32[2]"),
        "{err}"
    );
    let err = compiled.run_device(&[&ints, &x]).expect_err("wrong dtype");
    assert!(
        err.to_string().contains("placeholder 0 (`x`)") && err.to_string().contains("i32[4]"),
        "{err}"
    );
    let err = compiled.run_device(&[&x]).expect_err("too few");
    assert!(
        err.to_string().contains("1 device tensors given for 2"),
        "{err}"
    );
    let mut aliased = vec![x.clone()];
    let err = compiled
        .run_device_into(&[&x, &x], &mut aliased)
        .expect_err("output aliases input");
    assert!(
        err.to_string().contains("shares its device memory"),
        "{err}"
    );

    // Out of device memory: names the tensor; the runtime still works.
    let err = DeviceTensor::zeros(DType::F32, &[1usize << 45]).expect_err("32 TiB");
    assert!(matches!(err, DeviceError::OutOfMemory { .. }), "{err}");
    assert!(err.to_string().contains("f32[35184372088832]"), "{err}");

    // A fault names the operator and the worker; the runtime still works after it.
    let xv = ovl::placeholder::<f32>("x", &[4]);
    let iv = ovl::placeholder::<i32>("idx", &[3]);
    let g = ovl::compile((&xv, &iv), gather(&xv, &iv), &Options::cuda()).expect("compiles");
    let idx = DeviceTensor::upload(&HostTensor::from_vec(&[3], vec![3i32, 7, 0]).unwrap()).unwrap();
    let err = g.run_device(&[&x, &idx]).expect_err("index 7 of 4");
    let msg = err.to_string();
    assert!(
        msg.contains("gather") && msg.contains("index 7") && msg.contains("[1]"),
        "{msg}"
    );
    let idx = DeviceTensor::upload(&HostTensor::from_vec(&[3], vec![3i32, 1, 0]).unwrap()).unwrap();
    let out = g.run_device(&[&x, &idx]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        out[0].to_host().unwrap().as_slice::<f32>().unwrap(),
        &[4.0, 2.0, 1.0]
    );
    let out = compiled
        .run_device(&[&x, &x])
        .unwrap_or_else(|e| panic!("{e}"));
    // (2x + x)^2 + 1 for x = 1..4
    assert_eq!(
        out[0].to_host().unwrap().as_slice::<f32>().unwrap(),
        &[10.0, 37.0, 82.0, 145.0]
    );
}
