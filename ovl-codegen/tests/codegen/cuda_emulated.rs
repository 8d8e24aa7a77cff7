//! The generated CUDA, executed without a GPU: the CUDA translation unit is compiled by the host
//! C++ compiler under a small shim that defines the CUDA built-ins it uses (`blockIdx`,
//! `atomicCAS`, `__int_as_float`, ...), and every thread of a small grid is run in turn (in
//! reverse order, so that later workers report faults first). Outputs and fault reports must
//! equal the C++ backend's, bit for bit. This checks the CUDA frame (grid-stride loop, position
//! decomposition, per-thread faults published in worker order) and the CUDA prelude's exact
//! semantics (wrapping, division by zero, saturating casts, literals) on this machine; the GPU's
//! math library is not exercised (the host's is used).

use crate::common;

use common::{compiled, first_negative_dag, nested_walk_dag, zero_outputs, Builder, IN, LOC, OUT};
use ovl_codegen::cuda;
use ovl_codegen::RunError;
use ovl_ir::ir::{ExpressionDag, Op};
use ovl_ir::{DType, HostTensor, Literal};
use ovl_testkit::without_hang;
use std::ffi::c_void;
use std::process::Command;

/// Definitions of the CUDA built-ins the generated code uses, for the host compiler.
const SHIM: &str = r#"#include <math.h>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>
// The CUDA prelude declares its own fixed-width types; keep them apart from the host's.
#define int8_t ovl_int8_t
#define int16_t ovl_int16_t
#define int32_t ovl_int32_t
#define int64_t ovl_int64_t
#define uint8_t ovl_uint8_t
#define uint16_t ovl_uint16_t
#define uint32_t ovl_uint32_t
#define uint64_t ovl_uint64_t
#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
struct ovl_dim3 { unsigned x, y, z; };
static thread_local ovl_dim3 blockIdx, threadIdx;
static ovl_dim3 blockDim, gridDim;
// Cooperative kernels: a block's threads run as real threads (one block at a time, so a
// function-level static is the block's shared memory), meeting at barriers.
#define __shared__ static
#define __launch_bounds__(n)
struct ovl_barrier {
  std::mutex m;
  std::condition_variable cv;
  unsigned n = 0, count = 0, generation = 0;
  void wait() {
    std::unique_lock<std::mutex> l(m);
    const unsigned g = generation;
    if (++count == n) { count = 0; ++generation; cv.notify_all(); }
    else cv.wait(l, [&] { return generation != g; });
  }
};
static ovl_barrier ovl_block_barrier;
static ovl_barrier ovl_warp_barrier[32];
static unsigned long long ovl_warp_slot[32][32];
static inline void __syncthreads() { ovl_block_barrier.wait(); }
// Every lane of the warp takes part (as the generated code guarantees): each publishes its
// value, the warp meets, each reads its source lane's, the warp meets again.
template <class T> static T ovl_exchange(T v, unsigned from) {
  const unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned long long bits = 0;
  __builtin_memcpy(&bits, &v, sizeof v);
  ovl_warp_slot[w][lane] = bits;
  ovl_warp_barrier[w].wait();
  bits = ovl_warp_slot[w][from < 32 ? from : lane];
  ovl_warp_barrier[w].wait();
  T r;
  __builtin_memcpy(&r, &bits, sizeof r);
  return r;
}
template <class T> static T __shfl_down_sync(unsigned, T v, unsigned o) { return ovl_exchange(v, threadIdx.x % 32 + o); }
template <class T> static T __shfl_sync(unsigned, T v, int from) { return ovl_exchange(v, (unsigned)from); }
static inline float __int_as_float(int b) { float f; __builtin_memcpy(&f, &b, 4); return f; }
static inline int __float_as_int(float f) { int b; __builtin_memcpy(&b, &f, 4); return b; }
static inline double __longlong_as_double(long long b) { double f; __builtin_memcpy(&f, &b, 8); return f; }
static inline unsigned atomicCAS(unsigned* p, unsigned c, unsigned v) { unsigned o = *p; if (o == c) *p = v; return o; }
static inline unsigned atomicExch(unsigned* p, unsigned v) { unsigned o = *p; *p = v; return o; }
static inline void __threadfence() {}
"#;

fn ctype(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F64 => "double",
        DType::I8 => "int8_t",
        DType::I16 => "int16_t",
        DType::I32 => "int32_t",
        DType::I64 => "int64_t",
        DType::U8 => "uint8_t",
        DType::U16 => "uint16_t",
        DType::U32 => "uint32_t",
        DType::U64 => "uint64_t",
        DType::Bool => "bool",
        DType::F16 => "ovl::f16",
        DType::BF16 => "ovl::bf16",
    }
}

/// `ovl_cuda_status` of the CUDA prelude.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Status {
    pub code: i32,
    expression: i32,
    tensor_kind: i32,
    tensor_index: i32,
    axis: i32,
    index_signed: i32,
    index_bits: u64,
    size: u64,
    worker: i64,
    step: i64,
    lock: u32,
    pad: u32,
}

type Emulate = unsafe extern "C" fn(
    *const *mut c_void,
    *const *mut c_void,
    *const i64,
    *mut Status,
    u32,
    u32,
    u32,
);

/// The operator's CUDA compiled for the host (the directory holds the library).
pub(crate) struct Emulated {
    _dir: tempfile::TempDir,
    lib: libloading::Library,
}

/// Compiles the operator's CUDA for the host.
pub(crate) fn build(dag: &ExpressionDag) -> Emulated {
    build_with(dag, "")
}

/// [`build`] with `defines` (C preprocessor lines) before the generated code.
fn build_with(dag: &ExpressionDag, defines: &str) -> Emulated {
    let mut src = String::from(defines);
    src.push_str(SHIM);
    src.push_str(&cuda::generate_cuda(dag, "emulated").unwrap_or_else(|e| panic!("{e}")));
    let mut args = Vec::new();
    for (i, t) in dag.inputs.iter().enumerate() {
        let d = DType::from_ir(t.dtype).expect("dtype");
        args.push(format!("(const {}*)in[{i}]", ctype(d)));
    }
    for (i, t) in dag.outputs.iter().enumerate() {
        let d = DType::from_ir(t.dtype).expect("dtype");
        args.push(format!("({}*)out[{i}]", ctype(d)));
    }
    for k in 0..dag.symbol_count {
        args.push(format!("sym[{k}]"));
    }
    args.push("st".into());
    // `together`: each block's threads run at once (a cooperative kernel), else one by one
    // in reverse order.
    let call = format!("ovl_kernel({});", args.join(", "));
    src.push_str(&format!(
        "extern \"C\" void ovl_emulate(void* const* in, void* const* out, const long long* sym, \
         ovl_cuda_status* st, unsigned grid, unsigned block, unsigned together) {{\n  (void)in; \
         (void)out; (void)sym;\n  gridDim.x = grid; blockDim.x = block;\n  \
         ovl_block_barrier.n = block;\n  for (auto& w : ovl_warp_barrier) w.n = 32;\n  \
         for (int b = (int)grid - 1; b >= 0; --b) {{\n    if (together) {{\n      \
         std::vector<std::thread> threads;\n      for (unsigned t = 0; t < block; ++t)\n        \
         threads.emplace_back([=] {{ blockIdx.x = b; threadIdx.x = t; {call} }});\n      \
         for (auto& t : threads) t.join();\n      continue;\n    }}\n    \
         for (int t = (int)block - 1; t >= 0; --t) {{\n      blockIdx.x = b; threadIdx.x = t;\n      \
         {call}\n    }}\n  }}\n}}\n"
    ));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let cpp = dir.path().join("emulated.cpp");
    let lib = dir.path().join("emulated.so");
    std::fs::write(&cpp, &src).expect("write");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = Command::new(&cxx)
        .args([
            "-std=c++17",
            "-O1",
            "-shared",
            "-fPIC",
            "-ffp-contract=off",
            "-pthread",
            "-w",
            "-o",
        ])
        .arg(&lib)
        .arg(&cpp)
        .arg("-lm")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cxx}: {e}"));
    assert!(
        out.status.success(),
        "the host compiler rejected the emulated CUDA:\n{}\n{src}",
        String::from_utf8_lossy(&out.stderr)
    );
    // SAFETY: the library was just built from generated code; it has no initializers.
    let lib = unsafe { libloading::Library::new(&lib) }.expect("load");
    Emulated { _dir: dir, lib }
}

/// Runs the emulated kernel on `grid` blocks of `block` threads (`dag`: the operator
/// specialised for `symbols`).
fn emulate(
    emulated: &Emulated,
    dag: &ExpressionDag,
    inputs: &[&HostTensor],
    symbols: &[i64],
    grid: u32,
    block: u32,
) -> (Vec<HostTensor>, Status) {
    emulate_launch(emulated, dag, inputs, symbols, grid, block, false)
}

/// [`emulate`], with each block's threads running at once when `together` (a cooperative
/// kernel needs it: its threads meet at barriers and shuffles).
pub(crate) fn emulate_launch(
    emulated: &Emulated,
    dag: &ExpressionDag,
    inputs: &[&HostTensor],
    symbols: &[i64],
    grid: u32,
    block: u32,
    together: bool,
) -> (Vec<HostTensor>, Status) {
    let mut outputs = zero_outputs(dag);
    let ins: Vec<*mut c_void> = inputs
        .iter()
        .map(|t| t.data.as_ptr() as *mut c_void)
        .collect();
    let outs: Vec<*mut c_void> = outputs
        .iter_mut()
        .map(|t| t.data.as_mut_ptr() as *mut c_void)
        .collect();
    let status = call(emulated, &ins, &outs, symbols, grid, block, together);
    (outputs, status)
}

/// Calls the emulated kernel's entry point on tensors at `ins` and `outs` (each holding its
/// tensor's bytes); returns the fault status.
fn call(
    emulated: &Emulated,
    ins: &[*mut c_void],
    outs: &[*mut c_void],
    symbols: &[i64],
    grid: u32,
    block: u32,
    together: bool,
) -> Status {
    let mut status = Status::default();
    // SAFETY: the entry point is the one `build` wrote; the pointers match the operator's
    // declared tensors (the tests pass tensors of those types).
    unsafe {
        let f = *emulated
            .lib
            .get::<Emulate>(b"ovl_emulate\0")
            .expect("symbol");
        f(
            ins.as_ptr(),
            outs.as_ptr(),
            symbols.as_ptr(),
            &mut status,
            grid,
            block,
            together as u32,
        );
    }
    assert_eq!(status.lock, 0, "the status lock was released");
    status
}

fn position(workgroup: &[u64], worker: i64) -> Vec<u64> {
    let mut rest = worker as u64;
    let mut p = vec![0; workgroup.len()];
    for a in (0..p.len()).rev() {
        p[a] = rest % workgroup[a];
        rest /= workgroup[a];
    }
    p
}

/// The emulated CUDA agrees with the C++ backend: outputs bit for bit (a faulting worker
/// stops at its fault on both), and the same fault.
pub(crate) fn same_as_cpp(dag: &ExpressionDag, inputs: &[&HostTensor]) {
    let emulated = build(dag);
    same_as_cpp_with(&emulated, dag, inputs, &[]);
}

/// [`same_as_cpp`] for an operator with sizes given at run time, run with the values
/// `symbols` (`emulated`: the operator's CUDA built for the host).
fn same_as_cpp_with(
    emulated: &Emulated,
    symbolic: &ExpressionDag,
    inputs: &[&HostTensor],
    symbols: &[u64],
) {
    let (op, _cache) = compiled(symbolic);
    let concrete = ovl_ir::symbolic::specialize_operator(symbolic, symbols).unwrap();
    let dag = &concrete;
    let mut cpp_out = zero_outputs(dag);
    let expected = op.run(inputs, &mut cpp_out, symbols, 1);
    let values: Vec<i64> = symbols.iter().map(|&v| v as i64).collect();
    for (grid, block) in [(1, 1), (3, 4), (2, 32)] {
        let (got, st) = emulate(emulated, dag, inputs, &values, grid, block);
        let what = format!("{} with grid {grid} x block {block}", dag.name);
        for (k, (g, e)) in got.iter().zip(&cpp_out).enumerate() {
            assert_eq!(common::bits(g), common::bits(e), "{what}: output {k}");
        }
        match &expected {
            Ok(()) => {
                assert_eq!(st.code, 0, "{what}: unexpected fault {st:?}");
            }
            Err(RunError::IndexOutOfBounds(oob)) => {
                assert_eq!(st.code, 1, "{what}: {st:?}");
                assert_eq!(st.expression as usize, oob.expression, "{what}");
                assert_eq!(st.axis as usize, oob.axis, "{what}");
                assert_eq!(st.size, oob.size, "{what}");
                let index = if st.index_signed != 0 {
                    st.index_bits as i64 as i128
                } else {
                    st.index_bits as i128
                };
                assert_eq!(index, oob.index, "{what}");
                assert_eq!(
                    position(&dag.workgroup_shape, st.worker),
                    oob.position,
                    "{what}"
                );
            }
            Err(RunError::NonPositiveStep(fault)) => {
                assert_eq!(st.code, 2, "{what}: {st:?}");
                assert_eq!(st.expression as usize, fault.expression, "{what}");
                assert_eq!(st.step, fault.step, "{what}");
                assert_eq!(
                    position(&dag.workgroup_shape, st.worker),
                    fault.position,
                    "{what}"
                );
            }
            Err(e) => panic!("{what}: unexpected C++ error {e}"),
        }
    }
}

#[test]
fn symbolic_fixtures_at_several_sizes() {
    // One CUDA translation unit per fixture, run with several symbol values (0: no worker).
    for f in ovl_ir::fixtures::symbolic() {
        let emulated = build(&f.dag);
        for n in [0u64, 1, 2, 7, 40] {
            let symbols: Vec<u64> = (0..f.dag.symbol_count as u64)
                .map(|k| if k == 0 { n } else { n % 3 + k })
                .collect();
            let inputs = (f.inputs)(&symbols);
            let refs: Vec<&HostTensor> = inputs.iter().collect();
            same_as_cpp_with(&emulated, &f.dag, &refs, &symbols);
        }
    }
}

#[test]
fn three_d_positions() {
    let shape = [3u64, 5, 7];
    let mut b = Builder::new("positions", &shape);
    b.output(DType::I64, &shape);
    let i = b.position(0);
    let j = b.position(1);
    let k = b.position(2);
    let m = b.i64(1_000_000);
    let t = b.i64(1000);
    let a = b.op(Op::Mul, &[i, m]);
    let bb = b.op(Op::Mul, &[j, t]);
    let s = b.op(Op::Add, &[a, bb]);
    let s = b.op(Op::Add, &[s, k]);
    b.write(OUT, 0, &[i, j, k], s);
    same_as_cpp(&b.build(), &[]);
}

#[test]
fn faults_are_reported_for_the_first_worker() {
    // out[i] = x[idx[i]]: workers 1 and 3 read out of bounds; worker 1's fault is reported.
    let mut b = Builder::new("gather", &[5]);
    b.input(DType::F32, &[4]);
    b.input(DType::I32, &[5]);
    b.output(DType::F32, &[5]);
    let i = b.position(0);
    let k = b.read(IN, 1, &[i]);
    let v = b.read(IN, 0, &[k]);
    b.write(OUT, 0, &[i], v);
    let dag = b.build();
    let x = HostTensor::from_vec(&[4], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let idx = HostTensor::from_vec(&[5], vec![3i32, 7, 0, -1, 2]).unwrap();
    same_as_cpp(&dag, &[&x, &idx]);
    let ok = HostTensor::from_vec(&[5], vec![3i32, 1, 0, 2, 2]).unwrap();
    same_as_cpp(&dag, &[&x, &ok]);

    // A runtime range step: 0 at worker 2, -1 at worker 3.
    let mut b = Builder::new("runtime_step", &[4]);
    b.input(DType::I64, &[4]);
    b.output(DType::I64, &[4]);
    let i = b.position(0);
    let zero = b.i64(0);
    let ten = b.i64(10);
    let step = b.read(IN, 0, &[i]);
    let acc = b.var(zero);
    let k = b.range(zero, ten, step);
    let s = b.op(Op::Add, &[acc, k]);
    b.assign(acc, s);
    b.end_range();
    b.write(OUT, 0, &[i], acc);
    let steps = HostTensor::from_vec(&[4], vec![3i64, 5, 0, -1]).unwrap();
    same_as_cpp(&b.build(), &[&steps]);
}

/// Every pair of `edges` through each of `ops` (one output per operation).
fn pairs<T: ovl_ir::Scalar>(ops: &[Op], edges: &[T]) {
    let n = edges.len() * edges.len();
    let mut b = Builder::new("pairs", &[n as u64]);
    b.input(T::DTYPE, &[n as u64]);
    b.input(T::DTYPE, &[n as u64]);
    for op in ops {
        let out = if matches!(op, Op::Lt | Op::Eq) {
            DType::Bool
        } else {
            T::DTYPE
        };
        b.output(out, &[n as u64]);
    }
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let y = b.read(IN, 1, &[i]);
    for (k, &op) in ops.iter().enumerate() {
        let z = b.op(op, &[x, y]);
        b.write(OUT, k as u32, &[i], z);
    }
    let a: Vec<T> = edges
        .iter()
        .flat_map(|&x| edges.iter().map(move |_| x))
        .collect();
    let c: Vec<T> = edges.iter().flat_map(|_| edges.iter().copied()).collect();
    let a = HostTensor::from_vec(&[n], a).unwrap();
    let c = HostTensor::from_vec(&[n], c).unwrap();
    same_as_cpp(&b.build(), &[&a, &c]);
}

#[test]
fn integer_and_float_arithmetic_edges() {
    let i8s = vec![0i8, 1, -1, 2, -7, 100, i8::MIN, i8::MAX];
    let i64s = vec![0i64, 1, -1, 3, -3, i64::MIN, i64::MAX, i64::MIN + 1];
    let u16s = vec![0u16, 1, 2, 7, u16::MAX, u16::MAX - 1];
    let f32s = vec![
        0.0f32,
        -0.0,
        1.5,
        -3.25,
        f32::MIN_POSITIVE / 4.0,
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let ops = [
        Op::Add,
        Op::Sub,
        Op::Mul,
        Op::Div,
        Op::Mod,
        Op::Min,
        Op::Max,
        Op::Lt,
        Op::Eq,
    ];
    pairs(&ops, &i8s);
    pairs(&ops, &i64s);
    pairs(&ops, &u16s);
    pairs(&ops, &f32s);
}

#[test]
fn casts_literals_locals_and_loops() {
    // Float to integer casts saturate, NaN gives 0.
    let xs: Vec<f64> = vec![
        0.0,
        -0.0,
        0.99,
        -0.99,
        127.5,
        -128.9,
        255.9,
        1e10,
        -1e10,
        9.3e18,
        1.9e19,
        -9.3e18,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    let n = xs.len() as u64;
    let tos = [
        DType::I8,
        DType::U8,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
        DType::F32,
        DType::Bool,
    ];
    let mut b = Builder::new("casts", &[n]);
    b.input(DType::F64, &[n]);
    for &to in &tos {
        b.output(to, &[n]);
    }
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    for (k, &to) in tos.iter().enumerate() {
        let c = b.cast(x, to);
        b.write(OUT, k as u32, &[i], c);
    }
    let input = HostTensor::from_vec(&[n as usize], xs).unwrap();
    same_as_cpp(&b.build(), &[&input]);

    // Literals of every dtype, a local tensor filled by some workers only, a while loop.
    let mut b = Builder::new("literals", &[6]);
    b.output(DType::F32, &[6]);
    b.output(DType::F64, &[6]);
    b.output(DType::I64, &[6]);
    let i = b.position(0);
    // The fill runs only in workers 0..3: the others read the per-worker zeroed local.
    let loc = b.declare_local(DType::I64, &[6]);
    let three = b.i64(3);
    let low = b.op(Op::Lt, &[i, three]);
    b.if_(low);
    b.local_fill(loc, Literal::Int(3));
    b.end_if();
    let before = b.read(LOC, loc, &[i]);
    let inf32 = b.f32(f32::NEG_INFINITY);
    let nan64 = b.f64(f64::NAN);
    let inf64 = b.f64(f64::INFINITY);
    let z = b.op(Op::Add, &[inf64, nan64]);
    let mut acc = b.var(before);
    for (d, v) in [
        (DType::I8, Literal::Int(i8::MIN as i64)),
        (DType::I32, Literal::Int(i32::MIN as i64)),
        (DType::I64, Literal::Int(i64::MIN)),
        (DType::U16, Literal::Int(u16::MAX as i64)),
        (DType::U64, Literal::UInt(u64::MAX)),
    ] {
        let c = b.constant(d, v);
        let c = b.cast(c, DType::I64);
        let s = b.op(Op::Add, &[acc, c]);
        acc = b.var(s);
    }
    b.while_begin();
    let lim = b.i64(50);
    let c = b.op(Op::Lt, &[acc, lim]);
    b.while_cond(c);
    let r = b.read(LOC, loc, &[i]);
    let s = b.op(Op::Add, &[acc, r]);
    let pi = b.op(Op::Add, &[s, i]);
    b.assign(acc, pi);
    b.while_end();
    b.write(OUT, 0, &[i], inf32);
    b.write(OUT, 1, &[i], z);
    b.write(OUT, 2, &[i], acc);
    same_as_cpp(&b.build(), &[]);
}

#[test]
fn a_fault_ends_its_worker_and_its_loops() {
    // The issue's first_negative: rows 1 and 3 walk past their end; without a stop at the
    // fault their while loop never ends. Row 1's fault is reported on every grid.
    let x = HostTensor::from_vec(
        &[4, 4],
        vec![
            1.0f32, 2.0, -1.0, 3.0, 1.0, 2.0, 3.0, 4.0, -5.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0,
        ],
    )
    .unwrap();
    without_hang("the emulated first_negative", move || {
        same_as_cpp(&first_negative_dag(4, 4), &[&x])
    });
    let x = HostTensor::from_vec(&[1, 3], vec![1.0f32, 2.0, 3.0]).unwrap();
    without_hang("the emulated reproducer", move || {
        same_as_cpp(&first_negative_dag(1, 3), &[&x])
    });
    // A fault inside a while loop inside two range loops (row 2, then row 4).
    let rows: Vec<f32> = [
        [-1.0f32, 2.0, -3.0, 4.0, 5.0, -6.0, 7.0, -1.0],
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -1.0],
        [-1.0, 2.0, -3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
        [-1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0],
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    ]
    .concat();
    let x = HostTensor::from_vec(&[5, 8], rows).unwrap();
    without_hang("the emulated nested walk", move || {
        same_as_cpp(&nested_walk_dag(5, 8), &[&x])
    });
}

#[test]
fn a_while_loop_past_its_bound_faults_as_on_the_interpreter() {
    // Collatz steps of 1..=16; with a bound of 5 iterations, 3 (7 steps) is the first worker
    // in row-major order whose loop reaches it.
    let dag = ovl_ir::fixtures::collatz(16);
    let x = HostTensor::from_vec(&[16], (1..=16u64).collect()).unwrap();
    let mut out = zero_outputs(&dag);
    let options = ovl_core::interp::InterpOptions {
        threads: Some(1),
        max_while_iterations: 5,
        ..Default::default()
    };
    let Err(ovl_core::interp::InterpError::WhileLimit(fault)) =
        ovl_core::interp::interpret_with(&dag, &[&x], &mut out, &options)
    else {
        panic!("the interpreter did not stop the loop")
    };
    let ovl_ir::WhileLimit {
        expression,
        limit,
        position: expected,
        ..
    } = *fault;
    assert_eq!((limit, expected.as_slice()), (5, &[2u64][..]));
    let emulated = build_with(&dag, "#define OVL_WHILE_LIMIT 5ULL\n");
    for (grid, block) in [(1, 1), (3, 4), (2, 32)] {
        let (_, st) = emulate(&emulated, &dag, &[&x], &[], grid, block);
        let what = format!("grid {grid} x block {block}");
        assert_eq!(st.code, 3, "{what}: {st:?}");
        assert_eq!((st.expression as usize, st.size), (expression, 5), "{what}");
        assert_eq!(
            position(&dag.workgroup_shape, st.worker),
            expected,
            "{what}"
        );
    }
}

/// Runs the emulated kernel with every tensor at `offset` bytes past a 16-byte boundary (0:
/// aligned, so a kernel with vector lanes takes them; 4: not, so it runs one worker per thread).
fn emulate_at_offset(
    emulated: &Emulated,
    dag: &ExpressionDag,
    inputs: &[&HostTensor],
    offset: usize,
    grid: u32,
    block: u32,
) -> Vec<HostTensor> {
    // u128 buffers are 16-byte aligned; each tensor's bytes start `offset` bytes in.
    let place = |bytes: &[u8]| -> Vec<u128> {
        let mut buf = vec![0u128; (bytes.len() + offset).div_ceil(16) + 1];
        // SAFETY: the buffer holds at least `offset + bytes.len()` bytes.
        unsafe {
            let dst = (buf.as_mut_ptr() as *mut u8).add(offset);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len());
        }
        buf
    };
    let raw = |t: &HostTensor| -> Vec<u8> {
        let n = t.data.len() * t.dtype().size();
        // SAFETY: the tensor's data holds `n` bytes.
        unsafe { std::slice::from_raw_parts(t.data.as_ptr(), n) }.to_vec()
    };
    let mut ins: Vec<Vec<u128>> = inputs.iter().map(|t| place(&raw(t))).collect();
    let mut outputs = zero_outputs(dag);
    let mut outs: Vec<Vec<u128>> = outputs.iter().map(|t| place(&raw(t))).collect();
    // SAFETY: `offset` is inside every placed buffer (the test's layout).
    let at = |b: &mut Vec<u128>| unsafe { (b.as_mut_ptr() as *mut u8).add(offset) as *mut c_void };
    let in_ptrs: Vec<*mut c_void> = ins.iter_mut().map(at).collect();
    let out_ptrs: Vec<*mut c_void> = outs.iter_mut().map(at).collect();
    let status = call(emulated, &in_ptrs, &out_ptrs, &[], grid, block, false);
    assert_eq!(status.code, 0, "{}: unexpected fault {status:?}", dag.name);
    for (t, b) in outputs.iter_mut().zip(&outs) {
        let n = t.data.len() * t.dtype().size();
        // SAFETY: both hold `n` bytes from where they are read and written.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (b.as_ptr() as *const u8).add(offset),
                t.data.as_mut_ptr(),
                n,
            )
        };
    }
    outputs
}

/// The LSTM cell's forward pass on `[rows, h]` workers: four gates read from `z[rows, 4h]`
/// at `[r, k + g h]`, the old cell at `[r, k]`, two outputs at `[r, k]`.
fn lstm_cell_dag(rows: u64, h: u64) -> ExpressionDag {
    let mut b = Builder::new("lstm_lanes", &[rows, h]);
    b.input(DType::F32, &[rows, 4 * h]);
    b.input(DType::F32, &[rows, h]);
    b.output(DType::F32, &[rows, h]);
    b.output(DType::F32, &[rows, h]);
    let r = b.position(0);
    let k = b.position(1);
    let gate = |b: &mut Builder, g: i64, op: Op| {
        let off = b.i64(g * h as i64);
        let col = b.op(Op::Add, &[k, off]);
        let v = b.read(IN, 0, &[r, col]);
        b.op(op, &[v])
    };
    let i = gate(&mut b, 0, Op::Sigmoid);
    let j = gate(&mut b, 1, Op::Tanh);
    let f = gate(&mut b, 2, Op::Sigmoid);
    let o = gate(&mut b, 3, Op::Sigmoid);
    let c = b.read(IN, 1, &[r, k]);
    let fc = b.op(Op::Mul, &[f, c]);
    let ij = b.op(Op::Mul, &[i, j]);
    let nc = b.op(Op::Add, &[fc, ij]);
    b.write(OUT, 0, &[r, k], nc);
    let t = b.op(Op::Tanh, &[nc]);
    let nh = b.op(Op::Mul, &[o, t]);
    b.write(OUT, 1, &[r, k], nh);
    b.build()
}

#[test]
fn vector_lanes_compute_what_one_worker_per_thread_computes() {
    // Values in [-2, 2), a fixed sequence per seed.
    let random = |shape: &[usize], seed: u64| {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0) as f32
            })
            .collect();
        HostTensor::from_vec(shape, v).unwrap()
    };
    // Eligible: the LSTM cell (every access a vector), and an operator mixing vector accesses
    // with ones that stay scalar: a broadcast read (the same element for 4 workers), a
    // transposed read, an i32 read and write, an output written twice at one index and one
    // written at two offsets.
    let cell = lstm_cell_dag(3, 8);
    let mut b = Builder::new("mixed_lanes", &[4, 8]);
    b.input(DType::F32, &[4, 8]);
    b.input(DType::F32, &[4]);
    b.input(DType::F32, &[8, 4]);
    b.input(DType::I32, &[4, 8]);
    b.output(DType::F32, &[4, 8]);
    b.output(DType::I32, &[4, 8]);
    b.output(DType::F32, &[4, 16]);
    let (r, k) = (b.position(0), b.position(1));
    let x = b.read(IN, 0, &[r, k]);
    let row = b.read(IN, 1, &[r]);
    let tr = b.read(IN, 2, &[k, r]);
    let n = b.read(IN, 3, &[r, k]);
    let s = b.op(Op::Add, &[x, row]);
    b.write(OUT, 0, &[r, k], s);
    let s2 = b.op(Op::Mul, &[s, tr]);
    b.write(OUT, 0, &[r, k], s2);
    let three = b.i32(3);
    let m = b.op(Op::Mul, &[n, three]);
    b.write(OUT, 1, &[r, k], m);
    // Two halves of one output, as a gradient writes its gates.
    let eight = b.i64(8);
    let k8 = b.op(Op::Add, &[k, eight]);
    b.write(OUT, 2, &[r, k8], x);
    b.write(OUT, 2, &[r, k], s2);
    let mixed = b.build();

    let source = |dag: &ExpressionDag| cuda::generate_cuda(dag, "lanes").expect("CUDA source");
    let cell_src = source(&cell);
    assert_eq!(cell_src.matches("ovl::ld4(").count(), 5, "{cell_src}");
    assert_eq!(cell_src.matches("ovl::st4(").count(), 2, "{cell_src}");
    let mixed_src = source(&mixed);
    // x and n by vectors; the broadcast and the transposed read stay scalar.
    assert_eq!(mixed_src.matches("ovl::ld4(").count(), 2, "{mixed_src}");
    assert!(mixed_src.contains("ovl::ld4(&in0[") && mixed_src.contains("ovl::ld4(&in3["));
    assert_eq!(mixed_src.matches("ovl::st4(").count(), 5, "{mixed_src}");

    let z = random(&[3, 32], 1);
    let c = random(&[3, 8], 2);
    let x = random(&[4, 8], 3);
    let row = random(&[4], 4);
    let tr = random(&[8, 4], 5);
    let n =
        HostTensor::from_vec(&[4, 8], (0..32).map(|v| v * 7 - 100).collect::<Vec<i32>>()).unwrap();
    for (dag, inputs) in [(&cell, vec![&z, &c]), (&mixed, vec![&x, &row, &tr, &n])] {
        let emulated = build(dag);
        // One worker per thread (the tensors misaligned) is the reference; for the operator
        // without math functions it equals the C++ backend too (the host's libm and the C++
        // prelude's f32 tanh and sigmoid differ by an ulp: `ovl_ir::accuracy`).
        let want = emulate_at_offset(&emulated, dag, &inputs, 4, 1, 1);
        if dag.name == "mixed_lanes" {
            let (op, _cache) = compiled(dag);
            let mut cpp = zero_outputs(dag);
            op.run(&inputs, &mut cpp, &[], 1)
                .expect("the C++ backend runs it");
            for (k, (g, w)) in want.iter().zip(&cpp).enumerate() {
                assert_eq!(common::bits(g), common::bits(w), "{}: output {k}", dag.name);
            }
        }
        for offset in [0, 4] {
            for (grid, block) in [(1, 1), (3, 2), (2, 32)] {
                let got = emulate_at_offset(&emulated, dag, &inputs, offset, grid, block);
                for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(
                        common::bits(g),
                        common::bits(w),
                        "{} at offset {offset}, grid {grid} x block {block}: output {k}",
                        dag.name
                    );
                }
            }
        }
    }
}

#[test]
fn vector_lanes_are_not_used_where_a_lane_could_differ() {
    // An output also written inside a branch, a loop's reads, an innermost extent 4 does not
    // divide, and a kernel with a fault check keep one worker per thread.
    let mut b = Builder::new("branchy", &[8]);
    b.input(DType::F32, &[8]);
    b.output(DType::F32, &[8]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    b.write(OUT, 0, &[i], x);
    let zero = b.f32(0.0);
    let neg = b.op(Op::Lt, &[x, zero]);
    b.if_(neg);
    b.write(OUT, 0, &[i], zero);
    b.end_if();
    let branchy = b.build();
    let src = cuda::generate_cuda(&branchy, "lanes").expect("CUDA source");
    // The read is a vector; the output, written in a branch too, is not.
    assert_eq!(src.matches("ovl::ld4(").count(), 1, "{src}");
    assert_eq!(src.matches("ovl::st4(").count(), 0, "{src}");

    let odd = lstm_cell_dag(2, 6);
    let src = cuda::generate_cuda(&odd, "lanes").expect("CUDA source");
    assert!(!src.contains("ovl::ld4("), "{src}");

    let mut b = Builder::new("gather_lanes", &[8]);
    b.input(DType::F32, &[8]);
    b.input(DType::I32, &[8]);
    b.output(DType::F32, &[8]);
    let i = b.position(0);
    let k = b.read(IN, 1, &[i]);
    let v = b.read(IN, 0, &[k]);
    b.write(OUT, 0, &[i], v);
    let src = cuda::generate_cuda(&b.build(), "lanes").expect("CUDA source");
    assert!(!src.contains("ovl::ld4("), "{src}");
}

/// An operator too large for lanes (over 1,024 expressions: a recurrent layer's steps side by
/// side) is written once, one worker per thread, not once more per lane (five times in all);
/// the same program with fewer expressions keeps its vector lanes.
#[test]
fn a_very_large_operator_gets_no_vector_lanes() {
    let chain = |ops: usize| {
        let mut b = Builder::new("long_chain", &[4, 64]);
        b.input(DType::F32, &[4, 64]);
        b.output(DType::F32, &[4, 64]);
        let (r, k) = (b.position(0), b.position(1));
        let mut v = b.read(IN, 0, &[r, k]);
        for i in 0..ops {
            let c = b.f32(1.0 + i as f32 * 1e-3);
            v = b.op(Op::Mul, &[v, c]);
        }
        b.write(OUT, 0, &[r, k], v);
        b.build()
    };
    let small = cuda::generate_cuda(&chain(100), "lanes").expect("CUDA source");
    assert_eq!(small.matches("ovl::ld4(").count(), 1);
    let large = chain(600);
    assert!(
        large.expressions.len() > 1024,
        "{}",
        large.expressions.len()
    );
    let source = cuda::generate_cuda(&large, "lanes").expect("CUDA source");
    assert_eq!(source.matches("ovl::ld4(").count(), 0);
    assert_eq!(source.matches("ovl::st4(").count(), 0);
}
