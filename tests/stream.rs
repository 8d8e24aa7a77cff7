//! Programs run on the caller's CUDA stream, device and memory (`LoadedProgram::run_on_stream`,
//! `docs/streams.md`), as a framework's custom op calls them: on a stream the test creates, on
//! every GPU (0, and 1 when there is one), with each scratch source, from DLPack tensors,
//! captured by the test into a CUDA graph and replayed with new inputs, without any host
//! synchronization (a call returns while the stream is held up by an earlier host function),
//! and with faults reported at the next call or check. Values are the interpreter's. Without a
//! GPU the errors are checked and each GPU test says that it did not run.

#[path = "support/gather_op.rs"]
mod gather_op;

use cudarc::driver::{result, sys, CudaContext};
use gather_op::{gather, say};
use ndarray::ArrayD;
use ovl::cuda::stream::{device_count, DeviceAllocator, Scratch, StreamCall};
use ovl::prelude::*;
use ovl::program::{Binding, LoadedProgram};
use ovl::HostTensor;
use ovl_core::ir;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn options(target: Options) -> Options {
    match std::env::var_os("OVL_CACHE_DIR") {
        Some(dir) => Options {
            cache_dir: Some(dir.into()),
            ..target
        },
        None => target,
    }
}

/// The GPU tests run one at a time: a capture in global mode (as `torch.cuda.graph`'s) forbids
/// other threads' allocations and synchronous copies while it lasts.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// How many GPUs there are; prints that `test` did not run when none.
fn gpus(test: &str) -> i32 {
    match device_count() {
        Ok(n) => n,
        Err(e) => {
            say(&format!("{test}: did not run: no GPU ({e})"));
            0
        }
    }
}

const FEATURES: usize = 16;
const CLASSES: usize = 8;

/// softmax(x · w + b) and x · w + b twice (a copy): products (cuBLAS where it loads), the
/// program's own constants, a row reduction; for any batch when `polymorphic`, else batch 4.
fn program(polymorphic: bool) -> ir::Program {
    let make = |batch: usize| {
        let x = ovl::placeholder::<f32>("x", &[batch, FEATURES]);
        let w = ArrayD::from_shape_fn(vec![FEATURES, CLASSES], |i| {
            ((i[0] * 7 + i[1] * 3) % 11) as f32 * 0.1 - 0.5
        });
        let b = ArrayD::from_shape_fn(vec![CLASSES], |i| i[0] as f32 * 0.25);
        let z = ovl_stdlib::add(ovl_stdlib::matmul(&x, Lazy::from(w)), Lazy::from(b));
        let y = ovl_stdlib::softmax(&z);
        ovl::as_tensorflow(&x, (&y, &z, &z)).options(&Options::interpreter())
    };
    if polymorphic {
        ovl::as_tensorflow_polymorphic(make)
            .build()
            .unwrap()
            .program
    } else {
        make(4).build().unwrap().program
    }
}

fn gathering() -> ir::Program {
    let x = ovl::placeholder::<f32>("x", &[4]);
    let idx = ovl::placeholder::<i32>("idx", &[3]);
    ovl::as_tensorflow((&x, &idx), gather(&x, &idx))
        .options(&Options::interpreter())
        .build()
        .unwrap()
        .program
}

fn features(batch: usize, seed: usize) -> Vec<f32> {
    (0..batch * FEATURES)
        .map(|i| ((i * 13 + seed * 5) % 17) as f32 * 0.2 - 1.5)
        .collect()
}

/// The interpreter's outputs for `x`.
fn reference(program: &ir::Program, batch: usize, x: &[f32]) -> Vec<Vec<f32>> {
    let interp = LoadedProgram::new(program.clone(), &options(Options::interpreter())).unwrap();
    let x = HostTensor::from_vec(&[batch, FEATURES], x.to_vec()).unwrap();
    interp
        .run_host(&[&x], 1)
        .unwrap()
        .iter()
        .map(|t| t.as_slice::<f32>().unwrap().to_vec())
        .collect()
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
            "{what}: element {i} is {g}, the interpreter's {w}"
        );
    }
}

/// One GPU through its primary context, with raw buffers and streams, as a framework holds them.
struct Gpu {
    ctx: Arc<CudaContext>,
}

impl Gpu {
    fn new(ordinal: i32) -> Gpu {
        Gpu {
            ctx: CudaContext::new(ordinal as usize).unwrap(),
        }
    }
    fn bind(&self) {
        self.ctx.bind_to_thread().unwrap();
    }
    /// A non-blocking stream (like PyTorch's side streams): neither waits for the legacy
    /// stream nor is waited for by it.
    fn stream(&self) -> usize {
        self.bind();
        result::stream::create(result::stream::StreamKind::NonBlocking).unwrap() as usize
    }
    fn alloc(&self, bytes: usize) -> u64 {
        self.bind();
        // SAFETY: a plain allocation.
        unsafe { result::malloc_sync(bytes.max(1)) }.unwrap()
    }
    fn write<T>(&self, ptr: u64, values: &[T]) {
        self.bind();
        // SAFETY: `ptr` holds at least `values`' bytes (each test allocates it so).
        unsafe { result::memcpy_htod_sync(ptr, values) }.unwrap();
    }
    fn upload<T>(&self, values: &[T]) -> u64 {
        let p = self.alloc(std::mem::size_of_val(values));
        self.write(p, values);
        p
    }
    fn read(&self, ptr: u64, n: usize) -> Vec<f32> {
        self.bind();
        let mut v = vec![0f32; n];
        // SAFETY: `ptr` holds `n` f32.
        unsafe { result::memcpy_dtoh_sync(&mut v, ptr) }.unwrap();
        v
    }
    fn sync(&self, stream: usize) {
        self.bind();
        // SAFETY: a stream of this context.
        unsafe { result::stream::synchronize(stream as sys::CUstream) }.unwrap();
    }
    /// Output buffers for a binding.
    fn outputs(&self, binding: &Binding) -> Vec<u64> {
        binding
            .outputs
            .iter()
            .map(|s| self.alloc(s.bytes()))
            .collect()
    }
}

fn read_outputs(gpu: &Gpu, binding: &Binding, outs: &[u64]) -> Vec<Vec<f32>> {
    outs.iter()
        .zip(&binding.outputs)
        .map(|(&p, s)| gpu.read(p, s.shape.iter().product()))
        .collect()
}

fn check(got: &[Vec<f32>], want: &[Vec<f32>], what: &str) {
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert_close(g, w, &format!("{what}, output {k}"));
    }
}

/// A caller's allocator: synchronous blocks, given back after the test synchronized.
#[derive(Default)]
struct Keeping {
    blocks: Mutex<Vec<u64>>,
    freed: AtomicUsize,
}

impl DeviceAllocator for Keeping {
    fn alloc(&self, device: i32, _stream: usize, bytes: usize) -> Result<u64, String> {
        let mut current: sys::CUdevice = -1;
        // SAFETY: a valid out-pointer.
        unsafe { sys::cuCtxGetDevice(&mut current) };
        assert_eq!(current, device, "the call's device is current");
        // SAFETY: a plain allocation in the current context (the call's device).
        let p = unsafe { result::malloc_sync(bytes) }.map_err(|e| e.to_string())?;
        self.blocks.lock().unwrap().push(p);
        Ok(p)
    }
    fn free(&self, _device: i32, _stream: usize, _ptr: u64, _bytes: usize) {
        self.freed.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn without_a_gpu_or_with_bad_buffers_the_errors_are_clean() {
    let _serial = serial();
    let program = program(false);
    // Loaded for the interpreter: the stream run refuses it, after checking device and buffers.
    let loaded = LoadedProgram::new(program, &options(Options::interpreter())).unwrap();
    let binding = loaded.bind(&[&[4, FEATURES]]).unwrap();
    let outs = [1u64 << 40, 2 << 40, 3 << 40];
    let call = StreamCall::new(0, 0);
    // SAFETY: the addresses are never used: the call is refused before anything is queued.
    let err = unsafe { loaded.run_on_stream(&binding, &[1 << 40], &outs, &call) }.unwrap_err();
    let msg = err.to_string();
    // SAFETY: as above; a wrong count is refused first.
    let count = unsafe { loaded.run_on_stream(&binding, &[], &outs, &call) }.unwrap_err();
    assert!(count.to_string().contains("0 inputs"), "{count}");
    assert!(loaded.check_faults().is_ok());
    assert_eq!(
        loaded.scratch_bytes(&binding) % ovl::cuda::stream::SCRATCH_ALIGN,
        0
    );
    if gpus("without_a_gpu_or_with_bad_buffers") == 0 {
        assert!(msg.contains("no GPU for a run on a CUDA stream"), "{msg}");
        return;
    }
    assert!(
        msg.contains("input 0 (`x`)") && msg.contains("is not CUDA device memory"),
        "{msg}"
    );
    let far = StreamCall::new(99, 0);
    // SAFETY: as above.
    let err = unsafe { loaded.run_on_stream(&binding, &[1 << 40], &outs, &far) }.unwrap_err();
    assert!(
        err.to_string().contains("CUDA device 99 does not exist"),
        "{err}"
    );
    // Device memory, but the program was not compiled for the GPU.
    let gpu = Gpu::new(0);
    let x = gpu.upload(&features(4, 0));
    let outs = gpu.outputs(&binding);
    // SAFETY: buffers of the bound types on device 0.
    let err = unsafe { loaded.run_on_stream(&binding, &[x], &outs, &call) }.unwrap_err();
    assert!(
        err.to_string().contains("was not compiled for the GPU"),
        "{err}"
    );
    say("without_a_gpu_or_with_bad_buffers: ran on the GPU");
}

/// Every device, every scratch source, a concrete and a polymorphic program (two batches):
/// the interpreter's values, on a stream the test made.
#[test]
fn runs_on_the_callers_stream_on_every_device_with_every_scratch_source() {
    let _serial = serial();
    let count = gpus("runs_on_the_callers_stream");
    for polymorphic in [false, true] {
        let program = program(polymorphic);
        let cuda = match count {
            0 => continue,
            _ => LoadedProgram::new(program.clone(), &options(Options::cuda())).unwrap(),
        };
        for ordinal in 0..count.min(2) {
            let gpu = Gpu::new(ordinal);
            let stream = gpu.stream();
            for batch in if polymorphic { vec![3, 6] } else { vec![4] } {
                let binding = cuda.bind(&[&[batch, FEATURES]]).unwrap();
                let xs = features(batch, ordinal as usize + batch);
                let want = reference(&program, batch, &xs);
                let x = gpu.upload(&xs);
                let keeping = Keeping::default();
                let arena = gpu.alloc(cuda.scratch_bytes(&binding));
                let sources = [
                    Scratch::StreamOrdered,
                    Scratch::Allocator(&keeping),
                    Scratch::Arena {
                        ptr: arena,
                        bytes: cuda.scratch_bytes(&binding),
                    },
                ];
                for scratch in sources {
                    let outs = gpu.outputs(&binding);
                    let call = StreamCall::new(ordinal, stream).with_scratch(scratch);
                    // SAFETY: buffers of the bound types on this device, kept until synchronized.
                    unsafe { cuda.run_on_stream(&binding, &[x], &outs, &call) }
                        .unwrap_or_else(|e| panic!("{e}"));
                    gpu.sync(stream);
                    let what = format!("device {ordinal}, batch {batch}, {scratch:?}");
                    check(&read_outputs(&gpu, &binding, &outs), &want, &what);
                    cuda.check_faults().unwrap();
                }
                // Outputs from ovl's stream-ordered allocation.
                let call = StreamCall::new(ordinal, stream);
                // SAFETY: the stream outlives the buffers (dropped before the test ends).
                let owned = unsafe { cuda.stream_outputs(&binding, &call) }.unwrap();
                let outs: Vec<u64> = owned.iter().map(|b| b.ptr()).collect();
                // SAFETY: buffers of the bound types on this device.
                unsafe { cuda.run_on_stream(&binding, &[x], &outs, &call) }.unwrap();
                gpu.sync(stream);
                let what = format!("device {ordinal}, batch {batch}, outputs from the pool");
                check(&read_outputs(&gpu, &binding, &outs), &want, &what);
                drop(owned);
                assert_eq!(
                    keeping.blocks.lock().unwrap().len(),
                    keeping.freed.load(Ordering::SeqCst),
                    "the caller's allocator got every block back"
                );
            }
        }
        if count > 1 {
            // A feed on device 1 for a call on device 0.
            let binding = cuda.bind(&[&[4, FEATURES]]).unwrap();
            let x1 = Gpu::new(1).upload(&features(4, 0));
            let gpu = Gpu::new(0);
            let outs = gpu.outputs(&binding);
            let call = StreamCall::new(0, gpu.stream());
            // SAFETY: refused before anything is queued.
            let err = unsafe { cuda.run_on_stream(&binding, &[x1], &outs, &call) }.unwrap_err();
            assert!(
                err.to_string()
                    .contains("input 0 (`x`) is on CUDA device 1, but the call runs on device 0"),
                "{err}"
            );
        } else if count == 1 {
            say("runs_on_the_callers_stream: device 1 did not run: one GPU only");
        }
    }
    if count > 0 {
        say("runs_on_the_callers_stream: ran on the GPU");
    }
}

/// DLPack tensors (ovl's own device tensors handed out and back, as PyTorch's would come):
/// their pointers and device are the call's.
#[test]
fn dlpack_tensors_run_in_place_on_the_callers_stream() {
    let _serial = serial();
    use ovl::cuda::DeviceTensor;
    use ovl_runtime::dlpack::{export_versioned, DlpackTensor};
    if gpus("dlpack_tensors_run_in_place") == 0 {
        return;
    }
    let program = program(false);
    let cuda = LoadedProgram::new(program.clone(), &options(Options::cuda())).unwrap();
    let binding = cuda.bind(&[&[4, FEATURES]]).unwrap();
    let xs = features(4, 9);
    let x =
        DeviceTensor::upload(&HostTensor::from_vec(&[4, FEATURES], xs.clone()).unwrap()).unwrap();
    let outs: Vec<DeviceTensor> = binding
        .outputs
        .iter()
        .map(|s| DeviceTensor::zeros(s.dtype, &s.shape).unwrap())
        .collect();
    ovl::cuda::synchronize().unwrap();
    let import = |t: &DeviceTensor| {
        // SAFETY: a managed tensor just exported, handed over once.
        unsafe { DlpackTensor::from_versioned(export_versioned(t.clone(), 0)) }.unwrap()
    };
    let feeds = [import(&x)];
    let results: Vec<DlpackTensor> = outs.iter().map(import).collect();
    let (feed_ptrs, device) =
        DlpackTensor::cuda_pointers(&feeds.iter().collect::<Vec<_>>()).unwrap();
    let (out_ptrs, out_device) =
        DlpackTensor::cuda_pointers(&results.iter().collect::<Vec<_>>()).unwrap();
    assert_eq!((device, out_device), (Some(0), Some(0)));
    let gpu = Gpu::new(0);
    let stream = gpu.stream();
    let call = StreamCall::new(0, stream);
    // SAFETY: the DLPack tensors hold the bound types on device 0 and live past the sync.
    unsafe { cuda.run_on_stream(&binding, &feed_ptrs, &out_ptrs, &call) }
        .unwrap_or_else(|e| panic!("{e}"));
    gpu.sync(stream);
    let got: Vec<Vec<f32>> = outs
        .iter()
        .map(|t| t.to_host().unwrap().as_slice::<f32>().unwrap().to_vec())
        .collect();
    check(&got, &reference(&program, 4, &xs), "from DLPack");
    say("dlpack_tensors_run_in_place: ran on the GPU");
}

/// The test captures a call into its own CUDA graph (global capture mode, as
/// `torch.cuda.graph`), then replays it with new values written into the same input buffer:
/// each replay gives the interpreter's values. A program's first call on a device, captured,
/// is refused clearly and queues nothing.
#[test]
fn a_captured_call_replays_with_new_inputs() {
    let _serial = serial();
    if gpus("a_captured_call_replays") == 0 {
        return;
    }
    let program = program(false);
    let cuda = LoadedProgram::new(program.clone(), &options(Options::cuda())).unwrap();
    let binding = cuda.bind(&[&[4, FEATURES]]).unwrap();
    let gpu = Gpu::new(0);
    let stream = gpu.stream();
    let x = gpu.upload(&features(4, 1));
    let outs = gpu.outputs(&binding);
    let call = StreamCall::new(0, stream);
    // A warm-up call (loads, uploads the constants, creates cuBLAS' handle), as before a capture.
    // SAFETY: buffers of the bound types, kept for the test.
    unsafe { cuda.run_on_stream(&binding, &[x], &outs, &call) }.unwrap();
    gpu.sync(stream);
    let cu = stream as sys::CUstream;
    let capture = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL;
    // SAFETY: the test's stream, idle.
    unsafe { result::stream::begin_capture(cu, capture) }.unwrap();
    // SAFETY: as above; recorded, not run.
    let captured = unsafe { cuda.run_on_stream(&binding, &[x], &outs, &call) };
    // SAFETY: the capture begun above.
    let graph = unsafe { result::stream::end_capture(cu) }.unwrap();
    captured.unwrap_or_else(|e| panic!("{e}"));
    assert!(!graph.is_null(), "the call recorded work");
    // SAFETY: the graph just captured.
    let exec =
        unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) }.unwrap();
    for round in 2..5 {
        let xs = features(4, round);
        gpu.write(x, &xs);
        // SAFETY: an instantiated graph of this context, on its stream.
        unsafe { result::graph::launch(exec, cu) }.unwrap();
        gpu.sync(stream);
        let what = format!("replay {round}");
        check(
            &read_outputs(&gpu, &binding, &outs),
            &reference(&program, 4, &xs),
            &what,
        );
    }
    cuda.check_faults().unwrap();

    // A fresh program's first call on the device, captured: refused (it would upload).
    let fresh = LoadedProgram::new(program.clone(), &options(Options::cuda())).unwrap();
    // SAFETY: the stream is idle.
    unsafe { result::stream::begin_capture(cu, capture) }.unwrap();
    // SAFETY: refused before anything is queued.
    let refused = unsafe { fresh.run_on_stream(&binding, &[x], &outs, &call) };
    // SAFETY: the capture begun above (nothing recorded: the graph may be empty).
    let _ = unsafe { result::stream::end_capture(cu) };
    let err = refused.unwrap_err().to_string();
    assert!(
        err.contains("capturing a CUDA graph") && err.contains("warm-up"),
        "{err}"
    );
    // After the capture, the same call works.
    // SAFETY: buffers of the bound types.
    unsafe { fresh.run_on_stream(&binding, &[x], &outs, &call) }.unwrap();
    gpu.sync(stream);

    // A program prepared for the device: its very first call can be captured.
    let prepared = LoadedProgram::new(program.clone(), &options(Options::cuda())).unwrap();
    prepared.prepare_device(&binding, &call).unwrap();
    // SAFETY: the stream is idle.
    unsafe { result::stream::begin_capture(cu, capture) }.unwrap();
    // SAFETY: buffers of the bound types; recorded, not run.
    let captured = unsafe { prepared.run_on_stream(&binding, &[x], &outs, &call) };
    // SAFETY: the capture begun above.
    let graph = unsafe { result::stream::end_capture(cu) }.unwrap();
    captured.unwrap_or_else(|e| panic!("{e}"));
    // SAFETY: the graph just captured.
    let exec =
        unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) }.unwrap();
    let xs = features(4, 11);
    gpu.write(x, &xs);
    // SAFETY: an instantiated graph of this context, on its stream.
    unsafe { result::graph::launch(exec, cu) }.unwrap();
    gpu.sync(stream);
    let want = reference(&program, 4, &xs);
    check(
        &read_outputs(&gpu, &binding, &outs),
        &want,
        "a prepared program's first call",
    );
    say("a_captured_call_replays: ran on the GPU");
}

static GATE: AtomicBool = AtomicBool::new(false);

unsafe extern "C" fn hold(_: *mut c_void) {
    while !GATE.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The stream is held by a host function queued before the call (until the test opens the
/// gate): the call returns while it holds (so it waited for nothing), its work is still
/// pending (an event recorded after it is not reached), and once the gate opens the values
/// are right.
#[test]
fn a_call_returns_without_waiting_for_the_stream() {
    let _serial = serial();
    if gpus("a_call_returns_without_waiting") == 0 {
        return;
    }
    let program = program(false);
    let cuda = LoadedProgram::new(program.clone(), &options(Options::cuda())).unwrap();
    let binding = cuda.bind(&[&[4, FEATURES]]).unwrap();
    let gpu = Gpu::new(0);
    let stream = gpu.stream();
    let xs = features(4, 7);
    let x = gpu.upload(&xs);
    let outs = gpu.outputs(&binding);
    let call = StreamCall::new(0, stream);
    // Warm-up: the first call may upload constants (it waits for that copy only).
    // SAFETY: buffers of the bound types.
    unsafe { cuda.run_on_stream(&binding, &[x], &outs, &call) }.unwrap();
    gpu.sync(stream);
    for &o in &outs {
        gpu.write(o, &[0f32; 32]);
    }
    GATE.store(false, Ordering::Release);
    let cu = stream as sys::CUstream;
    // SAFETY: a host function that only reads a static.
    let r = unsafe { sys::cuLaunchHostFunc(cu, Some(hold), std::ptr::null_mut()) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    // Opens the gate after 20 s whatever happens, so that a call that waits fails, not hangs.
    let watchdog = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(20));
        GATE.store(true, Ordering::Release);
    });
    let started = Instant::now();
    // SAFETY: buffers of the bound types, kept until synchronized.
    unsafe { cuda.run_on_stream(&binding, &[x], &outs, &call) }.unwrap();
    let took = started.elapsed();
    let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).unwrap();
    // SAFETY: an event and a stream of the current context.
    unsafe { result::event::record(event, cu) }.unwrap();
    // SAFETY: as above.
    let pending = unsafe { result::event::query(event) };
    let held = !GATE.load(Ordering::Acquire);
    GATE.store(true, Ordering::Release);
    gpu.sync(stream);
    assert!(
        held && took < Duration::from_secs(10),
        "the call waited {took:?}"
    );
    assert!(
        pending.is_err(),
        "the call's work ran before the gate opened"
    );
    check(
        &read_outputs(&gpu, &binding, &outs),
        &reference(&program, 4, &xs),
        "behind the gate",
    );
    drop(watchdog);
    say("a_call_returns_without_waiting: ran on the GPU");
}

/// A bad index: the call itself succeeds (it waits for nothing); the fault is reported by
/// `check_faults` once the stream ran, naming the operator and the index, once; a second fault
/// is reported by the next call, which then queues nothing; the call after works.
#[test]
fn faults_surface_at_the_next_call_or_check() {
    let _serial = serial();
    if gpus("faults_surface_at_the_next_call") == 0 {
        return;
    }
    let cuda = LoadedProgram::new(gathering(), &options(Options::cuda())).unwrap();
    let binding = cuda.bind(&[&[4], &[3]]).unwrap();
    let gpu = Gpu::new(0);
    let stream = gpu.stream();
    let x = gpu.upload(&[1.0f32, 2.0, 3.0, 4.0]);
    let good = gpu.upload(&[3i32, 1, 0]);
    let bad = gpu.upload(&[3i32, 7, 0]);
    let out = gpu.alloc(12);
    let call = StreamCall::new(0, stream);
    let run = |idx: u64| {
        // SAFETY: buffers of the bound types, kept for the test.
        unsafe { cuda.run_on_stream(&binding, &[x, idx], &[out], &call) }
    };
    run(good).unwrap();
    run(bad).unwrap();
    gpu.sync(stream);
    let err = cuda.check_faults().unwrap_err().to_string();
    assert!(err.contains("gather") && err.contains("index 7"), "{err}");
    cuda.check_faults().unwrap();
    run(bad).unwrap();
    gpu.sync(stream);
    let err = run(good).unwrap_err().to_string();
    assert!(err.contains("index 7"), "the next call reports it: {err}");
    gpu.write(out, &[0f32; 3]);
    run(good).unwrap();
    gpu.sync(stream);
    assert_eq!(gpu.read(out, 3), [4.0, 2.0, 1.0]);
    cuda.check_faults().unwrap();
    say("faults_surface_at_the_next_call: ran on the GPU");
}

/// Two threads call one program on two streams of GPU 0 at once, ten calls each with new
/// inputs (cuBLAS products included: each call's workspace is its own), the address checks
/// off as a framework's op may turn them: every call's outputs are the interpreter's.
#[test]
fn two_streams_at_once_each_get_their_own_values() {
    let _serial = serial();
    if gpus("two_streams_at_once") == 0 {
        return;
    }
    let program = program(false);
    let cuda = LoadedProgram::new(program.clone(), &options(Options::cuda())).unwrap();
    let binding = cuda.bind(&[&[4, FEATURES]]).unwrap();
    std::thread::scope(|scope| {
        for lane in 0..2usize {
            let (cuda, binding, program) = (&cuda, &binding, &program);
            scope.spawn(move || {
                let gpu = Gpu::new(0);
                let stream = gpu.stream();
                let call = StreamCall::new(0, stream).without_pointer_checks();
                let runs: Vec<(Vec<f32>, Vec<u64>)> = (0..10)
                    .map(|r| {
                        let xs = features(4, 100 * lane + r);
                        let x = gpu.upload(&xs);
                        let outs = gpu.outputs(binding);
                        // SAFETY: buffers of the bound types on device 0, kept until synchronized.
                        unsafe { cuda.run_on_stream(binding, &[x], &outs, &call) }
                            .unwrap_or_else(|e| panic!("{e}"));
                        (xs, outs)
                    })
                    .collect();
                gpu.sync(stream);
                for (r, (xs, outs)) in runs.iter().enumerate() {
                    let what = format!("stream {lane}, call {r}");
                    check(
                        &read_outputs(&gpu, binding, outs),
                        &reference(program, 4, xs),
                        &what,
                    );
                }
            });
        }
    });
    cuda.check_faults().unwrap();
    say("two_streams_at_once: ran on the GPU");
}
