//! Hand-built IR programs shared by the tests of every crate: defined once here, run on every
//! backend (the interpreter, C++ and CUDA: `ovl-codegen/tests/codegen/fixtures.rs`) and pinned by golden
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

mod columns;
mod programs;
mod rows;
mod symbolic;
pub use columns::{norm_columns, softmax_columns, sum_columns, sum_middle};
pub use programs::{
    add_2d, branches, casts, collatz, column_stats, cumsum, fma, gate_products, gather, int_arith,
    literals_and_control, math_f32, math_f32_prelude, math_f64, matmul, reductions, reverse_rows,
    runtime_range, select_logic, stencil,
};
pub use rows::{int_rows, norm_rows, softmax_rows};
pub use symbolic::{
    sym_elementwise, sym_row_sum, sym_shifted_read, sym_symbol_loop, sym_transpose, symbolic,
    SymbolicFixture,
};

use crate::host::{HostTensor, Scalar};
use crate::ir;

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
    /// interpreter's beyond the math contract (`crate::accuracy::output_ulps`, the bound of
    /// each output from the math functions it is computed from): 0 except where a program's
    /// inputs reach past the contract's per-function bounds.
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

/// Row kernels that a GPU runs with a group of threads per worker (`crate::cooperative`), one
/// of each width class, by name: for golden files and the cooperative tests, which make their
/// own inputs (they run at several sizes).
pub fn row_programs() -> Vec<(&'static str, ir::ExpressionDag)> {
    vec![
        ("softmax_rows_buffered", softmax_rows(5, 300, true)),
        ("norm_rows", norm_rows(9, 100)),
        ("int_rows", int_rows(3, 40)),
    ]
}

/// Column kernels that a GPU runs with a block of neighbouring workers times a few row-threads
/// (`crate::cooperative::Layout::Columns`), by name: for golden files and the cooperative
/// tests, which make their own inputs (they run at several sizes).
pub fn column_programs() -> Vec<(&'static str, ir::ExpressionDag)> {
    vec![
        ("sum_columns", sum_columns(300, 40)),
        ("softmax_columns_buffered", softmax_columns(100, 20, true)),
        ("norm_columns", norm_columns(64, 40)),
        ("sum_middle", sum_middle(3, 50, 20)),
    ]
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
            "gate_products",
            "four f32 products folded into variables at column offsets c + g * h, combined \
             (C++: blocks of 64 workers in lockstep recomputing the offset columns)",
            gate_products(3, 5, 70),
            vec![
                tensor(&[3, 5], |k| ((k * 13) % 11) as f32 * 0.25 - 1.0),
                tensor(&[5, 280], |k| ((k * 29) % 37) as f32 * 0.0625 - 1.0),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Op;

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
