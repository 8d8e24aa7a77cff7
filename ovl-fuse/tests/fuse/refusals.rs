//! One test per fusion refusal reason ([`Reason`]) that no other test reaches: a hand-built
//! graph of two operators that the merger refuses for exactly that reason, with the unfused
//! graph's result checked against values computed here (or its fault, where the graph faults).
//!
//! The other reasons are tested elsewhere: `OptLevel` (`optimize.rs`
//! `level_zero_refuses_everything`; the facade's `tests/fuse/fusion.rs` `opt_levels_one_and_two`),
//! `WouldCreateCycle` (`a_merge_that_would_make_a_cycle_is_refused`), `WriteInControlFlow`
//! (`cumsum_rows_then_cumsum_cols_is_refused_and_correct`), `PatternMismatch` and
//! `DifferentWorkgroup` (`transpose_then_add_is_refused_with_both_patterns`), `Stencil`
//! (`stencil_is_refused`) and `Broadcast` (`broadcast_read_is_refused`), all in the facade's
//! `tests/fuse/fusion.rs`. `ShapeMismatch` and `InvalidMerge` cannot be reached by a valid graph:
//! see the tests at the end.

use ovl_core::builder::{Builder, IN, OUT};
use ovl_core::interp::{interpret_with, InterpError, InterpOptions};
use ovl_fuse::{optimize, FuseError, FusionReport, OptLevel, Reason};
use ovl_ir::ir::{self, value_ref::Source, Op};
use ovl_ir::{DType, HostTensor};

/// Where an operator input or a graph output comes from.
#[derive(Clone, Copy)]
enum From {
    Input(u32),
    Op(u32, u32),
}

fn value(f: From) -> ir::ValueRef {
    ir::ValueRef {
        source: Some(match f {
            From::Input(k) => Source::GraphInput(k),
            From::Op(operator, output) => Source::OpOutput(ir::OperatorOutput { operator, output }),
        }),
    }
}

fn f32_type(shape: &[u64]) -> ir::TensorType {
    ir::TensorType {
        symbolic: Vec::new(),
        dtype: DType::F32.to_ir() as i32,
        shape: shape.to_vec(),
    }
}

/// A graph of `operators` (in topological order, each with where its inputs come from).
fn graph(
    inputs: Vec<ir::TensorType>,
    operators: Vec<(ir::ExpressionDag, Vec<From>)>,
    outputs: &[From],
) -> ir::OperatorDag {
    let (operators, wiring): (Vec<_>, Vec<_>) = operators.into_iter().unzip();
    ir::OperatorDag {
        symbols: Vec::new(),
        version: ovl_ir::IR_VERSION,
        operators,
        inputs,
        operator_inputs: wiring
            .into_iter()
            .map(|w: Vec<From>| ir::OperatorInputs {
                inputs: w.into_iter().map(value).collect(),
            })
            .collect(),
        outputs: outputs.iter().copied().map(value).collect(),
    }
}

/// Runs a graph operator by operator on the reference interpreter (outputs start at zero).
fn evaluate(dag: &ir::OperatorDag, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, InterpError> {
    let zeros = |op: &ir::ExpressionDag| -> Vec<HostTensor> {
        op.outputs
            .iter()
            .map(|t| {
                let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
                HostTensor::zeros(DType::from_ir(t.dtype).expect("dtype"), &shape)
            })
            .collect()
    };
    let fetch = |results: &[Vec<HostTensor>], v: &ir::ValueRef| -> HostTensor {
        match v.source.as_ref().expect("a source") {
            Source::GraphInput(k) => inputs[*k as usize].clone(),
            Source::OpOutput(o) => results[o.operator as usize][o.output as usize].clone(),
        }
    };
    let mut results: Vec<Vec<HostTensor>> = Vec::new();
    for (op, wiring) in dag.operators.iter().zip(&dag.operator_inputs) {
        let ins: Vec<HostTensor> = wiring.inputs.iter().map(|v| fetch(&results, v)).collect();
        let refs: Vec<&HostTensor> = ins.iter().collect();
        let mut outs = zeros(op);
        interpret_with(
            op,
            &refs,
            &mut outs,
            &InterpOptions {
                threads: Some(1),
                ..Default::default()
            },
        )?;
        results.push(outs);
    }
    Ok(dag.outputs.iter().map(|v| fetch(&results, v)).collect())
}

/// Fuses `dag` fully and asserts that nothing merged and that the only refusal is `want`
/// (compared by `matches`); returns the fused graph and the report.
fn refused(dag: &ir::OperatorDag, want: fn(&Reason) -> bool) -> (ir::OperatorDag, FusionReport) {
    let (fused, report) = optimize(dag.clone(), OptLevel::FULL).expect("a valid graph");
    assert_eq!(report.kernels_before, 2, "{report}");
    assert_eq!(report.kernels_after, 2, "{report}");
    assert!(report.merges.is_empty(), "{report}");
    assert_eq!(report.refusals.len(), 1, "{report}");
    let reason = &report.refusals[0].reason;
    assert!(want(reason), "unexpected reason: {reason:?}\n{report}");
    (fused, report)
}

fn f32s(t: &HostTensor) -> Vec<f32> {
    t.as_slice::<f32>().expect("f32").to_vec()
}

fn vector(v: &[f32]) -> HostTensor {
    HostTensor::from_vec(&[v.len()], v.to_vec()).expect("a vector")
}

/// `out[i] = x[i] + c` over `n` workers: the usual consumer.
fn add_const(n: u64, c: f32) -> ir::ExpressionDag {
    let mut b = Builder::new("add_const", &[n]);
    b.input(DType::F32, &[n]);
    b.output(DType::F32, &[n]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let k = b.f32(c);
    let y = b.op(Op::Add, &[x, k]);
    b.write(OUT, 0, &[i], y);
    b.build()
}

#[test]
fn never_written() {
    // The producer declares two outputs and writes only the first; the consumer reads the
    // second, which stays zero.
    let n = 4u64;
    let mut b = Builder::new("half_written", &[n]);
    b.input(DType::F32, &[n]);
    b.output(DType::F32, &[n]);
    b.output(DType::F32, &[n]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let two = b.f32(2.0);
    let y = b.op(Op::Mul, &[x, two]);
    b.write(OUT, 0, &[i], y);
    let dag = graph(
        vec![f32_type(&[n])],
        vec![
            (b.build(), vec![From::Input(0)]),
            (add_const(n, 1.0), vec![From::Op(0, 1)]),
        ],
        &[From::Op(1, 0), From::Op(0, 0)],
    );
    let (fused, report) = refused(&dag, |r| matches!(r, Reason::NeverWritten { output: 1 }));
    assert!(
        report
            .to_string()
            .contains("output 1 is never written by the producer"),
        "{report}"
    );
    let x = [1.0, -2.0, 3.5, 0.0];
    for g in [&dag, &fused] {
        let out = evaluate(g, &[vector(&x)]).expect("runs");
        assert_eq!(f32s(&out[0]), vec![1.0; 4]);
        assert_eq!(f32s(&out[1]), vec![2.0, -4.0, 7.0, 0.0]);
    }
}

#[test]
fn multiple_writes() {
    // out[i] = x[i]; out[i] = 3 * x[i]: two top-level writes of one output.
    let n = 4u64;
    let mut b = Builder::new("write_twice", &[n]);
    b.input(DType::F32, &[n]);
    b.output(DType::F32, &[n]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    b.write(OUT, 0, &[i], x);
    let three = b.f32(3.0);
    let y = b.op(Op::Mul, &[x, three]);
    b.write(OUT, 0, &[i], y);
    let dag = graph(
        vec![f32_type(&[n])],
        vec![
            (b.build(), vec![From::Input(0)]),
            (add_const(n, 1.0), vec![From::Op(0, 0)]),
        ],
        &[From::Op(1, 0)],
    );
    let (fused, report) = refused(&dag, |r| {
        matches!(
            r,
            Reason::MultipleWrites {
                output: 0,
                count: 2
            }
        )
    });
    assert!(
        report.to_string().contains("written 2 times per worker"),
        "{report}"
    );
    let x = [1.0, -2.0, 3.5, 0.25];
    for g in [&dag, &fused] {
        let out = evaluate(g, &[vector(&x)]).expect("runs");
        assert_eq!(f32s(&out[0]), vec![4.0, -5.0, 11.5, 1.75]);
    }
}

#[test]
fn opaque_write() {
    // A scatter: out[perm[i]] = x[i], the write index read from a tensor.
    let n = 4u64;
    let mut b = Builder::new("scatter", &[n]);
    b.input(DType::F32, &[n]);
    b.input(DType::I32, &[n]);
    b.output(DType::F32, &[n]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let k = b.read(IN, 1, &[i]);
    b.write(OUT, 0, &[k], x);
    let dag = graph(
        vec![
            f32_type(&[n]),
            ir::TensorType {
                symbolic: Vec::new(),
                dtype: DType::I32.to_ir() as i32,
                shape: vec![n],
            },
        ],
        vec![
            (b.build(), vec![From::Input(0), From::Input(1)]),
            (add_const(n, 0.5), vec![From::Op(0, 0)]),
        ],
        &[From::Op(1, 0)],
    );
    let (fused, report) = refused(
        &dag,
        |r| matches!(r, Reason::OpaqueWrite { output: 0, write } if write.affine().is_none()),
    );
    assert!(
        report
            .to_string()
            .contains("the write index of output 0 is opaque"),
        "{report}"
    );
    let x = [10.0, 20.0, 30.0, 40.0];
    let perm = HostTensor::from_vec(&[4], vec![2i32, 0, 3, 1]).expect("4 indices");
    // out[2] = 10, out[0] = 20, out[3] = 30, out[1] = 40.
    for g in [&dag, &fused] {
        let out = evaluate(g, &[vector(&x), perm.clone()]).expect("runs");
        assert_eq!(f32s(&out[0]), vec![20.5, 40.5, 10.5, 30.5]);
    }
}

#[test]
fn write_not_one_to_one() {
    // Workgroup [4, 2] writing out[p0]: both workers of a row write the same element.
    let mut b = Builder::new("duplicate_rows", &[4, 2]);
    b.input(DType::F32, &[4]);
    b.output(DType::F32, &[4]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    b.write(OUT, 0, &[i], x);
    let dag = graph(
        vec![f32_type(&[4])],
        vec![
            (b.build(), vec![From::Input(0)]),
            (add_const(4, 1.0), vec![From::Op(0, 0)]),
        ],
        &[From::Op(1, 0)],
    );
    let (fused, report) = refused(
        &dag,
        |r| matches!(r, Reason::WriteNotOneToOne { output: 0, write } if write.to_string() == "[p0]"),
    );
    assert!(
        report
            .to_string()
            .contains("the write [p0] of output 0 is not one element per worker"),
        "{report}"
    );
    let x = [1.0, 2.0, -3.0, 0.5];
    for g in [&dag, &fused] {
        let out = evaluate(g, &[vector(&x)]).expect("runs");
        assert_eq!(f32s(&out[0]), vec![2.0, 3.0, -2.0, 1.5]);
    }
}

#[test]
fn write_may_be_out_of_bounds() {
    // Four workers write out[p0] into a tensor of three: the last write is out of bounds, a
    // fault that a merge must not hide.
    let mut b = Builder::new("overrun", &[4]);
    b.input(DType::F32, &[4]);
    b.output(DType::F32, &[3]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    b.write(OUT, 0, &[i], x);
    let dag = graph(
        vec![f32_type(&[4])],
        vec![
            (b.build(), vec![From::Input(0)]),
            (add_const(3, 1.0), vec![From::Op(0, 0)]),
        ],
        &[From::Op(1, 0)],
    );
    let (fused, report) = refused(&dag, |r| {
        matches!(
            r,
            Reason::WriteMayBeOutOfBounds { output: 0, write, shape }
                if write.to_string() == "[p0]" && shape == &[3]
        )
    });
    assert!(
        report
            .to_string()
            .contains("the write [p0] of output 0 may fall outside its shape [3]"),
        "{report}"
    );
    // Unfused, the graph still reports the fault of worker 3 (index 3 of a tensor of 3).
    for g in [&dag, &fused] {
        let err = evaluate(g, &[vector(&[1.0, 2.0, 3.0, 4.0])]).expect_err("a fault");
        let msg = err.to_string();
        assert!(
            msg.contains("overrun") && msg.contains("index 3") && msg.contains("size 3"),
            "{msg}"
        );
    }
}

#[test]
fn opaque_read() {
    // The consumer gathers the producer's output at indices read from a tensor.
    let n = 4u64;
    let mut b = Builder::new("gather_produced", &[n]);
    b.input(DType::F32, &[n]);
    b.input(DType::I32, &[n]);
    b.output(DType::F32, &[n]);
    let i = b.position(0);
    let k = b.read(IN, 1, &[i]);
    let v = b.read(IN, 0, &[k]);
    b.write(OUT, 0, &[i], v);
    let dag = graph(
        vec![
            f32_type(&[n]),
            ir::TensorType {
                symbolic: Vec::new(),
                dtype: DType::I32.to_ir() as i32,
                shape: vec![n],
            },
        ],
        vec![
            (add_const(n, 100.0), vec![From::Input(0)]),
            (b.build(), vec![From::Op(0, 0), From::Input(1)]),
        ],
        &[From::Op(1, 0)],
    );
    let (fused, report) = refused(&dag, |r| {
        matches!(r, Reason::OpaqueRead { write, read }
            if write.to_string() == "[p0]" && read.affine().is_none())
    });
    assert!(
        report
            .to_string()
            .contains("opaque read index: written [p0], read "),
        "{report}"
    );
    let idx = HostTensor::from_vec(&[4], vec![3i32, 3, 0, 1]).expect("4 indices");
    for g in [&dag, &fused] {
        let out = evaluate(g, &[vector(&[1.0, 2.0, 3.0, 4.0]), idx.clone()]).expect("runs");
        assert_eq!(f32s(&out[0]), vec![104.0, 104.0, 101.0, 102.0]);
    }
}

/// `ShapeMismatch` is unreachable through a valid graph: `optimize` first runs
/// `validate_operator_dag`, which requires every operator input to be declared with exactly the
/// type (dtype and shape) of the value wired to it, and a merge keeps the types of the outputs
/// it keeps, so a producer output and the consumer input it feeds never differ. The reason stays
/// as a guard of `check_vertical`; the graph that would reach it is rejected before fusion.
#[test]
fn shape_mismatch_is_rejected_before_fusion() {
    let mut b = Builder::new("reshape_by_declaration", &[2, 2]);
    b.input(DType::F32, &[2, 2]);
    b.output(DType::F32, &[2, 2]);
    let i = b.position(0);
    let j = b.position(1);
    let x = b.read(IN, 0, &[i, j]);
    b.write(OUT, 0, &[i, j], x);
    let dag = graph(
        vec![f32_type(&[4])],
        vec![
            (add_const(4, 1.0), vec![From::Input(0)]),
            (b.build(), vec![From::Op(0, 0)]),
        ],
        &[From::Op(1, 0)],
    );
    let err = optimize(dag, OptLevel::FULL).expect_err("an invalid graph");
    assert!(matches!(err, FuseError::InvalidInput(_)), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("is declared as f32[2, 2] but is fed") && msg.contains("f32[4]"),
        "{msg}"
    );
}

/// `InvalidMerge` is the merger's guard against its own bugs: a vertical merge is only tried
/// once `check_vertical` has proven it legal, and the spliced operator is valid by construction
/// (the producer's expressions go first, the handed-over value replaces the consumer's reads,
/// locals and variables are renumbered), so no valid graph reaches it unless the merger is
/// wrong. The facade's `tests/fuse/fusion_props.rs` checks on random graphs that it never appears;
/// here, on every graph of this file at every level, no refusal is `InvalidMerge` and the fused
/// graph is valid.
#[test]
fn invalid_merge_never_appears_on_these_graphs() {
    let n = 4u64;
    let chain = graph(
        vec![f32_type(&[n])],
        vec![
            (add_const(n, 1.0), vec![From::Input(0)]),
            (add_const(n, 2.0), vec![From::Op(0, 0)]),
        ],
        &[From::Op(1, 0)],
    );
    for level in [0, 1, 2, 3] {
        let (fused, report) = optimize(chain.clone(), OptLevel::new(level)).expect("valid");
        ovl_ir::validate::validate_operator_dag(&fused).expect("a valid fused graph");
        assert!(
            !report
                .refusals
                .iter()
                .any(|r| matches!(r.reason, Reason::InvalidMerge { .. })),
            "{report}"
        );
        let out = evaluate(&fused, &[vector(&[0.0, 1.0, 2.0, 3.0])]).expect("runs");
        assert_eq!(f32s(&out[0]), vec![3.0, 4.0, 5.0, 6.0]);
        assert_eq!(report.kernels_after, if level == 0 { 2 } else { 1 });
    }
}
