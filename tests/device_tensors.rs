//! Device-resident tensors: `ovl::compile` + `Compiled::run_device` and `ovl::evaluate_device`
//! on `Options::cuda()` keep data on the GPU. Without a GPU, the errors for a missing GPU and
//! for misuse are checked and the GPU part prints that it did not run; with one (see
//! `scripts/gpu-check.sh`), values are compared with the interpreter's, the allocator is
//! checked to allocate nothing from the driver in a steady state, and bad input (dtype, shape,
//! a fault, running out of memory) is a clear error after which the runtime still works.

#[path = "support/gather_op.rs"]
mod gather_op;

use gather_op::{gather, say};
use ndarray::{Array1, ArrayD, IxDyn};
use ovl::cuda::{DeviceError, DeviceTensor};
use ovl::prelude::*;
use ovl::HostTensor;

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
    if compiled.runs_as_cuda_graph() {
        // A replayed CUDA graph owns its blocks: no allocator traffic at all.
        assert_eq!(after.reused, before.reused, "{before:?} -> {after:?}");
    } else {
        assert!(
            after.reused >= before.reused + 20,
            "{before:?} -> {after:?}"
        );
    }
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

/// Data "on a device" that is really in host memory: a graph input of the kind
/// `ovl::from_device` makes, usable without a GPU.
#[derive(Debug)]
struct OnFakeDevice(HostTensor);

impl ovl::DeviceData for OnFakeDevice {
    fn dtype(&self) -> ovl::DType {
        self.0.dtype()
    }
    fn shape(&self) -> &[usize] {
        &self.0.shape
    }
    fn to_host(&self) -> Result<HostTensor, Box<dyn std::error::Error + Send + Sync>> {
        Ok(self.0.clone())
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[test]
fn device_data_in_a_lazy_graph_is_copied_to_the_host_for_a_host_backend() {
    let xs = [1.5f32, -2.0, 0.25, 3.0];
    let device = ovl::LazyTensor::device(std::sync::Arc::new(OnFakeDevice(host(&xs))));
    let x: Lazy<f32> = device.clone().try_into().expect("an f32 handle");
    assert!(Lazy::<i32>::try_from(device).is_err());
    let y = square_plus_one(&x);
    let want: Vec<f32> = xs.iter().map(|v| v * v + 1.0).collect();
    for options in [Options::cpu(), Options::interpreter()] {
        let got = ovl::evaluate_with(&y, &options).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.as_slice().expect("contiguous"), &want[..]);
    }
    // Mixed with host data, and twice (the plan cache keys device data apart from host data).
    let yy = Lazy::from(Array1::from(vec![1.0f32; 4]));
    for _ in 0..2 {
        let got = ovl::evaluate(&axpy(Lazy::from(ndarray::array![2.0f32]), &y, &yy)).unwrap();
        let want: Vec<f32> = want.iter().map(|v| 2.0 * v + 1.0).collect();
        assert_eq!(got.as_slice().expect("contiguous"), &want[..]);
    }
    if ovl::cuda::gpu_status().is_err() {
        let err = ovl::evaluate_device(&y, &Options::cuda()).unwrap_err();
        assert!(
            matches!(err, ovl::Error::Codegen(_) | ovl::Error::Device(_)),
            "{err:?}"
        );
    }
}

#[test]
fn a_lazy_graph_reads_device_tensors_in_place() {
    if let Err(e) = ovl::cuda::gpu_status() {
        say(&format!(
            "device_tensors (from_device): did not run: no GPU ({e})"
        ));
        return;
    }
    let n = 4096;
    let xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.01 - 20.0).collect();
    let ys: Vec<f32> = (0..n).map(|i| (i % 5) as f32).collect();
    let xd = DeviceTensor::upload(&host(&xs)).expect("upload");
    let yd = DeviceTensor::upload(&host(&ys)).expect("upload");
    let x = ovl::from_device::<f32>(&xd).expect("an f32 handle");
    let y = ovl::from_device::<f32>(&yd).expect("an f32 handle");
    let a = Lazy::from(ndarray::array![2.0f32]);
    let out = square_plus_one(axpy(&a, &x, &y));
    let want: Vec<f32> = xs
        .iter()
        .zip(&ys)
        .map(|(x, y)| {
            let v = 2.0 * x + y;
            v * v + 1.0
        })
        .collect();
    // On the GPU, no copy of the inputs: the result is a device tensor.
    let got = ovl::evaluate_device(&out, &Options::cuda()).unwrap_or_else(|e| panic!("{e}"));
    let got = got[0].to_host().expect("download");
    assert_eq!(got.as_slice::<f32>().expect("f32"), &want[..]);
    // On the host, the device data is copied there first.
    let got = ovl::evaluate_with(&out, &Options::cpu()).expect("cpu");
    assert_eq!(got.as_slice().expect("contiguous"), &want[..]);
    // A device tensor as a constant of a compiled graph, read where it is at every run.
    let p = ovl::placeholder::<f32>("p", &[n]);
    let step = ovl::compile(&p, axpy(&a, &x, &p), &Options::cuda()).expect("compiles");
    let outs = step.run_device(&[&yd]).expect("runs");
    let got = outs[0].to_host().expect("download");
    let want: Vec<f32> = xs.iter().zip(&ys).map(|(x, y)| 2.0 * x + y).collect();
    assert_eq!(got.as_slice::<f32>().expect("f32"), &want[..]);
    // The wrong element type is an error that names the tensor's.
    let err = ovl::from_device::<i32>(&xd).unwrap_err();
    assert!(
        matches!(
            &err,
            ovl::Error::OutputMismatch(ovl::Mismatch::DeviceDtype { wanted, .. })
                if *wanted == ovl::DType::I32
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("f32[4096]"), "{err}");
}
