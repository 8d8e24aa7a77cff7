//! Hand-built IR programs shared by the tests of every crate: defined once here, run on every
//! backend (the interpreter, C++ and CUDA: `ovl-codegen/tests/fixtures.rs`) and pinned by golden
//! files (the generated C++ and CUDA, `ovl-codegen/tests/golden/`; the IR text,
//! `ovl-ir/tests/golden/text/`).
//!
//! [`all`] lists the programs with inputs that run without a fault; together they cover the IR
//! constructs: elementwise arithmetic on several dtypes, casts, math functions, comparisons and
//! select, if/else, staged `for` (RANGE) and `while` loops, variables, local tensors,
//! data-dependent (bounds-checked) indices and several outputs. The builders that take sizes
//! are public so that tests can make other instances of the same program.
//!
//! Every program is built with [`crate::builder::Builder`] and passes
//! [`crate::validate::validate`] (checked by the tests of this module). Changing a program here
//! changes golden files: rerun the tests with `OVL_BLESS=1` and review the diff.

mod symbolic;
pub use symbolic::{
    sym_elementwise, sym_row_sum, sym_shifted_read, sym_symbol_loop, sym_transpose, symbolic,
    SymbolicFixture,
};

use crate::builder::{Builder, IN, LOC, OUT};
use crate::dtype::{DType, Literal};
use crate::host::{HostTensor, Scalar};
use crate::ir::{self, Op};

/// A named program and inputs to run it with.
#[derive(Clone, Debug)]
pub struct Fixture {
    /// The program's name (its `ExpressionDag::name`), used as the name of its golden files.
    pub name: &'static str,
    /// What the program covers, in a few words.
    pub covers: &'static str,
    /// The program.
    pub dag: ir::ExpressionDag,
    /// One tensor per input of the program, in bounds for every data-dependent index.
    pub inputs: Vec<HostTensor>,
    /// How far (in units in the last place) an f32 result of a backend may be from the
    /// interpreter's: 0 (bit for bit) except where the program uses f32 `exp`, `tanh` or
    /// `sigmoid`, which generated C++ computes with the prelude's own approximations.
    pub f32_ulps: u32,
}

fn tensor<T: Scalar>(shape: &[usize], f: impl Fn(usize) -> T) -> HostTensor {
    let n = shape.iter().product();
    HostTensor::from_vec(shape, (0..n).map(f).collect::<Vec<T>>()).expect("shape matches")
}

fn fixture(
    name: &'static str,
    covers: &'static str,
    dag: ir::ExpressionDag,
    inputs: Vec<HostTensor>,
) -> Fixture {
    debug_assert_eq!(dag.name, name);
    Fixture {
        name,
        covers,
        dag,
        inputs,
        f32_ulps: 0,
    }
}

/// Every fixture, in a fixed order.
pub fn all() -> Vec<Fixture> {
    vec![
        fixture(
            "reductions",
            "accumulators (sum, max, i32 product) over a constant and a runtime-step loop",
            reductions(4, 21),
            vec![
                tensor(&[4, 21], |k| ((k * 37) % 23) as f32 * 0.61 - 6.5),
                tensor(&[4, 21], |k| (k % 7) as i32 - 3),
            ],
        ),
        fixture(
            "column_stats",
            "per column of a row-major tensor (C++: 64 workers in lockstep, then the rest one by \
             one): sum, max (NaN never wins), a scaled sum of squares of values computed before \
             the loops, an i32 product with wrapping, a sequential fold into a variable",
            column_stats(7, 150),
            vec![
                tensor(&[7, 150], |k| match k {
                    5 | 311 => f32::NAN,
                    _ => ((k * 53) % 31) as f32 * 0.37 - 5.0,
                }),
                tensor(&[7, 150], |k| (k % 9) as i32 * 977 - 3000),
            ],
        ),
        fixture(
            "add_2d",
            "f32 elementwise add over a 2-D workgroup",
            add_2d(4, 5),
            vec![
                tensor(&[4, 5], |k| k as f32 * 0.5),
                tensor(&[4, 5], |k| 1000.0 - k as f32),
            ],
        ),
        fixture(
            "int_arith",
            "wrapping integer arithmetic on i8, u16 and i64 (division by zero is 0), three outputs",
            int_arith(12),
            vec![
                tensor(&[12], |k| [0i8, 1, -1, 7, -7, 100, -100, i8::MIN, i8::MAX, 3, -3, 2][k]),
                tensor(&[12], |k| [0i8, 0, -1, 2, 3, -3, 7, -1, 1, 0, 5, i8::MIN][k]),
                tensor(&[12], |k| [0u16, 1, 2, 300, 65535, 32768, 7, 9, 11, 255, 256, 1][k]),
                tensor(&[12], |k| {
                    [0i64, -1, 1 << 40, i64::MIN, i64::MAX, -5, 5, 12, -12, 3, 1, 2][k]
                }),
            ],
        ),
        fixture(
            "casts",
            "casts: f32 to i32 and u8 (saturating), i64 to u8 (wrapping), u64 to f64, bool to f32, \
             f32 to bool",
            casts(10),
            vec![
                tensor(&[10], |k| {
                    [
                        0.0f32,
                        -0.0,
                        1.5,
                        -1.5,
                        300.0,
                        -300.0,
                        3e9,
                        f32::INFINITY,
                        f32::NAN,
                        f32::NEG_INFINITY,
                    ][k]
                }),
                tensor(&[10], |k| {
                    [0i64, 1, -1, 255, 256, -129, i64::MIN, i64::MAX, 1 << 53, 65535][k]
                }),
                tensor(&[10], |k| {
                    [0u64, 1, u64::MAX, 1 << 63, (1 << 53) + 1, 7, 9, 11, 13, 15][k]
                }),
                tensor(&[10], |k| k % 3 == 0),
            ],
        ),
        fixture(
            "math_f32",
            "f32 math functions of the C library: sqrt, log1p, sin, atan, floor, round, abs, \
             isnan; four outputs",
            math_f32(10),
            vec![tensor(&[10], |k| {
                [
                    0.0f32,
                    -0.0,
                    0.25,
                    -0.75,
                    2.5,
                    -3.5,
                    88.0,
                    f32::INFINITY,
                    f32::NAN,
                    1e-30,
                ][k]
            })],
        ),
        Fixture {
            f32_ulps: 8,
            ..fixture(
                "math_f32_prelude",
                "f32 exp, tanh and sigmoid (the C++ prelude's own approximations)",
                math_f32_prelude(8),
                vec![tensor(&[8], |k| {
                    [0.0f32, -0.0, 0.25, -0.75, 2.5, -3.5, 20.0, -90.0][k]
                })],
            )
        },
        fixture(
            "math_f64",
            "f64 math: exp, sigmoid, erf, pow, atan2, log, tanh, isinf",
            math_f64(9),
            vec![
                tensor(&[9], |k| {
                    [0.0f64, -0.0, 0.5, -1.25, 3.0, 10.0, -700.0, f64::INFINITY, f64::NAN][k]
                }),
                tensor(&[9], |k| [1.0f64, -1.0, 2.0, 0.5, -3.0, 0.0, 4.0, 1.0, 2.0][k]),
            ],
        ),
        fixture(
            "select",
            "comparisons, and / or / not on bool, select; two outputs",
            select_logic(),
            vec![HostTensor::from_vec(
                &[8],
                vec![-1.0f64, 0.0, 1.0, 9.5, 10.0, 20.0, f64::NAN, 5.0],
            )
            .expect("8 elements")],
        ),
        fixture(
            "fma",
            "f64 fused multiply-add against a separate multiply and add; two outputs",
            fma(),
            vec![
                HostTensor::from_vec(&[4], vec![1.0 + f64::EPSILON, 0.1, 3.0, 1e308])
                    .expect("4 elements"),
                HostTensor::from_vec(&[4], vec![1.0 - f64::EPSILON, 0.2, 7.0, 10.0])
                    .expect("4 elements"),
                HostTensor::from_vec(&[4], vec![-1.0, -0.02, 1.0, -1e308]).expect("4 elements"),
            ],
        ),
        fixture(
            "branches",
            "nested if / else assigning a variable",
            branches(),
            vec![HostTensor::from_vec(
                &[11],
                vec![-5i32, -1, 0, 1, 2, 3, i32::MIN, i32::MAX, 0, -7, 100],
            )
            .expect("11 elements")],
        ),
        fixture(
            "stencil",
            "neighbours read under guards (`if i > 0 { x[i - 1] }`, `if i < n - 1 { x[i + 1] }`): \
             the interval analysis proves them in bounds, so no index is checked",
            stencil(9),
            vec![tensor(&[9], |k| (k * k) as f32 - 3.0)],
        ),
        fixture(
            "cumsum",
            "a staged for loop (RANGE, step 2) accumulating in a variable, writing in the loop",
            cumsum(6, 9, 2),
            vec![tensor(&[6, 9], |k| (k as f64).sqrt())],
        ),
        fixture(
            "runtime_range",
            "a staged for loop whose start, end and step are computed at run time (step checked)",
            runtime_range(40),
            vec![],
        ),
        fixture(
            "matmul",
            "a reduction loop with FMA over a 2-D workgroup (f64 matrix product)",
            matmul(3, 4, 2),
            vec![
                tensor(&[3, 4], |k| k as f64),
                tensor(&[4, 2], |k| 1.0 + k as f64),
            ],
        ),
        fixture(
            "collatz",
            "a while loop with an if / else inside, u64 and u32 variables",
            collatz(16),
            vec![tensor(&[16], |k| (k as u64 + 1) * 7 + 1)],
        ),
        fixture(
            "reverse_rows",
            "local tensors: one filled, written and read in loops, one filled only in a branch",
            reverse_rows(5, 8),
            vec![tensor(&[5, 8], |k| k as f32)],
        ),
        fixture(
            "gather",
            "a data-dependent index (out[i] = values[idx[i]]): a bounds-checked read",
            gather(10, 6),
            vec![
                tensor(&[10], |k| k as f32 + 0.5),
                HostTensor::from_vec(&[6], vec![1i32, 9, 0, 3, 4, 0]).expect("6 elements"),
            ],
        ),
        fixture(
            "literals_and_control",
            "constants of every dtype (infinities and NaN too), a local tensor, a while loop, \
             select and float-to-integer casts; no inputs",
            literals_and_control(),
            vec![],
        ),
    ]
}

/// `add_2d`: out[i, j] = a[i, j] + b[i, j] over a 2-D workgroup of f32.
pub fn add_2d(rows: u64, cols: u64) -> ir::ExpressionDag {
    let mut b = Builder::new("add_2d", &[rows, cols]);
    b.input(DType::F32, &[rows, cols]);
    b.input(DType::F32, &[rows, cols]);
    b.output(DType::F32, &[rows, cols]);
    let i = b.position(0);
    let j = b.position(1);
    let x = b.read(IN, 0, &[i, j]);
    let y = b.read(IN, 1, &[i, j]);
    let s = b.op(Op::Add, &[x, y]);
    b.write(OUT, 0, &[i, j], s);
    b.build()
}

/// `int_arith`: inputs a, b: i8, u: u16, w: i64; outputs a * b - a / b + a % b (i8),
/// u * u - u / 3 (u16), max(min(-w, w + 1), abs(w)) and !w (i64): wrapping arithmetic.
pub fn int_arith(n: u64) -> ir::ExpressionDag {
    let mut b = Builder::new("int_arith", &[n]);
    b.input(DType::I8, &[n]);
    b.input(DType::I8, &[n]);
    b.input(DType::U16, &[n]);
    b.input(DType::I64, &[n]);
    b.output(DType::I8, &[n]);
    b.output(DType::U16, &[n]);
    b.output(DType::I64, &[n]);
    b.output(DType::I64, &[n]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let y = b.read(IN, 1, &[i]);
    let m = b.op(Op::Mul, &[x, y]);
    let d = b.op(Op::Div, &[x, y]);
    let r = b.op(Op::Mod, &[x, y]);
    let s = b.op(Op::Sub, &[m, d]);
    let s = b.op(Op::Add, &[s, r]);
    b.write(OUT, 0, &[i], s);
    let u = b.read(IN, 2, &[i]);
    let three = b.constant(DType::U16, Literal::UInt(3));
    let uu = b.op(Op::Mul, &[u, u]);
    let u3 = b.op(Op::Div, &[u, three]);
    let v = b.op(Op::Sub, &[uu, u3]);
    b.write(OUT, 1, &[i], v);
    let w = b.read(IN, 3, &[i]);
    let one = b.i64(1);
    let nw = b.op(Op::Neg, &[w]);
    let w1 = b.op(Op::Add, &[w, one]);
    let lo = b.op(Op::Min, &[nw, w1]);
    let aw = b.op(Op::Abs, &[w]);
    let hi = b.op(Op::Max, &[lo, aw]);
    b.write(OUT, 2, &[i], hi);
    let not = b.op(Op::Not, &[w]);
    b.write(OUT, 3, &[i], not);
    b.build()
}

/// `casts`: inputs f: f32, s: i64, u: u64, c: bool; outputs f as i32, f as u8, s as u8,
/// u as f64, c as f32, f as bool.
pub fn casts(n: u64) -> ir::ExpressionDag {
    let mut b = Builder::new("casts", &[n]);
    b.input(DType::F32, &[n]);
    b.input(DType::I64, &[n]);
    b.input(DType::U64, &[n]);
    b.input(DType::Bool, &[n]);
    let i = b.position(0);
    let f = b.read(IN, 0, &[i]);
    let s = b.read(IN, 1, &[i]);
    let u = b.read(IN, 2, &[i]);
    let c = b.read(IN, 3, &[i]);
    for (k, (x, to)) in [
        (f, DType::I32),
        (f, DType::U8),
        (s, DType::U8),
        (u, DType::F64),
        (c, DType::F32),
        (f, DType::Bool),
    ]
    .into_iter()
    .enumerate()
    {
        b.output(to, &[n]);
        let y = b.cast(x, to);
        b.write(OUT, k as u32, &[i], y);
    }
    b.build()
}

/// `math_f32`: outputs sqrt(|x|) + log1p(|x|), sin(x) * atan(x), floor(x) - round(x), isnan(x).
pub fn math_f32(n: u64) -> ir::ExpressionDag {
    let mut b = Builder::new("math_f32", &[n]);
    b.input(DType::F32, &[n]);
    for d in [DType::F32, DType::F32, DType::F32, DType::Bool] {
        b.output(d, &[n]);
    }
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let a = b.op(Op::Abs, &[x]);
    let s = b.op(Op::Sqrt, &[a]);
    let l = b.op(Op::Log1p, &[a]);
    let y = b.op(Op::Add, &[s, l]);
    b.write(OUT, 0, &[i], y);
    let sn = b.op(Op::Sin, &[x]);
    let at = b.op(Op::Atan, &[x]);
    let y = b.op(Op::Mul, &[sn, at]);
    b.write(OUT, 1, &[i], y);
    let fl = b.op(Op::Floor, &[x]);
    let ro = b.op(Op::Round, &[x]);
    let y = b.op(Op::Sub, &[fl, ro]);
    b.write(OUT, 2, &[i], y);
    let nan = b.op(Op::Isnan, &[x]);
    b.write(OUT, 3, &[i], nan);
    b.build()
}

/// `math_f32_prelude`: outputs exp(x), tanh(x), sigmoid(x) on f32.
pub fn math_f32_prelude(n: u64) -> ir::ExpressionDag {
    let mut b = Builder::new("math_f32_prelude", &[n]);
    b.input(DType::F32, &[n]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    for (k, op) in [Op::Exp, Op::Tanh, Op::Sigmoid].into_iter().enumerate() {
        b.output(DType::F32, &[n]);
        let y = b.op(op, &[x]);
        b.write(OUT, k as u32, &[i], y);
    }
    b.build()
}

/// `math_f64`: inputs x, y: f64; outputs exp(x) + sigmoid(x), erf(x) * pow(|y|, 2.5),
/// atan2(x, y) - log(|y|) + tanh(x), isinf(x).
pub fn math_f64(n: u64) -> ir::ExpressionDag {
    let mut b = Builder::new("math_f64", &[n]);
    b.input(DType::F64, &[n]);
    b.input(DType::F64, &[n]);
    for d in [DType::F64, DType::F64, DType::F64, DType::Bool] {
        b.output(d, &[n]);
    }
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let y = b.read(IN, 1, &[i]);
    let e = b.op(Op::Exp, &[x]);
    let s = b.op(Op::Sigmoid, &[x]);
    let r = b.op(Op::Add, &[e, s]);
    b.write(OUT, 0, &[i], r);
    let er = b.op(Op::Erf, &[x]);
    let ay = b.op(Op::Abs, &[y]);
    let two_half = b.f64(2.5);
    let p = b.op(Op::Pow, &[ay, two_half]);
    let r = b.op(Op::Mul, &[er, p]);
    b.write(OUT, 1, &[i], r);
    let a2 = b.op(Op::Atan2, &[x, y]);
    let l = b.op(Op::Log, &[ay]);
    let t = b.op(Op::Tanh, &[x]);
    let r = b.op(Op::Sub, &[a2, l]);
    let r = b.op(Op::Add, &[r, t]);
    b.write(OUT, 2, &[i], r);
    let inf = b.op(Op::Isinf, &[x]);
    b.write(OUT, 3, &[i], inf);
    b.build()
}

/// `select` (8 workers): out0[i] = x in (0, 10) ? x : 0; out1[i] = exactly one of x > 0 and
/// x < 10 holds.
pub fn select_logic() -> ir::ExpressionDag {
    let n = 8u64;
    let mut b = Builder::new("select", &[n]);
    b.input(DType::F64, &[n]);
    b.output(DType::F64, &[n]);
    b.output(DType::Bool, &[n]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let zero = b.f64(0.0);
    let ten = b.f64(10.0);
    let pos = b.op(Op::Gt, &[x, zero]);
    let small = b.op(Op::Lt, &[x, ten]);
    let both = b.op(Op::And, &[pos, small]);
    let either = b.op(Op::Or, &[pos, small]);
    let not_both = b.op(Op::Not, &[both]);
    let r = b.op(Op::Select, &[both, x, zero]);
    b.write(OUT, 0, &[i], r);
    let flag = b.op(Op::And, &[either, not_both]);
    b.write(OUT, 1, &[i], flag);
    b.build()
}

/// `fma` (4 workers, f64): out0 = fma(x, y, z) (one rounding), out1 = x * y + z (two).
pub fn fma() -> ir::ExpressionDag {
    let n = 4u64;
    let mut b = Builder::new("fma", &[n]);
    for _ in 0..3 {
        b.input(DType::F64, &[n]);
    }
    b.output(DType::F64, &[n]);
    b.output(DType::F64, &[n]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let y = b.read(IN, 1, &[i]);
    let z = b.read(IN, 2, &[i]);
    let f = b.op(Op::Fma, &[x, y, z]);
    b.write(OUT, 0, &[i], f);
    let m = b.op(Op::Mul, &[x, y]);
    let s = b.op(Op::Add, &[m, z]);
    b.write(OUT, 1, &[i], s);
    b.build()
}

/// `branches` (11 workers, i32):
/// out[i] = if x[i] > 0 { x[i] * 2 } else if x[i] == 0 { 7 } else { -x[i] }.
pub fn branches() -> ir::ExpressionDag {
    let n = 11u64;
    let mut b = Builder::new("branches", &[n]);
    b.input(DType::I32, &[n]);
    b.output(DType::I32, &[n]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let zero = b.i32(0);
    let r = b.var(zero);
    let pos = b.op(Op::Gt, &[x, zero]);
    b.if_(pos);
    let two = b.i32(2);
    let d = b.op(Op::Mul, &[x, two]);
    b.assign(r, d);
    b.else_();
    let is0 = b.op(Op::Eq, &[x, zero]);
    b.if_(is0);
    let seven = b.i32(7);
    b.assign(r, seven);
    b.else_();
    let nx = b.op(Op::Neg, &[x]);
    b.assign(r, nx);
    b.end_if();
    b.end_if();
    b.write(OUT, 0, &[i], r);
    b.build()
}

/// `stencil`: out[i] = x[i - 1] (when i > 0) + x[i] + x[i + 1] (when i < n - 1), f32, the sum
/// in a variable.
pub fn stencil(n: u64) -> ir::ExpressionDag {
    let mut b = Builder::new("stencil", &[n]);
    b.input(DType::F32, &[n]);
    b.output(DType::F32, &[n]);
    let i = b.position(0);
    let centre = b.read(IN, 0, &[i]);
    let sum = b.var(centre);
    let zero = b.i64(0);
    let one = b.i64(1);
    let has_left = b.op(Op::Gt, &[i, zero]);
    b.if_(has_left);
    let left = b.op(Op::Sub, &[i, one]);
    let l = b.read(IN, 0, &[left]);
    let with_left = b.op(Op::Add, &[sum, l]);
    b.assign(sum, with_left);
    b.end_if();
    let last = b.i64(n as i64 - 1);
    let has_right = b.op(Op::Lt, &[i, last]);
    b.if_(has_right);
    let right = b.op(Op::Add, &[i, one]);
    let r = b.read(IN, 0, &[right]);
    let with_right = b.op(Op::Add, &[sum, r]);
    b.assign(sum, with_right);
    b.end_if();
    b.write(OUT, 0, &[i], sum);
    b.build()
}

/// `cumsum`: out[r, j] = x[r, 0] + x[r, step] + ... + x[r, j] for j a multiple of `step` (0
/// elsewhere), one worker per row of f64 (RANGE + VARIABLE, a write inside the loop).
pub fn cumsum(rows: u64, cols: u64, step: i64) -> ir::ExpressionDag {
    let mut b = Builder::new("cumsum", &[rows]);
    b.input(DType::F64, &[rows, cols]);
    b.output(DType::F64, &[rows, cols]);
    let r = b.position(0);
    let zero = b.f64(0.0);
    let acc = b.var(zero);
    let start = b.i64(0);
    let end = b.i64(cols as i64);
    let st = b.i64(step);
    let j = b.range(start, end, st);
    let x = b.read(IN, 0, &[r, j]);
    let s = b.op(Op::Add, &[acc, x]);
    b.assign(acc, s);
    b.write(OUT, 0, &[r, j], acc);
    b.end_range();
    b.build()
}

/// `reductions`: per row of `x: f32[rows, cols]`, a sum, a max (accumulators, 8 lanes) and an
/// i32 product over a strided loop with a runtime step; three outputs.
pub fn reductions(rows: u64, cols: u64) -> ir::ExpressionDag {
    use crate::ops::Combiner;
    let mut b = Builder::new("reductions", &[rows]);
    b.input(DType::F32, &[rows, cols]);
    b.input(DType::I32, &[rows, cols]);
    b.output(DType::F32, &[rows]);
    b.output(DType::F32, &[rows]);
    b.output(DType::I32, &[rows]);
    let r = b.position(0);
    let zero = b.f32(0.0);
    let sum = b.accumulator(Combiner::Sum, zero);
    let low = b.f32(f32::NEG_INFINITY);
    let max = b.accumulator(Combiner::Max, low);
    let start = b.i64(0);
    let end = b.i64(cols as i64);
    let one = b.i64(1);
    let j = b.range(start, end, one);
    let x = b.read(IN, 0, &[r, j]);
    b.accumulate(sum, x);
    b.accumulate(max, x);
    b.end_range();
    b.write(OUT, 0, &[r], sum);
    b.write(OUT, 1, &[r], max);
    let first = b.read(IN, 1, &[r, start]);
    let product = b.accumulator(Combiner::Product, first);
    let two = b.i64(2);
    let step = b.op(Op::Add, &[r, one]);
    let step = b.op(Op::Max, &[step, two]);
    let k = b.range(one, end, step);
    let y = b.read(IN, 1, &[r, k]);
    b.accumulate(product, y);
    b.end_range();
    b.write(OUT, 2, &[r], product);
    b.build()
}

/// `column_stats`: per column `c` of `x: f32[rows, cols]` (a worker per column), the sum and
/// the max over every row, `sum((x - x[0, c] * 0.5)^2) * 0.25` over rows `0, 3, 6, ...` and
/// the wrapping i32 product of `y[.., c]`, and the fold `v = v * 0.5 + x[k, c]` into a
/// variable (after the product's loop, in the same loop); five outputs. The reads' last index
/// is the worker's position, so the C++ backend runs its workers in blocks.
pub fn column_stats(rows: u64, cols: u64) -> ir::ExpressionDag {
    use crate::ops::Combiner;
    let mut b = Builder::new("column_stats", &[cols]);
    b.input(DType::F32, &[rows, cols]);
    b.input(DType::I32, &[rows, cols]);
    b.output(DType::F32, &[cols]);
    b.output(DType::F32, &[cols]);
    b.output(DType::F32, &[cols]);
    b.output(DType::I32, &[cols]);
    b.output(DType::F32, &[cols]);
    let c = b.position(0);
    let zero = b.i64(0);
    let first = b.read(IN, 0, &[zero, c]);
    let half = b.f32(0.5);
    let centre = b.op(Op::Mul, &[first, half]);
    let fzero = b.f32(0.0);
    let sum = b.accumulator(Combiner::Sum, fzero);
    let low = b.f32(f32::NEG_INFINITY);
    let max = b.accumulator(Combiner::Max, low);
    let end = b.i64(rows as i64);
    let one = b.i64(1);
    let k = b.range(zero, end, one);
    let x = b.read(IN, 0, &[k, c]);
    b.accumulate(sum, x);
    b.accumulate(max, x);
    b.end_range();
    let squares = b.accumulator(Combiner::Sum, fzero);
    let three = b.i64(3);
    let k = b.range(zero, end, three);
    let x = b.read(IN, 0, &[k, c]);
    let d = b.op(Op::Sub, &[x, centre]);
    let d2 = b.op(Op::Mul, &[d, d]);
    b.accumulate(squares, d2);
    b.end_range();
    let ione = b.i32(1);
    let product = b.accumulator(Combiner::Product, ione);
    let fold = b.var(fzero);
    let k = b.range(zero, end, one);
    let y = b.read(IN, 1, &[k, c]);
    b.accumulate(product, y);
    let x = b.read(IN, 0, &[k, c]);
    let decayed = b.op(Op::Mul, &[fold, half]);
    let next = b.op(Op::Add, &[decayed, x]);
    b.assign(fold, next);
    b.end_range();
    let quarter = b.f32(0.25);
    let scaled = b.op(Op::Mul, &[squares, quarter]);
    b.write(OUT, 0, &[c], sum);
    b.write(OUT, 1, &[c], max);
    b.write(OUT, 2, &[c], scaled);
    b.write(OUT, 3, &[c], product);
    b.write(OUT, 4, &[c], fold);
    b.build()
}

/// `runtime_range`: worker i sums k for k in (i .. 3 * i + 7).step_by(i + 1) (i64).
pub fn runtime_range(n: u64) -> ir::ExpressionDag {
    let mut b = Builder::new("runtime_range", &[n]);
    b.output(DType::I64, &[n]);
    let i = b.position(0);
    let zero = b.i64(0);
    let acc = b.var(zero);
    let three = b.i64(3);
    let seven = b.i64(7);
    let one = b.i64(1);
    let end = b.op(Op::Mul, &[i, three]);
    let end = b.op(Op::Add, &[end, seven]);
    let step = b.op(Op::Add, &[i, one]);
    let k = b.range(i, end, step);
    let s = b.op(Op::Add, &[acc, k]);
    b.assign(acc, s);
    b.end_range();
    b.write(OUT, 0, &[i], acc);
    b.build()
}

/// `matmul`: out[i, j] = sum over q of a[i, q] * b[q, j] (f64, FMA in a RANGE loop).
pub fn matmul(m: u64, k: u64, n: u64) -> ir::ExpressionDag {
    let mut b = Builder::new("matmul", &[m, n]);
    b.input(DType::F64, &[m, k]);
    b.input(DType::F64, &[k, n]);
    b.output(DType::F64, &[m, n]);
    let i = b.position(0);
    let j = b.position(1);
    let zero = b.f64(0.0);
    let acc = b.var(zero);
    let (s, e, st) = (b.i64(0), b.i64(k as i64), b.i64(1));
    let q = b.range(s, e, st);
    let a = b.read(IN, 0, &[i, q]);
    let bb = b.read(IN, 1, &[q, j]);
    let f = b.op(Op::Fma, &[a, bb, acc]);
    b.assign(acc, f);
    b.end_range();
    b.write(OUT, 0, &[i, j], acc);
    b.build()
}

/// `collatz`: out[i] = the number of Collatz steps from x[i] (u64) to 1, as u32.
pub fn collatz(n: u64) -> ir::ExpressionDag {
    let mut b = Builder::new("collatz", &[n]);
    b.input(DType::U64, &[n]);
    b.output(DType::U32, &[n]);
    let i = b.position(0);
    let x0 = b.read(IN, 0, &[i]);
    let x = b.var(x0);
    let zero32 = b.constant(DType::U32, Literal::UInt(0));
    let steps = b.var(zero32);
    let one = b.constant(DType::U64, Literal::UInt(1));
    let two = b.constant(DType::U64, Literal::UInt(2));
    let three = b.constant(DType::U64, Literal::UInt(3));
    let zero = b.constant(DType::U64, Literal::UInt(0));
    let one32 = b.constant(DType::U32, Literal::UInt(1));
    b.while_begin();
    let c = b.op(Op::Gt, &[x, one]);
    b.while_cond(c);
    let m = b.op(Op::Mod, &[x, two]);
    let even = b.op(Op::Eq, &[m, zero]);
    b.if_(even);
    let h = b.op(Op::Div, &[x, two]);
    b.assign(x, h);
    b.else_();
    let t = b.op(Op::Mul, &[x, three]);
    let t = b.op(Op::Add, &[t, one]);
    b.assign(x, t);
    b.end_if();
    let s = b.op(Op::Add, &[steps, one32]);
    b.assign(steps, s);
    b.while_end();
    b.write(OUT, 0, &[i], steps);
    b.build()
}

/// `reverse_rows`: each worker reverses its row of f32 through a local tensor (out0), and
/// out1[r] = counter[1] + 1 where the i32 local `counter` is filled with 40 only for even rows
/// (so it reads as zero in odd ones).
pub fn reverse_rows(rows: u64, cols: u64) -> ir::ExpressionDag {
    let mut b = Builder::new("reverse_rows", &[rows]);
    b.input(DType::F32, &[rows, cols]);
    b.output(DType::F32, &[rows, cols]);
    b.output(DType::I32, &[rows]);
    let r = b.position(0);
    let buf = b.local(DType::F32, &[cols], Literal::Float(-1.0));
    let counter = b.declare_local(DType::I32, &[2]);
    let zero = b.i64(0);
    let one = b.i64(1);
    let n = b.i64(cols as i64);
    let j = b.range(zero, n, one);
    let x = b.read(IN, 0, &[r, j]);
    b.write(LOC, buf, &[j], x);
    b.end_range();
    let last = b.i64(cols as i64 - 1);
    let j = b.range(zero, n, one);
    let src = b.op(Op::Sub, &[last, j]);
    let v = b.read(LOC, buf, &[src]);
    b.write(OUT, 0, &[r, j], v);
    b.end_range();
    let two = b.i64(2);
    let m = b.op(Op::Mod, &[r, two]);
    let even = b.op(Op::Eq, &[m, zero]);
    b.if_(even);
    b.local_fill(counter, Literal::Int(40));
    b.end_if();
    let c = b.read(LOC, counter, &[one]);
    let one32 = b.i32(1);
    let c = b.op(Op::Add, &[c, one32]);
    b.write(OUT, 1, &[r], c);
    b.build()
}

/// `gather`: out[i] = values[idx[i]] (f32 values of `n`, i32 indices of `m`): a data-dependent
/// index that needs a bounds check.
pub fn gather(n: u64, m: u64) -> ir::ExpressionDag {
    let mut b = Builder::new("gather", &[m]);
    b.input(DType::F32, &[n]);
    b.input(DType::I32, &[m]);
    b.output(DType::F32, &[m]);
    let i = b.position(0);
    let k = b.read(IN, 1, &[i]);
    let v = b.read(IN, 0, &[k]);
    b.write(OUT, 0, &[i], v);
    b.build()
}

/// `literals_and_control` (8 workers, no inputs): constants of every dtype (infinities and NaN
/// included) cast to i64 and summed (wrapping), a local tensor read in a while loop that counts
/// in steps of 3 up to 100 + i, a select and float-to-integer casts.
pub fn literals_and_control() -> ir::ExpressionDag {
    let mut b = Builder::new("literals_and_control", &[8]);
    b.output(DType::F32, &[8]);
    b.output(DType::F64, &[8]);
    b.output(DType::I64, &[8]);
    let i = b.position(0);
    let inf32 = b.f32(f32::INFINITY);
    let ninf32 = b.f32(f32::NEG_INFINITY);
    let nan32 = b.f32(f32::NAN);
    let inf64 = b.f64(f64::INFINITY);
    let nan64 = b.f64(f64::NAN);
    let mut ints = Vec::new();
    for (d, v) in [
        (DType::I8, Literal::Int(i8::MIN as i64)),
        (DType::I16, Literal::Int(i16::MIN as i64)),
        (DType::I32, Literal::Int(i32::MIN as i64)),
        (DType::I64, Literal::Int(i64::MIN)),
        (DType::U8, Literal::Int(u8::MAX as i64)),
        (DType::U16, Literal::Int(u16::MAX as i64)),
        (DType::U32, Literal::Int(u32::MAX as i64)),
        (DType::U64, Literal::UInt(u64::MAX)),
    ] {
        let c = b.constant(d, v);
        ints.push(b.cast(c, DType::I64));
    }
    let loc = b.local(DType::I64, &[8], Literal::Int(3));
    let m = b.boolean(true);
    let x = b.op(Op::Min, &[inf32, ninf32]);
    let y = b.op(Op::Max, &[x, nan32]);
    let z = b.op(Op::Add, &[inf64, nan64]);
    let cz = b.cast(z, DType::I64);
    let mut acc = b.var(cz);
    for v in ints {
        let s = b.op(Op::Add, &[acc, v]);
        b.assign(acc, s);
        acc = b.var(s);
    }
    // count = 0; while count < 100 + i { count += local[i] } (local[i] is 3).
    let zero = b.i64(0);
    let count = b.var(zero);
    b.while_begin();
    let hundred = b.i64(100);
    let lim = b.op(Op::Add, &[hundred, i]);
    let c = b.op(Op::Lt, &[count, lim]);
    b.while_cond(c);
    let r = b.read(LOC, loc, &[i]);
    let s = b.op(Op::Add, &[count, r]);
    b.assign(count, s);
    b.while_end();
    let sel = b.push(Op::Select, Some(DType::F32), &[m, y, inf32]);
    b.write(OUT, 0, &[i], sel);
    b.write(OUT, 1, &[i], z);
    let total = b.op(Op::Add, &[acc, count]);
    b.write(OUT, 2, &[i], total);
    b.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fixture_is_valid_named_uniquely_and_has_its_inputs() {
        let all = all();
        let mut names: Vec<&str> = all.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len(), "fixture names are unique");
        for f in &all {
            assert_eq!(f.dag.name, f.name);
            crate::validate::validate(&f.dag).unwrap_or_else(|e| panic!("{}: {e}", f.name));
            assert_eq!(f.inputs.len(), f.dag.inputs.len(), "{}", f.name);
            for (t, ty) in f.inputs.iter().zip(&f.dag.inputs) {
                assert_eq!(t.dtype().to_ir() as i32, ty.dtype, "{}", f.name);
                let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
                assert_eq!(shape, ty.shape, "{}", f.name);
            }
        }
    }

    #[test]
    fn the_fixtures_cover_the_ir_constructs() {
        let all = all();
        let has = |op: Op| {
            all.iter()
                .any(|f| f.dag.expressions.iter().any(|e| e.code == op as i32))
        };
        for op in [
            Op::Cast,
            Op::Select,
            Op::If,
            Op::Else,
            Op::Range,
            Op::WhileBegin,
            Op::Variable,
            Op::Assign,
            Op::LocalTensor,
            Op::Fma,
            Op::Sqrt,
            Op::Exp,
            Op::Erf,
            Op::Lt,
            Op::And,
            Op::Not,
        ] {
            assert!(has(op), "no fixture uses {op:?}");
        }
        let dtypes: std::collections::BTreeSet<i32> = all
            .iter()
            .flat_map(|f| f.dag.inputs.iter().chain(&f.dag.outputs))
            .map(|t| t.dtype)
            .collect();
        assert!(dtypes.len() >= 9, "{dtypes:?}");
        assert!(all.iter().any(|f| f.dag.outputs.len() >= 3));
    }
}
