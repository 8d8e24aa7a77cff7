//! Generated C++ against values computed in the tests (and, where noted, bit for bit against the
//! reference interpreter).

#![allow(clippy::needless_range_loop, clippy::type_complexity)]

use crate::common;

use common::*;
use ovl_codegen::{Access, RunError};
use ovl_ir::fixtures::{self, add_2d, cumsum, gather};
use ovl_ir::ir::Op;
use ovl_ir::{DType, HostTensor, Literal};
use ovl_testkit::without_hang;

fn f32_tensor(shape: &[usize], f: impl Fn(usize) -> f32) -> HostTensor {
    let n = shape.iter().product();
    HostTensor::from_vec(shape, (0..n).map(f).collect::<Vec<f32>>()).unwrap()
}

#[test]
fn elementwise_add_2d() {
    let (r, c) = (37usize, 53usize);
    let dag = add_2d(r as u64, c as u64);
    let a = f32_tensor(&[r, c], |k| k as f32 * 0.5);
    let bt = f32_tensor(&[r, c], |k| 1000.0 - k as f32);
    let (op, _cache) = compiled(&dag);
    for threads in [1, 2, 3, 0] {
        let out = run(&op, &dag, &[&a, &bt], threads).unwrap();
        let got = out[0].as_slice::<f32>().unwrap();
        for k in 0..r * c {
            assert_eq!(got[k], k as f32 * 0.5 + (1000.0 - k as f32), "element {k}");
        }
    }
    // The generated code has no bounds check (all indices are positions) and is vectorizable.
    let src = std::fs::read_to_string(op.source_path()).unwrap();
    assert!(!src.contains("ovl::inb(v"), "{src}");
    assert!(src.contains("__restrict__"));
}

#[test]
fn elementwise_add_large_multithreaded() {
    // Large enough to run on several threads; chunks end in the middle of rows.
    let (r, c) = (301usize, 997usize);
    let dag = add_2d(r as u64, c as u64);
    let a = f32_tensor(&[r, c], |k| (k % 1013) as f32);
    let bt = f32_tensor(&[r, c], |k| (k / 7) as f32 * 0.25);
    let (op, _cache) = compiled(&dag);
    for threads in [0, 2, 5, 7] {
        let out = run(&op, &dag, &[&a, &bt], threads).unwrap();
        let got = out[0].as_slice::<f32>().unwrap();
        for k in 0..r * c {
            assert_eq!(
                got[k],
                (k % 1013) as f32 + (k / 7) as f32 * 0.25,
                "element {k}"
            );
        }
    }
}

#[test]
fn three_d_workgroup_positions() {
    // out[i, j, k] = i * 1_000_000 + j * 1000 + k, with a workgroup of rank 3, on 1 to 7
    // threads (chunks start and end in the middle of rows and planes).
    let shape = [13u64, 17, 701];
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
    let dag = b.build();
    let (op, _cache) = compiled(&dag);
    for threads in [1, 2, 7] {
        let out = run(&op, &dag, &[], threads).unwrap();
        let got = out[0].as_slice::<i64>().unwrap();
        let mut n = 0;
        for i in 0..shape[0] as i64 {
            for j in 0..shape[1] as i64 {
                for k in 0..shape[2] as i64 {
                    assert_eq!(got[n], i * 1_000_000 + j * 1000 + k, "threads {threads}");
                    n += 1;
                }
            }
        }
    }
}

#[test]
fn cumsum_with_range_and_variable() {
    let (rows, cols) = (6usize, 9usize);
    let x = HostTensor::from_vec(
        &[rows, cols],
        (0..rows * cols)
            .map(|k| (k as f64).sqrt())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    for step in [1, 2, 4] {
        let dag = cumsum(rows as u64, cols as u64, step);
        let out = same_as_interpreter(&dag, &[&x], 1);
        let got = out[0].as_slice::<f64>().unwrap();
        let xs = x.as_slice::<f64>().unwrap();
        for r in 0..rows {
            let mut acc = 0.0;
            for j in 0..cols {
                if j % step as usize == 0 {
                    acc += xs[r * cols + j];
                    assert_eq!(got[r * cols + j], acc, "step {step} row {r} col {j}");
                } else {
                    assert_eq!(got[r * cols + j], 0.0);
                }
            }
        }
    }
}

#[test]
fn range_with_runtime_bounds_and_step() {
    // Worker i sums k for k in (i .. 3*i+7).step_by(i + 1): runtime start, end and step.
    let n = 40u64;
    let dag = fixtures::runtime_range(n);
    let out = same_as_interpreter(&dag, &[], 1);
    let got = out[0].as_slice::<i64>().unwrap();
    for i in 0..n as i64 {
        let expected: i64 = (i..3 * i + 7).step_by(i as usize + 1).sum();
        assert_eq!(got[i as usize], expected);
    }
}

#[test]
fn range_near_i64_max_does_not_overflow() {
    // for k in (MAX - 10 .. MAX).step_by(4): 3 iterations, no wrap-around.
    let mut b = Builder::new("range_max", &[1]);
    b.output(DType::I64, &[1]);
    let i = b.position(0);
    let zero = b.i64(0);
    let count = b.var(zero);
    let start = b.i64(i64::MAX - 10);
    let end = b.i64(i64::MAX);
    let step = b.i64(4);
    let _k = b.range(start, end, step);
    let one = b.i64(1);
    let c = b.op(Op::Add, &[count, one]);
    b.assign(count, c);
    b.end_range();
    b.write(OUT, 0, &[i], count);
    let dag = b.build();
    let out = same_as_interpreter(&dag, &[], 1);
    assert_eq!(out[0].as_slice::<i64>().unwrap(), &[3]);
}

#[test]
fn non_positive_step_is_an_error() {
    let mut b = Builder::new("bad_step", &[4]);
    b.input(DType::I64, &[4]);
    b.output(DType::I64, &[4]);
    let i = b.position(0);
    let step = b.read(IN, 0, &[i]);
    let zero = b.i64(0);
    let count = b.var(zero);
    let ten = b.i64(10);
    let _k = b.range(zero, ten, step);
    let one = b.i64(1);
    let c = b.op(Op::Add, &[count, one]);
    b.assign(count, c);
    b.end_range();
    b.write(OUT, 0, &[i], count);
    let dag = b.build();
    let (op, _cache) = compiled(&dag);
    let steps = HostTensor::from_vec(&[4], vec![3i64, 5, 0, -1]).unwrap();
    let mut out = zero_outputs(&dag);
    let err = op.run(&[&steps], &mut out, &[], 1).unwrap_err();
    match &err {
        RunError::NonPositiveStep(fault) => {
            let ovl_codegen::NonPositiveStep {
                expression,
                step,
                position,
                ..
            } = &**fault;
            assert_eq!(
                (*expression, *step, position.as_slice()),
                (5, 0, &[2u64][..])
            );
        }
        other => panic!("{other:?}"),
    }
    // Every other worker ran; the faulting ones stopped before their write.
    assert_eq!(out[0].as_slice::<i64>().unwrap(), &[4, 2, 0, 0]);
    let msg = err.to_string();
    assert!(msg.contains("step 0") && msg.contains("bad_step"), "{msg}");
}

#[test]
fn if_else() {
    // out[i] = if x[i] > 0 { x[i] * 2 } else if x[i] == 0 { 7 } else { -x[i] }
    let n = 11u64;
    let dag = fixtures::branches();
    let xs: Vec<i32> = vec![-5, -1, 0, 1, 2, 3, i32::MIN, i32::MAX, 0, -7, 100];
    let x = HostTensor::from_vec(&[n as usize], xs.clone()).unwrap();
    let out = same_as_interpreter(&dag, &[&x], 1);
    let expected: Vec<i32> = xs
        .iter()
        .map(|&v| {
            if v > 0 {
                v.wrapping_mul(2)
            } else if v == 0 {
                7
            } else {
                v.wrapping_neg()
            }
        })
        .collect();
    assert_eq!(out[0].as_slice::<i32>().unwrap(), &expected[..]);
}

#[test]
fn while_loop_collatz() {
    // out[i] = number of Collatz steps from x[i] to 1.
    let n = 16u64;
    let dag = fixtures::collatz(n);
    let xs: Vec<u64> = (1..=n).map(|k| k * 7 + 1).collect();
    let x = HostTensor::from_vec(&[n as usize], xs.clone()).unwrap();
    let out = same_as_interpreter(&dag, &[&x], 1);
    let expected: Vec<u32> = xs
        .iter()
        .map(|&v| {
            let (mut v, mut s) = (v, 0u32);
            while v > 1 {
                v = if v % 2 == 0 { v / 2 } else { 3 * v + 1 };
                s += 1;
            }
            s
        })
        .collect();
    assert_eq!(out[0].as_slice::<u32>().unwrap(), &expected[..]);
}

#[test]
fn local_tensors() {
    // Each worker reverses its row through a local tensor, and counts into a local that is only
    // initialized in a branch (so it must read as zero in the other).
    let (rows, cols) = (5u64, 8u64);
    let dag = fixtures::reverse_rows(rows, cols);
    let x = f32_tensor(&[rows as usize, cols as usize], |k| k as f32);
    let out = same_as_interpreter(&dag, &[&x], 1);
    let got = out[0].as_slice::<f32>().unwrap();
    for r in 0..rows as usize {
        for j in 0..cols as usize {
            assert_eq!(
                got[r * cols as usize + j],
                (r * cols as usize + cols as usize - 1 - j) as f32
            );
        }
    }
    assert_eq!(out[1].as_slice::<i32>().unwrap(), &[41, 1, 41, 1, 41]);
}

#[test]
fn local_tensor_too_large_is_rejected() {
    // The C++ backend: up to 256 KiB of locals per worker, in one local or several.
    let mut b = Builder::new("big_local", &[1]);
    b.local(DType::F64, &[200, 200], Literal::Float(0.0));
    let dag = b.build();
    let cache = TestCache::new();
    let err = ovl_runtime::compile(&dag, &cache.options()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("local 0") && msg.contains("320000 bytes") && msg.contains("262144"),
        "{msg}"
    );
}

#[test]
fn a_local_over_64_kib_compiles_for_the_cpu_but_not_for_cuda() {
    // 80000 bytes: within the C++ backend's limit (row reuse may add such row buffers to
    // kernels for the CPU), beyond CUDA's 64 KiB per local.
    let mut b = Builder::new("wide_local", &[1]);
    b.local(DType::F64, &[100, 100], Literal::Float(0.0));
    let dag = b.build();
    ovl_codegen::cpu::generate_cpp(&dag, "k").expect("C++ source");
    let msg = ovl_codegen::cuda::generate_cuda(&dag, "k")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("local 0") && msg.contains("80000 bytes") && msg.contains("65536"),
        "{msg}"
    );
}

/// A one-input, one-output elementwise operator applying `f` to build the value.
fn unary_dag(
    name: &str,
    from: DType,
    n: usize,
    f: impl FnOnce(&mut Builder, u32) -> u32,
    to: DType,
) -> ovl_ir::ir::ExpressionDag {
    let mut b = Builder::new(name, &[n as u64]);
    b.input(from, &[n as u64]);
    b.output(to, &[n as u64]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let y = f(&mut b, x);
    b.write(OUT, 0, &[i], y);
    b.build()
}

#[test]
fn float_to_int_casts_saturate_like_rust_as() {
    let xs: Vec<f32> = vec![
        0.0,
        -0.0,
        0.5,
        -0.5,
        0.99,
        -0.99,
        1.5,
        -1.5,
        127.0,
        127.9,
        128.0,
        -128.0,
        -128.5,
        -129.0,
        255.0,
        255.9,
        256.0,
        300.0,
        -300.0,
        2147483520.0,
        2147483648.0,
        -2147483648.0,
        -2147483904.0,
        4294967040.0,
        4294967296.0,
        9.223372e18,
        9.223373e18,
        -9.223373e18,
        1.8446743e19,
        1.8446744e19,
        1e30,
        -1e30,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        f32::MAX,
        f32::MIN,
    ];
    let n = xs.len();
    let x = HostTensor::from_vec(&[n], xs.clone()).unwrap();
    macro_rules! check {
        ($($d:ident => $t:ty),*) => {$(
            let dag = unary_dag("cast", DType::F32, n, |b, x| b.cast(x, DType::$d), DType::$d);
            let out = same_as_interpreter(&dag, &[&x], 1);
            let expected: Vec<$t> = xs.iter().map(|&v| v as $t).collect();
            assert_eq!(out[0].as_slice::<$t>().unwrap(), &expected[..], "f32 -> {}", stringify!($t));
        )*};
    }
    check!(I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8, U16 => u16, U32 => u32, U64 => u64);
    // f64 sources too.
    let ys: Vec<f64> = xs
        .iter()
        .map(|&v| v as f64)
        .chain([
            9.223_372_036_854_776e18,
            -9.223_372_036_854_776e18,
            1.8446744073709552e19,
            4294967295.5,
            -1e-300,
        ])
        .collect();
    let m = ys.len();
    let y = HostTensor::from_vec(&[m], ys.clone()).unwrap();
    macro_rules! check64 {
        ($($d:ident => $t:ty),*) => {$(
            let dag = unary_dag("cast", DType::F64, m, |b, x| b.cast(x, DType::$d), DType::$d);
            let out = same_as_interpreter(&dag, &[&y], 1);
            let expected: Vec<$t> = ys.iter().map(|&v| v as $t).collect();
            assert_eq!(out[0].as_slice::<$t>().unwrap(), &expected[..], "f64 -> {}", stringify!($t));
        )*};
    }
    check64!(I8 => i8, I32 => i32, I64 => i64, U8 => u8, U32 => u32, U64 => u64);
    // To bool: x != 0 (NaN is true).
    let dag = unary_dag(
        "cast",
        DType::F32,
        n,
        |b, x| b.cast(x, DType::Bool),
        DType::Bool,
    );
    let out = same_as_interpreter(&dag, &[&x], 1);
    let expected: Vec<bool> = xs.iter().map(|&v| v != 0.0).collect();
    assert_eq!(out[0].as_slice::<bool>().unwrap(), &expected[..]);
}

#[test]
fn integer_casts_wrap_and_convert() {
    let xs: Vec<i64> = vec![
        0,
        1,
        -1,
        127,
        128,
        -129,
        255,
        256,
        65535,
        65536,
        i32::MAX as i64 + 1,
        i64::MIN,
        i64::MAX,
        (1 << 53) + 1,
        -(1 << 60) - 1,
    ];
    let n = xs.len();
    let x = HostTensor::from_vec(&[n], xs.clone()).unwrap();
    macro_rules! check {
        ($($d:ident => $t:ty),*) => {$(
            let dag = unary_dag("cast", DType::I64, n, |b, x| b.cast(x, DType::$d), DType::$d);
            let out = same_as_interpreter(&dag, &[&x], 1);
            let expected: Vec<$t> = xs.iter().map(|&v| v as $t).collect();
            assert_eq!(out[0].as_slice::<$t>().unwrap(), &expected[..], "i64 -> {}", stringify!($t));
        )*};
    }
    check!(I8 => i8, I16 => i16, I32 => i32, U8 => u8, U16 => u16, U32 => u32, U64 => u64, F32 => f32, F64 => f64);
    let us: Vec<u64> = vec![
        0,
        1,
        u64::MAX,
        u64::MAX - 1,
        1 << 63,
        (1 << 63) + 1,
        (1 << 24) + 1,
        0x8000_0080_0000_0001,
    ];
    let m = us.len();
    let u = HostTensor::from_vec(&[m], us.clone()).unwrap();
    macro_rules! checku {
        ($($d:ident => $t:ty),*) => {$(
            let dag = unary_dag("cast", DType::U64, m, |b, x| b.cast(x, DType::$d), DType::$d);
            let out = same_as_interpreter(&dag, &[&u], 1);
            let expected: Vec<$t> = us.iter().map(|&v| v as $t).collect();
            assert_eq!(out[0].as_slice::<$t>().unwrap(), &expected[..], "u64 -> {}", stringify!($t));
        )*};
    }
    checku!(I64 => i64, I8 => i8, F32 => f32, F64 => f64);
    // From bool: 0 or 1.
    let bs = vec![true, false, true];
    let bt = HostTensor::from_vec(&[3], bs.clone()).unwrap();
    let dag = unary_dag(
        "cast",
        DType::Bool,
        3,
        |b, x| b.cast(x, DType::F32),
        DType::F32,
    );
    let out = same_as_interpreter(&dag, &[&bt], 1);
    assert_eq!(out[0].as_slice::<f32>().unwrap(), &[1.0, 0.0, 1.0]);
    let dag = unary_dag(
        "cast",
        DType::Bool,
        3,
        |b, x| b.cast(x, DType::I8),
        DType::I8,
    );
    let out = same_as_interpreter(&dag, &[&bt], 1);
    assert_eq!(out[0].as_slice::<i8>().unwrap(), &[1, 0, 1]);
}

/// All pairs of `edges`, as an operator computing `op` elementwise.
fn binary_pairs<T: ovl_ir::Scalar>(
    op: Op,
    edges: &[T],
    out: DType,
) -> (ovl_ir::ir::ExpressionDag, HostTensor, HostTensor) {
    let n = edges.len() * edges.len();
    let mut b = Builder::new("pairs", &[n as u64]);
    b.input(T::DTYPE, &[n as u64]);
    b.input(T::DTYPE, &[n as u64]);
    b.output(out, &[n as u64]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let y = b.read(IN, 1, &[i]);
    let z = b.op(op, &[x, y]);
    b.write(OUT, 0, &[i], z);
    let a: Vec<T> = edges
        .iter()
        .flat_map(|&x| edges.iter().map(move |_| x))
        .collect();
    let c: Vec<T> = edges.iter().flat_map(|_| edges.iter().copied()).collect();
    (
        b.build(),
        HostTensor::from_vec(&[n], a).unwrap(),
        HostTensor::from_vec(&[n], c).unwrap(),
    )
}

macro_rules! int_semantics {
    ($name:ident, $t:ty, $edges:expr) => {
        #[test]
        fn $name() {
            let edges: Vec<$t> = $edges;
            let cases: [(Op, fn($t, $t) -> $t); 7] = [
                (Op::Add, |a, b| a.wrapping_add(b)),
                (Op::Sub, |a, b| a.wrapping_sub(b)),
                (Op::Mul, |a, b| a.wrapping_mul(b)),
                (Op::Div, |a, b| if b == 0 { 0 } else { a.wrapping_div(b) }),
                (Op::Mod, |a, b| if b == 0 { 0 } else { a.wrapping_rem(b) }),
                (Op::Min, |a, b| a.min(b)),
                (Op::Max, |a, b| a.max(b)),
            ];
            for (op, f) in cases {
                let (dag, a, b) = binary_pairs::<$t>(op, &edges, <$t as ovl_ir::Scalar>::DTYPE);
                let out = same_as_interpreter(&dag, &[&a, &b], 1);
                let (xa, xb) = (a.as_slice::<$t>().unwrap(), b.as_slice::<$t>().unwrap());
                let got = out[0].as_slice::<$t>().unwrap();
                for k in 0..got.len() {
                    assert_eq!(got[k], f(xa[k], xb[k]), "{op:?}({}, {})", xa[k], xb[k]);
                }
            }
        }
    };
}

int_semantics!(
    i8_arithmetic_wraps,
    i8,
    vec![
        0,
        1,
        -1,
        2,
        -2,
        7,
        -7,
        100,
        -100,
        i8::MIN,
        i8::MAX,
        i8::MIN + 1
    ]
);
int_semantics!(
    i16_arithmetic_wraps,
    i16,
    vec![0, 1, -1, 3, -3, 300, -300, i16::MIN, i16::MAX]
);
int_semantics!(
    i32_arithmetic_wraps,
    i32,
    vec![0, 1, -1, 3, -3, 65536, i32::MIN, i32::MAX, i32::MIN + 1]
);
int_semantics!(
    i64_arithmetic_wraps,
    i64,
    vec![0, 1, -1, 3, -3, 1 << 40, i64::MIN, i64::MAX, i64::MIN + 1]
);
int_semantics!(
    u8_arithmetic_wraps,
    u8,
    vec![0, 1, 2, 3, 7, 100, 128, 254, 255]
);
int_semantics!(
    u16_arithmetic_wraps,
    u16,
    vec![0, 1, 2, 3, 255, 256, 32768, 65535]
);
int_semantics!(
    u32_arithmetic_wraps,
    u32,
    vec![0, 1, 3, 65536, u32::MAX, u32::MAX - 1, 1 << 31]
);
int_semantics!(
    u64_arithmetic_wraps,
    u64,
    vec![0, 1, 3, u64::MAX, u64::MAX - 1, 1 << 63]
);

#[test]
fn integer_unary_edges() {
    let xs: Vec<i8> = vec![0, 1, -1, i8::MIN, i8::MAX, 5];
    let x = HostTensor::from_vec(&[6], xs.clone()).unwrap();
    for (op, f) in [
        (Op::Neg, (|a: i8| a.wrapping_neg()) as fn(i8) -> i8),
        (Op::Abs, |a: i8| a.wrapping_abs()),
        (Op::Not, |a: i8| !a),
    ] {
        let dag = unary_dag("unary", DType::I8, 6, |b, x| b.op(op, &[x]), DType::I8);
        let out = same_as_interpreter(&dag, &[&x], 1);
        let expected: Vec<i8> = xs.iter().map(|&v| f(v)).collect();
        assert_eq!(out[0].as_slice::<i8>().unwrap(), &expected[..], "{op:?}");
    }
    let us: Vec<u16> = vec![0, 1, 65535, 300];
    let u = HostTensor::from_vec(&[4], us.clone()).unwrap();
    let dag = unary_dag(
        "unary",
        DType::U16,
        4,
        |b, x| b.op(Op::Neg, &[x]),
        DType::U16,
    );
    let out = same_as_interpreter(&dag, &[&u], 1);
    let expected: Vec<u16> = us.iter().map(|v| v.wrapping_neg()).collect();
    assert_eq!(out[0].as_slice::<u16>().unwrap(), &expected[..]);
}

fn float_edges_f32() -> Vec<f32> {
    vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -3.25,
        1e-3,
        123.456,
        f32::MIN_POSITIVE,
        f32::MIN_POSITIVE / 4.0,
        f32::MAX,
        f32::MIN,
        f32::EPSILON,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ]
}

#[test]
fn float_binary_ops_are_bit_exact() {
    let edges = float_edges_f32();
    let cases: [(Op, fn(f32, f32) -> f32); 7] = [
        (Op::Add, |a, b| a + b),
        (Op::Sub, |a, b| a - b),
        (Op::Mul, |a, b| a * b),
        (Op::Div, |a, b| a / b),
        (Op::Mod, |a, b| a % b),
        (Op::Min, |a, b| a.min(b)),
        (Op::Max, |a, b| a.max(b)),
    ];
    for (op, f) in cases {
        let (dag, a, b) = binary_pairs::<f32>(op, &edges, DType::F32);
        let out = same_as_interpreter(&dag, &[&a, &b], 1);
        let (xa, xb) = (a.as_slice::<f32>().unwrap(), b.as_slice::<f32>().unwrap());
        let got = out[0].as_slice::<f32>().unwrap();
        for k in 0..got.len() {
            let e = f(xa[k], xb[k]);
            let same = (got[k].is_nan() && e.is_nan()) || got[k] == e;
            assert!(
                same,
                "{op:?}({}, {}) = {} expected {}",
                xa[k], xb[k], got[k], e
            );
        }
    }
    // Comparisons give bool, IEEE on NaN.
    let (dag, a, b) = binary_pairs::<f32>(Op::Le, &edges, DType::Bool);
    let out = same_as_interpreter(&dag, &[&a, &b], 1);
    let (xa, xb) = (a.as_slice::<f32>().unwrap(), b.as_slice::<f32>().unwrap());
    for (k, &g) in out[0].as_slice::<bool>().unwrap().iter().enumerate() {
        assert_eq!(g, xa[k] <= xb[k]);
    }
}

#[test]
fn fma_is_fused_and_mul_add_is_not() {
    // a * b + c with one rounding (FMA) versus two roundings (MUL then ADD: no contraction).
    let dag = fixtures::fma();
    let e = f64::EPSILON;
    let xs = vec![1.0 + e, 0.1, 3.0, 1e308];
    let ys = vec![1.0 - e, 0.2, 7.0, 10.0];
    let zs = vec![-1.0, -0.02, 1.0, -1e308];
    let t = |v: &Vec<f64>| HostTensor::from_vec(&[4], v.clone()).unwrap();
    let out = same_as_interpreter(&dag, &[&t(&xs), &t(&ys), &t(&zs)], 1);
    for k in 0..4 {
        assert_eq!(
            out[0].as_slice::<f64>().unwrap()[k].to_bits(),
            xs[k].mul_add(ys[k], zs[k]).to_bits()
        );
        assert_eq!(
            out[1].as_slice::<f64>().unwrap()[k].to_bits(),
            (xs[k] * ys[k] + zs[k]).to_bits()
        );
    }
    assert_ne!(
        out[0].as_slice::<f64>().unwrap()[0],
        out[1].as_slice::<f64>().unwrap()[0]
    );
}

#[test]
fn math_functions_f32_and_f64() {
    let xs: Vec<f32> = vec![
        0.0,
        -0.0,
        0.25,
        -0.75,
        1.0,
        2.5,
        -3.5,
        10.0,
        88.0,
        -100.0,
        0.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1e-30,
    ];
    let n = xs.len();
    let x = HostTensor::from_vec(&[n], xs.clone()).unwrap();
    let cases: Vec<(Op, fn(f32) -> f32)> = vec![
        (Op::Sqrt, f32::sqrt),
        (Op::Rsqrt, |x| 1.0 / x.sqrt()),
        (Op::Exp, f32::exp),
        (Op::Exp2, f32::exp2),
        (Op::Expm1, f32::exp_m1),
        (Op::Log, f32::ln),
        (Op::Log2, f32::log2),
        (Op::Log10, f32::log10),
        (Op::Log1p, f32::ln_1p),
        (Op::Sin, f32::sin),
        (Op::Cos, f32::cos),
        (Op::Tan, f32::tan),
        (Op::Asin, f32::asin),
        (Op::Acos, f32::acos),
        (Op::Atan, f32::atan),
        (Op::Sinh, f32::sinh),
        (Op::Cosh, f32::cosh),
        (Op::Tanh, f32::tanh),
        (Op::Sigmoid, |x| 1.0 / (1.0 + (-x).exp())),
        (Op::Ceil, f32::ceil),
        (Op::Floor, f32::floor),
        (Op::Round, f32::round),
        (Op::Abs, f32::abs),
        (Op::Neg, |x| -x),
    ];
    for (op, f) in cases {
        let dag = unary_dag("math", DType::F32, n, |b, x| b.op(op, &[x]), DType::F32);
        let (cop, _cache) = compiled(&dag);
        let out = run(&cop, &dag, &[&x], 1).unwrap();
        for (k, &g) in out[0].as_slice::<f32>().unwrap().iter().enumerate() {
            let e = f(xs[k]);
            let ok = (g.is_nan() && e.is_nan())
                || g.to_bits() == e.to_bits()
                || (g.is_finite()
                    && e.is_finite()
                    && (g.to_bits() as i64 - e.to_bits() as i64).abs() <= 4);
            assert!(ok, "{op:?}({}) = {g:e}, expected {e:e}", xs[k]);
        }
    }
    // The predicates.
    for (op, f) in [
        (Op::Isnan, (|x: f32| x.is_nan()) as fn(f32) -> bool),
        (Op::Isinf, |x: f32| x.is_infinite()),
        (Op::Isfinite, |x: f32| x.is_finite()),
    ] {
        let dag = unary_dag("pred", DType::F32, n, |b, x| b.op(op, &[x]), DType::Bool);
        let out = same_as_interpreter(&dag, &[&x], 1);
        let expected: Vec<bool> = xs.iter().map(|&v| f(v)).collect();
        assert_eq!(out[0].as_slice::<bool>().unwrap(), &expected[..], "{op:?}");
    }
    // f64 erf, pow and atan2 through the interpreter (within 4 ulps).
    let ys: Vec<f64> = xs.iter().map(|&v| v as f64).collect();
    let y = HostTensor::from_vec(&[n], ys.clone()).unwrap();
    let dag = unary_dag("erf", DType::F64, n, |b, x| b.op(Op::Erf, &[x]), DType::F64);
    let (cop, _cache) = compiled(&dag);
    let out = run(&cop, &dag, &[&y], 1).unwrap();
    for (k, &g) in out[0].as_slice::<f64>().unwrap().iter().enumerate() {
        let e = libm_erf(ys[k]);
        assert!(
            (g.is_nan() && e.is_nan()) || (g - e).abs() <= 4.0 * f64::EPSILON * e.abs().max(1e-300),
            "erf({}) = {g} expected {e}",
            ys[k]
        );
    }
    let dag = unary_dag(
        "pow",
        DType::F64,
        n,
        |b, x| {
            let two = b.f64(2.5);
            b.op(Op::Pow, &[x, two])
        },
        DType::F64,
    );
    let out = same_as_interpreter(&dag, &[&y], 1);
    for (k, &g) in out[0].as_slice::<f64>().unwrap().iter().enumerate() {
        let e = ys[k].powf(2.5);
        assert!(
            (g.is_nan() && e.is_nan()) || g == e,
            "pow({}, 2.5) = {g} expected {e}",
            ys[k]
        );
    }
}

/// erf through the C library of this process (std has none).
fn libm_erf(x: f64) -> f64 {
    extern "C" {
        fn erf(x: f64) -> f64;
    }
    // SAFETY: `erf` from the C math library is a pure function.
    unsafe { erf(x) }
}

#[test]
fn select_and_bool_logic() {
    let dag = fixtures::select_logic();
    let xs = vec![-1.0, 0.0, 1.0, 9.5, 10.0, 20.0, f64::NAN, 5.0];
    let x = HostTensor::from_vec(&[8], xs.clone()).unwrap();
    let out = same_as_interpreter(&dag, &[&x], 1);
    let got = out[0].as_slice::<f64>().unwrap();
    let flags = out[1].as_slice::<bool>().unwrap();
    for k in 0..8 {
        let (p, s) = (xs[k] > 0.0, xs[k] < 10.0);
        assert_eq!(
            got[k].to_bits(),
            if p && s { xs[k] } else { 0.0f64 }.to_bits()
        );
        assert_eq!(flags[k], (p || s) && !(p && s));
    }
}

#[test]
fn data_dependent_out_of_bounds_read_is_an_error() {
    let dag = gather(10, 6);
    let (op, _cache) = compiled(&dag);
    let values = f32_tensor(&[10], |k| k as f32 + 0.5);
    let idx = HostTensor::from_vec(&[6], vec![1i32, 9, 10, 3, -1, 0]).unwrap();
    let mut out = zero_outputs(&dag);
    let err = op.run(&[&values, &idx], &mut out, &[], 1).unwrap_err();
    let RunError::IndexOutOfBounds(e) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (
            e.expression,
            e.access,
            e.tensor.as_str(),
            e.axis,
            e.index,
            e.size,
            e.position.as_slice()
        ),
        (2, Access::Read, "input 0", 0, 10, 10, &[2u64][..])
    );
    // The faulting reads yielded 0; every other worker ran.
    assert_eq!(
        out[0].as_slice::<f32>().unwrap(),
        &[1.5, 9.5, 0.0, 3.5, 0.0, 0.5]
    );
    let msg = err.to_string();
    assert!(
        msg.contains("out of bounds") && msg.contains("index 10") && msg.contains("size 10"),
        "{msg}"
    );
    assert!(
        msg.contains("gather") && msg.contains("src/ops.rs:12"),
        "{msg}"
    );
    // In bounds: no error, same values as the interpreter.
    let idx = HostTensor::from_vec(&[6], vec![1i32, 9, 0, 3, 4, 0]).unwrap();
    let out = same_as_interpreter(&dag, &[&values, &idx], 1);
    assert_eq!(
        out[0].as_slice::<f32>().unwrap(),
        &[1.5, 9.5, 0.5, 3.5, 4.5, 0.5]
    );
    // The first fault in row-major order is reported, whatever the threading.
    let big = 200_000u64;
    let dag = gather(10, big);
    let (op, _cache) = compiled(&dag);
    let idx = HostTensor::from_vec(
        &[big as usize],
        (0..big)
            .map(|k| {
                if k == 150_000 || k == 199_999 {
                    -5
                } else {
                    (k % 10) as i32
                }
            })
            .collect::<Vec<_>>(),
    )
    .unwrap();
    for threads in [1, 2, 4] {
        let mut out = zero_outputs(&dag);
        let err = op
            .run(&[&values, &idx], &mut out, &[], threads)
            .unwrap_err();
        let RunError::IndexOutOfBounds(e) = &err else {
            panic!("{err:?}")
        };
        assert_eq!((e.index, e.position.as_slice()), (-5, &[150_000u64][..]));
    }
}

#[test]
fn out_of_bounds_write_is_dropped_and_reported() {
    // out[2 * i] = i for i in 0..6 writes indices 0..10 into a tensor of 8 (and u64 indices).
    let mut b = Builder::new("scatter", &[6]);
    b.output(DType::I64, &[8]);
    let i = b.position(0);
    let two = b.i64(2);
    let j = b.op(Op::Mul, &[i, two]);
    let j = b.cast(j, DType::U64);
    b.write(OUT, 0, &[j], i);
    let dag = b.build();
    let (op, _cache) = compiled(&dag);
    let mut out = zero_outputs(&dag);
    let err = op.run(&[], &mut out, &[], 1).unwrap_err();
    let RunError::IndexOutOfBounds(e) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (e.access, e.index, e.size, e.position.as_slice()),
        (Access::Write, 8, 8, &[4u64][..])
    );
    assert_eq!(out[0].as_slice::<i64>().unwrap(), &[0, 0, 1, 0, 2, 0, 3, 0]);
}

#[test]
fn provable_indices_need_no_check() {
    // Reads at i + 1 for i in 0..n-1 of a tensor of n, at i % 4, and at i / 2: all provable.
    let n = 16u64;
    let mut b = Builder::new("provable", &[n - 1]);
    b.input(DType::F32, &[n]);
    b.input(DType::F32, &[4]);
    b.output(DType::F32, &[n - 1]);
    let i = b.position(0);
    let one = b.i64(1);
    let four = b.i64(4);
    let two = b.i64(2);
    let j = b.op(Op::Add, &[i, one]);
    let x = b.read(IN, 0, &[j]);
    let m = b.op(Op::Mod, &[i, four]);
    let y = b.read(IN, 1, &[m]);
    let h = b.op(Op::Div, &[i, two]);
    let z = b.read(IN, 0, &[h]);
    let s = b.op(Op::Add, &[x, y]);
    let s = b.op(Op::Add, &[s, z]);
    b.write(OUT, 0, &[i], s);
    let dag = b.build();
    let src = ovl_codegen::generate_cpp(&dag, "test").unwrap();
    assert!(!src.contains("ovl::inb(v"), "{src}");
    let a = f32_tensor(&[16], |k| k as f32);
    let c = f32_tensor(&[4], |k| 100.0 * k as f32);
    let out = same_as_interpreter(&dag, &[&a, &c], 1);
    let got = out[0].as_slice::<f32>().unwrap();
    for k in 0..15 {
        assert_eq!(
            got[k],
            (k + 1) as f32 + 100.0 * (k % 4) as f32 + (k / 2) as f32
        );
    }
}

#[test]
fn wrong_tensors_are_rejected() {
    let dag = add_2d(2, 3);
    let (op, _cache) = compiled(&dag);
    let a = f32_tensor(&[2, 3], |k| k as f32);
    let mut out = zero_outputs(&dag);
    let err = op.run(&[&a], &mut out, &[], 1).unwrap_err();
    assert!(
        matches!(
            err,
            RunError::TensorCount {
                expected: 2,
                got: 1,
                ..
            }
        ),
        "{err}"
    );
    let wrong = f32_tensor(&[3, 2], |k| k as f32);
    let err = op.run(&[&a, &wrong], &mut out, &[], 1).unwrap_err();
    assert!(
        err.to_string().contains("input 1 must be f32[2, 3]"),
        "{err}"
    );
    let ints = HostTensor::zeros(DType::I32, &[2, 3]);
    let err = op.run(&[&a, &ints], &mut out, &[], 1).unwrap_err();
    assert!(err.to_string().contains("i32[2, 3]"), "{err}");
    let mut bad_out = vec![HostTensor::zeros(DType::F32, &[6])];
    let err = op.run(&[&a, &a], &mut bad_out, &[], 1).unwrap_err();
    assert!(err.to_string().contains("output 0"), "{err}");
}

#[test]
fn constants_of_every_dtype_are_exact() {
    // One output per dtype holding an extreme literal.
    let mut b = Builder::new("literals", &[1]);
    let lits: Vec<(DType, Literal)> = vec![
        (DType::F32, Literal::Float(f32::MIN_POSITIVE as f64 / 8.0)),
        (DType::F32, Literal::Float(-0.0)),
        (DType::F32, Literal::Float(f64::NAN)),
        (DType::F32, Literal::Float(0.1)),
        (DType::F64, Literal::Float(f64::NEG_INFINITY)),
        (DType::F64, Literal::Float(5e-324)),
        (DType::I8, Literal::Int(-128)),
        (DType::I64, Literal::Int(i64::MIN)),
        (DType::U64, Literal::UInt(u64::MAX)),
        (DType::U32, Literal::UInt(u32::MAX as u64)),
        (DType::Bool, Literal::Bool(true)),
    ];
    for (d, _) in &lits {
        b.output(*d, &[1]);
    }
    let i = b.position(0);
    for (k, (d, l)) in lits.iter().enumerate() {
        let c = b.constant(*d, *l);
        b.write(OUT, k as u32, &[i], c);
    }
    let dag = b.build();
    let out = same_as_interpreter(&dag, &[], 1);
    assert_eq!(
        out[0].as_slice::<f32>().unwrap()[0],
        f32::MIN_POSITIVE / 8.0
    );
    assert_eq!(
        out[1].as_slice::<f32>().unwrap()[0].to_bits(),
        (-0.0f32).to_bits()
    );
    assert!(out[2].as_slice::<f32>().unwrap()[0].is_nan());
    assert_eq!(out[3].as_slice::<f32>().unwrap()[0], 0.1f32);
    assert_eq!(out[7].as_slice::<i64>().unwrap()[0], i64::MIN);
    assert_eq!(out[8].as_slice::<u64>().unwrap()[0], u64::MAX);
    assert!(out[10].as_slice::<bool>().unwrap()[0]);
}

#[test]
fn zero_sized_tensors_are_never_indexed() {
    let mut b = Builder::new("empty", &[2]);
    b.input(DType::F32, &[0, 1 << 40, 1 << 40]);
    b.output(DType::F32, &[2]);
    let i = b.position(0);
    let z = b.i64(0);
    let x = b.read(IN, 0, &[z, z, z]);
    b.write(OUT, 0, &[i], x);
    let dag = b.build();
    let (op, _cache) = compiled(&dag);
    let empty = HostTensor::from_vec(&[0, 1 << 40, 1 << 40], Vec::<f32>::new()).unwrap();
    let mut out = zero_outputs(&dag);
    let err = op.run(&[&empty], &mut out, &[], 1).unwrap_err();
    assert!(matches!(err, RunError::IndexOutOfBounds(_)), "{err}");
}

#[test]
fn malformed_ir_never_panics_the_emitter() {
    // Random mutations of valid operators: the emitter returns Ok or an error, never panics.
    let seeds = [cumsum(3, 4, 1), gather(10, 6), add_2d(3, 5)];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut errors = 0;
    for round in 0..3000 {
        let mut dag = seeds[round % seeds.len()].clone();
        for _ in 0..1 + next() % 3 {
            let n = dag.expressions.len();
            let e = &mut dag.expressions[(next() % n as u64) as usize];
            match next() % 8 {
                0 => e.code = (next() % 110) as i32,
                1 => e.dtype = (next() % 15) as i32,
                2 => {
                    if let Some(o) = e.operands.first_mut() {
                        *o = (next() % (n as u64 + 2)) as u32;
                    }
                }
                3 => e.operands.push((next() % n as u64) as u32),
                4 => {
                    e.operands.pop();
                }
                5 => {
                    e.tensor = Some(ovl_ir::ir::TensorRef {
                        kind: (next() % 5) as i32,
                        index: (next() % 3) as u32,
                    })
                }
                6 => e.axis = (next() % 4) as u32,
                _ => dag.workgroup_shape.push(next() % 3),
            }
        }
        if ovl_codegen::generate_cpp(&dag, "fuzz").is_err() {
            errors += 1;
        }
    }
    assert!(errors > 0);
}

/// Random elementwise programs over several dtypes, bit for bit against the interpreter (the
/// math functions too, on these inputs: most call the same C library functions as the
/// interpreter, `sinf` and so on; the C++ prelude's own f32 `exp`, `tanh` and `sigmoid` may
/// differ by a few ulps on other inputs, see `ovl_ir::fixtures::Fixture::f32_ulps`).
#[test]
fn random_programs_match_the_interpreter() {
    let dtypes = [
        DType::F32,
        DType::F64,
        DType::I8,
        DType::I32,
        DType::U16,
        DType::I64,
    ];
    let n = 64usize;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    // Inputs: edge values mixed with random bits.
    let mut inputs = Vec::new();
    for &d in &dtypes {
        let r: Vec<u64> = (0..n).map(|_| next()).collect();
        let t = match d {
            DType::F32 => {
                let e = [
                    0.0,
                    -0.0,
                    1.0,
                    -1.5,
                    f32::NAN,
                    f32::INFINITY,
                    f32::NEG_INFINITY,
                    f32::MAX,
                    1e-40,
                    3e9,
                    -7.25,
                ];
                HostTensor::from_vec(
                    &[n],
                    (0..n)
                        .map(|k| {
                            if k < e.len() {
                                e[k]
                            } else {
                                (r[k] as i32 as f32) / 65536.0
                            }
                        })
                        .collect::<Vec<_>>(),
                )
            }
            DType::F64 => {
                let e = [
                    0.0,
                    -0.0,
                    2.0,
                    -0.5,
                    f64::NAN,
                    f64::INFINITY,
                    f64::MIN,
                    5e-324,
                    1e19,
                    -3e18,
                ];
                HostTensor::from_vec(
                    &[n],
                    (0..n)
                        .map(|k| {
                            if k < e.len() {
                                e[k]
                            } else {
                                (r[k] as i64 as f64) / 1e6
                            }
                        })
                        .collect::<Vec<_>>(),
                )
            }
            DType::I8 => HostTensor::from_vec(
                &[n],
                (0..n)
                    .map(|k| [0, -1, i8::MIN, i8::MAX, 1][k % 5].max(r[k] as i8 * (k % 2) as i8))
                    .collect::<Vec<i8>>(),
            ),
            DType::I32 => HostTensor::from_vec(
                &[n],
                (0..n)
                    .map(|k| {
                        if k % 3 == 0 {
                            [0, -1, i32::MIN, i32::MAX][k % 4]
                        } else {
                            r[k] as i32 >> (k % 20)
                        }
                    })
                    .collect::<Vec<i32>>(),
            ),
            DType::U16 => HostTensor::from_vec(
                &[n],
                (0..n)
                    .map(|k| {
                        if k % 4 == 0 {
                            [0u16, 1, u16::MAX][k % 3]
                        } else {
                            r[k] as u16
                        }
                    })
                    .collect::<Vec<u16>>(),
            ),
            _ => HostTensor::from_vec(
                &[n],
                (0..n)
                    .map(|k| {
                        if k % 3 == 0 {
                            [0, -1, i64::MIN, i64::MAX][k % 4]
                        } else {
                            r[k] as i64 >> (k % 50)
                        }
                    })
                    .collect::<Vec<i64>>(),
            ),
        }
        .unwrap();
        inputs.push(t);
    }
    for program in 0..10 {
        let mut b = Builder::new(&format!("random{program}"), &[n as u64]);
        for &d in &dtypes {
            b.input(d, &[n as u64]);
        }
        let i = b.position(0);
        // Values by dtype; bools separately.
        let mut pool: Vec<(DType, u32)> = Vec::new();
        for (k, &d) in dtypes.iter().enumerate() {
            let v = b.read(IN, k as u32, &[i]);
            pool.push((d, v));
        }
        let mut bools: Vec<u32> = Vec::new();
        for _ in 0..40 {
            let (d, x) = pool[(next() % pool.len() as u64) as usize];
            let same: Vec<u32> = pool
                .iter()
                .filter(|(e, _)| *e == d)
                .map(|&(_, v)| v)
                .collect();
            let y = same[(next() % same.len() as u64) as usize];
            let v = match next() % 10 {
                0..=3 => {
                    let ops = [
                        Op::Add,
                        Op::Sub,
                        Op::Mul,
                        Op::Div,
                        Op::Mod,
                        Op::Min,
                        Op::Max,
                    ];
                    b.op(ops[(next() % 7) as usize], &[x, y])
                }
                4 => {
                    let ops: &[Op] = if d.is_float() {
                        &[
                            Op::Neg,
                            Op::Abs,
                            Op::Sqrt,
                            Op::Floor,
                            Op::Ceil,
                            Op::Round,
                            Op::Exp,
                            Op::Expm1,
                            Op::Log1p,
                            Op::Sin,
                            Op::Tanh,
                            Op::Sigmoid,
                            Op::Rsqrt,
                            Op::Atan,
                        ]
                    } else {
                        &[Op::Neg, Op::Abs, Op::Not]
                    };
                    b.op(ops[(next() % ops.len() as u64) as usize], &[x])
                }
                5 | 6 => {
                    let to = dtypes[(next() % dtypes.len() as u64) as usize];
                    let c = b.cast(x, to);
                    pool.push((to, c));
                    continue;
                }
                7 => {
                    let ops = [Op::Lt, Op::Le, Op::Gt, Op::Ge, Op::Eq, Op::Ne];
                    let c = b.op(ops[(next() % 6) as usize], &[x, y]);
                    bools.push(c);
                    continue;
                }
                8 if !bools.is_empty() => {
                    let c = bools[(next() % bools.len() as u64) as usize];
                    b.op(Op::Select, &[c, x, y])
                }
                _ if d.is_float() => {
                    let z = same[(next() % same.len() as u64) as usize];
                    b.op(Op::Fma, &[x, y, z])
                }
                _ => continue,
            };
            pool.push((d, v));
        }
        // Write the last value of each dtype and a few bools.
        for &d in &dtypes {
            if let Some(&(_, v)) = pool.iter().rev().find(|(e, _)| *e == d) {
                let o = b.output(d, &[n as u64]);
                b.write(OUT, o, &[i], v);
            }
        }
        for &c in bools.iter().rev().take(3) {
            let o = b.output(DType::Bool, &[n as u64]);
            b.write(OUT, o, &[i], c);
        }
        let dag = b.build();
        let refs: Vec<&HostTensor> = inputs.iter().collect();
        same_as_interpreter(&dag, &refs, 1);
    }
}

/// Runs `dag` compiled (with `threads`) and in the interpreter, each on a watchdog thread,
/// asserts the same outputs and the same out-of-bounds fault, and returns them.
fn same_fault_as_interpreter(
    dag: &ovl_ir::ir::ExpressionDag,
    inputs: &[HostTensor],
    threads: usize,
) -> (Vec<HostTensor>, ovl_codegen::OutOfBounds) {
    let (op, _cache) = compiled(dag);
    let (d, ins) = (dag.clone(), inputs.to_vec());
    let (got, compiled_out) = without_hang("the compiled operator", move || {
        let mut out = zero_outputs(&d);
        let r = op.run(&ins.iter().collect::<Vec<_>>(), &mut out, &[], threads);
        (r, out)
    });
    let (d, ins) = (dag.clone(), inputs.to_vec());
    let (expected, interp_out) = without_hang("the interpreter", move || {
        let mut out = zero_outputs(&d);
        let r = ovl_core::interp::interpret(&d, &ins.iter().collect::<Vec<_>>(), &mut out);
        (r, out)
    });
    let (
        Err(RunError::IndexOutOfBounds(got)),
        Err(ovl_core::interp::InterpError::IndexOutOfBounds(expected)),
    ) = (got, expected)
    else {
        panic!("expected an out-of-bounds fault from both")
    };
    assert_eq!(got, expected);
    for (g, e) in compiled_out.iter().zip(&interp_out) {
        assert_eq!(bits(g), bits(e));
    }
    (compiled_out, *got)
}

#[test]
fn a_fault_ends_its_worker_and_its_while_loop() {
    // Rows 1 and 3 have no negative element: their walk faults at index 4 and stops there
    // (out1 keeps its 0, the earlier write of out0 stays); row 1's fault is reported.
    let rows = [
        [1.0f32, 2.0, -1.0, 3.0],
        [1.0, 2.0, 3.0, 4.0],
        [-5.0, 1.0, 1.0, 1.0],
        [0.0, 0.0, 0.0, 0.0],
    ];
    let dag = first_negative_dag(4, 4);
    let x = HostTensor::from_vec(&[4, 4], rows.concat()).unwrap();
    for threads in [1, 2, 4] {
        let (out, e) = same_fault_as_interpreter(&dag, std::slice::from_ref(&x), threads);
        assert_eq!(
            (e.access, e.tensor.as_str(), e.axis, e.index, e.size),
            (Access::Read, "input 0", 1, 4, 4)
        );
        assert_eq!(e.position, vec![1]);
        assert_eq!(out[0].as_slice::<i64>().unwrap(), &[7, 7, 7, 7]);
        let expected: Vec<i64> = rows
            .iter()
            .map(|r| first_negative_from(r, 0).map_or(0, |k| k as i64))
            .collect();
        assert_eq!(out[1].as_slice::<i64>().unwrap(), expected.as_slice());
    }
}

#[test]
fn a_fault_three_loops_deep_ends_its_worker() {
    // Row 2's walk from 3 leaves the row (its last negative is at 2).
    let rows = [
        [-1.0f32, 2.0, -3.0, 4.0, 5.0, -6.0, 7.0, -1.0],
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -1.0],
        [-1.0, 2.0, -3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
        [-1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0],
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    ];
    let dag = nested_walk_dag(5, 8);
    let x = HostTensor::from_vec(&[5, 8], rows.concat()).unwrap();
    for threads in [1, 3] {
        let (out, e) = same_fault_as_interpreter(&dag, std::slice::from_ref(&x), threads);
        assert_eq!(
            (e.axis, e.index, e.size, e.position.as_slice()),
            (1, 8, 8, &[2u64][..])
        );
        let expected: Vec<i64> = rows
            .iter()
            .map(|r| nested_walk_row(r).unwrap_or(0))
            .collect();
        assert_eq!(expected, [19, 42, 0, 15, 0]);
        assert_eq!(out[0].as_slice::<i64>().unwrap(), expected.as_slice());
    }
}
