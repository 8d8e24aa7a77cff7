//! The half types (f16, bf16) on every backend: the generated C++, the CUDA translation unit run
//! by host emulation and the reference interpreter agree bit for bit on arithmetic, comparisons,
//! the exact math functions, accumulators and casts at the edges (subnormals, overflow to
//! infinity, NaN payloads, -0); the casts' values are checked against values computed here.

use crate::common::{self, same_as_interpreter, Builder, IN, OUT};
use crate::cooperative::emulated_as_interpreted;
use crate::cuda_emulated::same_as_cpp;
use ovl_ir::half_float::half::{bf16, f16};
use ovl_ir::ir::{ExpressionDag, Op};
use ovl_ir::ops::Combiner;
use ovl_ir::{DType, HostTensor, Literal, Scalar};

/// Interpreter vs C++ and C++ vs the emulated CUDA, bit for bit (NaNs of any payload equal).
fn agree(dag: &ExpressionDag, inputs: &[&HostTensor]) -> Vec<HostTensor> {
    let out = same_as_interpreter(dag, inputs, 1);
    same_as_cpp(dag, inputs);
    out
}

/// Edge values of a half type, from f32 (each exactly representable).
fn edges<T: Scalar>(from: impl Fn(f32) -> T, max: f32, min_subnormal: f32) -> Vec<T> {
    [
        0.0,
        -0.0,
        1.0,
        -1.5,
        0.333_251_95, // an f16 value near 1/3
        3.0,
        max,
        -max,
        min_subnormal,
        -3.0 * min_subnormal,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ]
    .into_iter()
    .map(from)
    .collect()
}

/// Every pair of `values` through each binary op and comparison, one output per op.
fn pairs<T: Scalar>(values: &[T]) {
    let ops = [
        Op::Add,
        Op::Sub,
        Op::Mul,
        Op::Div,
        Op::Mod,
        Op::Min,
        Op::Max,
        Op::Pow,
        Op::Lt,
        Op::Eq,
    ];
    let n = values.len() * values.len();
    let mut b = Builder::new("half_pairs", &[n as u64]);
    b.input(T::DTYPE, &[n as u64]);
    b.input(T::DTYPE, &[n as u64]);
    for op in ops {
        let d = if matches!(op, Op::Lt | Op::Eq) {
            DType::Bool
        } else {
            T::DTYPE
        };
        b.output(d, &[n as u64]);
    }
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let y = b.read(IN, 1, &[i]);
    for (k, op) in ops.into_iter().enumerate() {
        let z = b.op(op, &[x, y]);
        b.write(OUT, k as u32, &[i], z);
    }
    let fma = b.push(Op::Fma, Some(T::DTYPE), &[x, y, x]);
    b.output(T::DTYPE, &[n as u64]);
    b.write(OUT, ops.len() as u32, &[i], fma);
    let a: Vec<T> = values
        .iter()
        .flat_map(|&x| values.iter().map(move |_| x))
        .collect();
    let c: Vec<T> = values.iter().flat_map(|_| values.iter().copied()).collect();
    let a = HostTensor::from_vec(&[n], a).unwrap();
    let c = HostTensor::from_vec(&[n], c).unwrap();
    agree(&b.build(), &[&a, &c]);
}

#[test]
fn arithmetic_and_comparisons_agree_on_every_backend() {
    pairs(&edges(f16::from_f32, 65504.0, 2f32.powi(-24)));
    pairs(&edges(
        bf16::from_f32,
        bf16::MAX.to_f32(),
        f32::from_bits(0x0001_0000),
    ));
}

#[test]
fn a_sum_rounds_once_per_operation() {
    // 2048 + 1 in f16 is 2048 (the spacing there is 2): rounding after each addition, not once
    // at the end as an f32 computation would.
    let mut b = Builder::new("half_add", &[1]);
    b.input(DType::F16, &[2]);
    b.output(DType::F16, &[1]);
    let i = b.position(0);
    let zero = b.i64(0);
    let one = b.i64(1);
    let x = b.read(IN, 0, &[zero]);
    let y = b.read(IN, 0, &[one]);
    let s = b.op(Op::Add, &[x, y]);
    let s = b.op(Op::Add, &[s, y]);
    b.write(OUT, 0, &[i], s);
    let input = HostTensor::from_vec(&[2], vec![f16::from_f32(2048.0), f16::ONE]).unwrap();
    let out = agree(&b.build(), &[&input]);
    assert_eq!(out[0].as_slice::<f16>().unwrap(), &[f16::from_f32(2048.0)]);
}

#[test]
fn exact_math_functions_agree_on_every_backend() {
    let ops = [
        Op::Neg,
        Op::Abs,
        Op::Sqrt,
        Op::Rsqrt,
        Op::Ceil,
        Op::Floor,
        Op::Round,
        Op::Isnan,
        Op::Isinf,
        Op::Isfinite,
    ];
    for d in [DType::F16, DType::BF16] {
        let values: Vec<f32> = (0..400).map(|k| (k as f32 - 200.0) * 0.37).collect();
        let n = values.len() as u64;
        let mut b = Builder::new("half_unary", &[n]);
        b.input(d, &[n]);
        let i = b.position(0);
        let x = b.read(IN, 0, &[i]);
        for (k, op) in ops.into_iter().enumerate() {
            let bool_result = matches!(op, Op::Isnan | Op::Isinf | Op::Isfinite);
            b.output(if bool_result { DType::Bool } else { d }, &[n]);
            let y = b.op(op, &[x]);
            b.write(OUT, k as u32, &[i], y);
        }
        let input = half_tensor(d, &values);
        agree(&b.build(), &[&input]);
    }
}

fn half_tensor(d: DType, values: &[f32]) -> HostTensor {
    let shape = [values.len()];
    match d {
        DType::F16 => {
            HostTensor::from_vec(&shape, values.iter().map(|&x| f16::from_f32(x)).collect())
        }
        _ => HostTensor::from_vec(&shape, values.iter().map(|&x| bf16::from_f32(x)).collect()),
    }
    .unwrap()
}

/// Row sums, products, minima and maxima of half values (a reduction loop with lanes).
fn half_rows(d: DType, rows: u64, cols: u64) -> ExpressionDag {
    let mut b = Builder::new("half_rows", &[rows]);
    b.input(d, &[rows, cols]);
    let combiners = [
        Combiner::Sum,
        Combiner::Product,
        Combiner::Min,
        Combiner::Max,
    ];
    for _ in combiners {
        b.output(d, &[rows]);
    }
    let r = b.position(0);
    let accs: Vec<u32> = combiners
        .iter()
        .map(|&c| {
            let init = b.constant(d, Literal::Float(0.5));
            b.accumulator(c, init)
        })
        .collect();
    let (zero, end, one) = (b.i64(0), b.i64(cols as i64), b.i64(1));
    let j = b.range(zero, end, one);
    let x = b.read(IN, 0, &[r, j]);
    for &acc in &accs {
        b.accumulate(acc, x);
    }
    b.end_range();
    for (k, &acc) in accs.iter().enumerate() {
        b.write(OUT, k as u32, &[r], acc);
    }
    b.build()
}

#[test]
fn a_half_accumulator_rounds_every_combination_and_agrees() {
    for d in [DType::F16, DType::BF16] {
        let (rows, cols) = (5u64, 37u64);
        let values: Vec<f32> = (0..rows * cols)
            .map(|k| ((k * 7919) % 101) as f32 / 37.0 - 1.2)
            .collect();
        let mut input = half_tensor(d, &values);
        input.shape = vec![rows as usize, cols as usize];
        let dag = half_rows(d, rows, cols);
        same_as_interpreter(&dag, &[&input], 1);
        // A GPU runs these few long rows with a group of threads per row (warp shuffles of the
        // 2-byte values), in its own documented order.
        assert!(ovl_ir::cooperative::plan(&dag).is_some());
        emulated_as_interpreted(&dag, &[&input]);
    }
}

#[test]
fn half_kernels_compile_for_sm_80_and_sm_90() {
    let mut programs = Vec::new();
    for d in [DType::F16, DType::BF16] {
        let mut b = Builder::new("half_ops", &[64]);
        b.input(d, &[64]);
        b.output(d, &[64]);
        b.output(DType::F32, &[64]);
        let i = b.position(0);
        let x = b.read(IN, 0, &[i]);
        let y = b.op(Op::Exp, &[x]);
        let y = b.op(Op::Mul, &[y, x]);
        b.write(OUT, 0, &[i], y);
        let w = b.cast(x, DType::F32);
        b.write(OUT, 1, &[i], w);
        programs.push(("half_ops", b.build()));
        programs.push(("half_rows", half_rows(d, 4, 300)));
    }
    crate::cooperative::compile_for_sm_80_and_sm_90("half.rs", programs, |name, dag, ptx| {
        if dag.inputs[0].dtype == DType::F16.to_ir() as i32 {
            assert!(
                ptx.contains("cvt.rn.f16.f32"),
                "{name}: no f16 conversion in\n{ptx}"
            );
        }
        if name == "half_rows" {
            assert!(
                ptx.contains("shfl.sync.down"),
                "{name}: no warp shuffle in\n{ptx}"
            );
        }
    });
}

/// `CAST(x)` from `from` to every dtype, one output each.
fn casts_from(input: &HostTensor) -> Vec<HostTensor> {
    let from = input.dtype();
    let n = input.len() as u64;
    let mut b = Builder::new("half_casts", &[n]);
    b.input(from, &[n]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    for (k, to) in DType::ALL.into_iter().enumerate() {
        b.output(to, &[n]);
        let y = b.cast(x, to);
        b.write(OUT, k as u32, &[i], y);
    }
    agree(&b.build(), &[input])
}

fn out<T: Scalar>(outs: &[HostTensor], to: DType) -> &[T] {
    let k = DType::ALL.iter().position(|&d| d == to).unwrap();
    outs[k].as_slice::<T>().unwrap()
}

#[test]
fn casts_to_half_round_at_the_edges() {
    let sub = 2f32.powi(-24); // the smallest f16 subnormal
    let quiet_nan_payload = f32::from_bits(0x7fc1_2345);
    let signalling = f32::from_bits(0xff80_4000 | 0x0012_0000);
    let values = [
        65504.0,              // the largest f16: exact
        65519.0,              // below the midpoint to 65536: rounds down to 65504
        65520.0,              // the midpoint: ties to even, which is infinity
        -1e9,                 // overflows to -inf
        sub,                  // the smallest subnormal: exact
        sub * 0.5,            // a tie between 0 and it: to even, 0
        sub * 1.5,            // a tie between 1 and 2 subnormal steps: to 2
        -sub * 0.25,          // below half a step: -0
        -0.0,                 // -0 stays -0
        1.0 + 2f32.powi(-11), // a tie at 1: to even, 1
        quiet_nan_payload,
        signalling,
        f32::INFINITY,
        f32::from_bits(0x0001_0000), // an f32 subnormal: bf16 keeps it, f16 rounds to 0
    ];
    let input = HostTensor::from_vec(&[values.len()], values.to_vec()).unwrap();
    let outs = casts_from(&input);
    let h: Vec<u16> = out::<f16>(&outs, DType::F16)
        .iter()
        .map(|x| x.to_bits())
        .collect();
    assert_eq!(
        h,
        [
            0x7bff, 0x7bff, 0x7c00, 0xfc00, 0x0001, 0x0000, 0x0002, 0x8000, 0x8000, 0x3c00, 0x7e09,
            0xfe92, 0x7c00, 0x0000
        ]
    );
    let b: Vec<u16> = out::<bf16>(&outs, DType::BF16)
        .iter()
        .map(|x| x.to_bits())
        .collect();
    // bf16 has f32's range: 65520 is 65536 after rounding, -1e9 stays finite.
    assert_eq!(b[0], 0x4780); // 65504 rounds to 65536 (8 significant bits)
    assert_eq!(b[2], 0x4780);
    assert_eq!(bf16::from_bits(b[3]).to_f32(), -998_244_352.0);
    assert_eq!(&b[8..], &[0x8000, 0x3f80, 0x7fc1, 0xffd2, 0x7f80, 0x0001]);
    // The NaN payloads survive exactly (the comparison above ignores payloads).
    let interp = interp_outputs(&input);
    assert_eq!(out::<f16>(&interp, DType::F16)[10].to_bits(), 0x7e09);
}

fn interp_outputs(input: &HostTensor) -> Vec<HostTensor> {
    let n = input.len() as u64;
    let mut b = Builder::new("half_casts", &[n]);
    b.input(input.dtype(), &[n]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    for (k, to) in DType::ALL.into_iter().enumerate() {
        b.output(to, &[n]);
        let y = b.cast(x, to);
        b.write(OUT, k as u32, &[i], y);
    }
    let dag = b.build();
    let mut outs = common::zero_outputs(&dag);
    ovl_core::interp::interpret(&dag, &[input], &mut outs).unwrap();
    outs
}

#[test]
fn casts_from_half_are_casts_of_the_exact_value() {
    let values = [
        f16::from_f32(-0.0),
        f16::from_f32(2.5),
        f16::from_f32(-2.5),
        f16::from_f32(300.0),
        f16::from_f32(-40000.0),
        f16::from_bits(0x0001),
        f16::INFINITY,
        f16::NEG_INFINITY,
        f16::from_bits(0x7d23), // a signalling NaN with a payload
    ];
    let input = HostTensor::from_vec(&[values.len()], values.to_vec()).unwrap();
    let outs = casts_from(&input);
    let f: Vec<u32> = out::<f32>(&outs, DType::F32)
        .iter()
        .map(|x| x.to_bits())
        .collect();
    assert_eq!(f[0], 0x8000_0000);
    assert_eq!(f[5], 2f32.powi(-24).to_bits());
    // The NaN is quieted, its payload kept.
    assert_eq!(f[8], 0x7fc0_0000 | (0x123 << 13));
    // Float to integer saturates, NaN gives 0; to bool: x != 0.
    assert_eq!(
        out::<i8>(&outs, DType::I8),
        &[0, 2, -2, 127, -128, 0, 127, -128, 0]
    );
    assert_eq!(
        out::<u8>(&outs, DType::U8),
        &[0, 2, 0, 255, 0, 0, 255, 0, 0]
    );
    assert_eq!(
        out::<bool>(&outs, DType::Bool),
        &[false, true, true, true, true, true, true, true, true]
    );
    // f16 -> bf16 rounds the exact value once: 300 is exact in bf16, the subnormal too.
    let b = out::<bf16>(&outs, DType::BF16);
    assert_eq!(b[3].to_f32(), 300.0);
    assert_eq!(b[5].to_f32(), 2f32.powi(-24));
    // From integers and f64: to f32 first.
    let ints = HostTensor::from_vec(&[3], vec![i64::MAX, -70000, 2049]).unwrap();
    let outs = casts_from(&ints);
    let h = out::<f16>(&outs, DType::F16);
    assert_eq!(h[0], f16::INFINITY);
    assert_eq!(h[1], f16::NEG_INFINITY);
    assert_eq!(h[2].to_f32(), 2048.0); // 2049 ties to even
    let wide = HostTensor::from_vec(&[2], vec![1e300f64, 1.0 + 2f64.powi(-9)]).unwrap();
    let outs = casts_from(&wide);
    assert_eq!(out::<bf16>(&outs, DType::BF16)[0], bf16::INFINITY);
    assert_eq!(out::<bf16>(&outs, DType::BF16)[1].to_f32(), 1.0);
}

#[test]
fn half_literals_and_locals_agree() {
    // A literal rounded into the half type, a local tensor filled with one, a select.
    for d in [DType::F16, DType::BF16] {
        let n = 8u64;
        let mut b = Builder::new("half_literals", &[n]);
        b.input(d, &[n]);
        b.output(d, &[n]);
        let loc = b.local(d, &[2], Literal::Float(0.1));
        let i = b.position(0);
        let x = b.read(IN, 0, &[i]);
        let c = b.constant(d, Literal::Float(1.0 / 3.0));
        let zero = b.i64(0);
        let l = b.read(common::LOC, loc, &[zero]);
        let y = b.op(Op::Mul, &[x, c]);
        let y = b.op(Op::Add, &[y, l]);
        let pos = b.op(Op::Gt, &[x, c]);
        let z = b.push(Op::Select, Some(d), &[pos, y, x]);
        b.write(OUT, 0, &[i], z);
        let values: Vec<f32> = (0..n).map(|k| k as f32 * 0.25 - 0.5).collect();
        let out = agree(&b.build(), &[&half_tensor(d, &values)]);
        // Independently: each operation rounded to the half type.
        let round = |v: f32| ovl_ir::half_float::round(d, v);
        let (third, tenth) = (round(1.0 / 3.0), round(0.1));
        for (k, &v) in values.iter().enumerate() {
            let x = round(v);
            let want = if x > third {
                round(round(x * third) + tenth)
            } else {
                x
            };
            let got = match d {
                DType::F16 => out[0].as_slice::<f16>().unwrap()[k].to_f32(),
                _ => out[0].as_slice::<bf16>().unwrap()[k].to_f32(),
            };
            assert_eq!(got, want, "{d} element {k}");
        }
    }
}

#[test]
fn every_half_value_widens_and_f32_values_round_like_the_half_crate() {
    // All 65536 bit patterns of each half type to f32 and back, and f32 values spread over
    // every exponent (subnormals, ties and overflow included) to both half types, with NaN
    // payloads compared exactly against the `half` crate.
    let all: Vec<u16> = (0..=u16::MAX).collect();
    let halves = [
        HostTensor::from_vec(
            &[all.len()],
            all.iter().map(|&b| f16::from_bits(b)).collect(),
        )
        .unwrap(),
        HostTensor::from_vec(
            &[all.len()],
            all.iter().map(|&b| bf16::from_bits(b)).collect(),
        )
        .unwrap(),
    ];
    for input in &halves {
        let outs = casts_from(input);
        let f = out::<f32>(&outs, DType::F32);
        for (k, &b) in all.iter().enumerate() {
            let want = ovl_ir::half_float::from_bits(input.dtype(), b).unwrap();
            assert_eq!(f[k].to_bits(), want.to_bits(), "{} {b:#06x}", input.dtype());
        }
    }
    let floats: Vec<f32> = (0..1u32 << 16)
        .map(|k| f32::from_bits(k.wrapping_mul(0x9e37_79b9) ^ (k << 16)))
        .collect();
    let input = HostTensor::from_vec(&[floats.len()], floats.clone()).unwrap();
    let outs = casts_from(&input);
    for (k, &x) in floats.iter().enumerate() {
        let h = out::<f16>(&outs, DType::F16)[k];
        let b = out::<bf16>(&outs, DType::BF16)[k];
        assert_eq!(
            h.to_bits(),
            f16::from_f32(x).to_bits(),
            "{x:e} ({:#010x})",
            x.to_bits()
        );
        assert_eq!(
            b.to_bits(),
            bf16::from_f32(x).to_bits(),
            "{x:e} ({:#010x})",
            x.to_bits()
        );
    }
}
