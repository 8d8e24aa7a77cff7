//! The merger on hand-built IR: errors, the hand-over of a written variable, determinism, the
//! in-memory cache and source locations.

use ovl_fuse::{optimize, optimize_cached, FuseError, OptLevel, Reason};
use ovl_ir::ir::{self, value_ref::Source, Op, TensorKind};
use ovl_ir::DType;

fn f32_type(shape: &[u64]) -> ir::TensorType {
    ir::TensorType {
        symbolic: Vec::new(),
        dtype: DType::F32.to_ir() as i32,
        shape: shape.to_vec(),
    }
}

fn e(code: Op, dtype: Option<DType>, operands: &[u32]) -> ir::Expression {
    ir::Expression {
        code: code as i32,
        dtype: dtype.map_or(0, |d| d.to_ir() as i32),
        operands: operands.to_vec(),
        ..Default::default()
    }
}

fn access(code: Op, kind: TensorKind, index: u32, operands: &[u32]) -> ir::Expression {
    let mut x = e(code, (code == Op::Read).then_some(DType::F32), operands);
    x.tensor = Some(ir::TensorRef {
        kind: kind as i32,
        index,
    });
    x
}

fn position() -> ir::Expression {
    e(Op::Position, Some(DType::I64), &[])
}

/// `out[i] = v` where `v` is a variable: `v = x[i]; v = v * v; out[i] = v; v = 0`.
fn square_via_variable(n: u64, line: u32) -> ir::ExpressionDag {
    let zero = ir::Expression {
        float_value: 0.0,
        ..e(Op::Const, Some(DType::F32), &[])
    };
    ir::ExpressionDag {
        symbolic_workgroup: Vec::new(),
        symbol_count: 0,
        version: ovl_ir::IR_VERSION,
        name: "square_var".into(),
        expressions: vec![
            position(),                                        // %0
            access(Op::Read, TensorKind::Input, 0, &[0]),      // %1
            e(Op::Variable, Some(DType::F32), &[1]),           // %2
            e(Op::Mul, Some(DType::F32), &[2, 2]),             // %3
            e(Op::Assign, None, &[2, 3]),                      // %4
            access(Op::Write, TensorKind::Output, 0, &[0, 2]), // %5
            zero,                                              // %6
            e(Op::Assign, None, &[2, 6]),                      // %7
        ],
        workgroup_shape: vec![n],
        inputs: vec![f32_type(&[n])],
        outputs: vec![f32_type(&[n])],
        locals: vec![],
        source: Some(ir::SourceLocation {
            file: "square.rs".into(),
            line,
            column: 1,
        }),
        gradient: None,
        library_call: None,
    }
}

/// `out[i] = x[i] + x[i]`.
fn double(n: u64, line: u32) -> ir::ExpressionDag {
    ir::ExpressionDag {
        symbolic_workgroup: Vec::new(),
        symbol_count: 0,
        version: ovl_ir::IR_VERSION,
        name: "double".into(),
        expressions: vec![
            position(),
            access(Op::Read, TensorKind::Input, 0, &[0]),
            e(Op::Add, Some(DType::F32), &[1, 1]),
            access(Op::Write, TensorKind::Output, 0, &[0, 2]),
        ],
        workgroup_shape: vec![n],
        inputs: vec![f32_type(&[n])],
        outputs: vec![f32_type(&[n])],
        locals: vec![],
        source: Some(ir::SourceLocation {
            file: "double.rs".into(),
            line,
            column: 1,
        }),
        gradient: None,
        library_call: None,
    }
}

fn from_op(operator: u32) -> ir::ValueRef {
    ir::ValueRef {
        source: Some(Source::OpOutput(ir::OperatorOutput {
            operator,
            output: 0,
        })),
    }
}

fn chain(line: u32) -> ir::OperatorDag {
    ir::OperatorDag {
        symbols: Vec::new(),
        version: ovl_ir::IR_VERSION,
        operators: vec![square_via_variable(8, line), double(8, line + 1)],
        inputs: vec![f32_type(&[8])],
        operator_inputs: vec![
            ir::OperatorInputs {
                inputs: vec![ir::ValueRef {
                    source: Some(Source::GraphInput(0)),
                }],
            },
            ir::OperatorInputs {
                inputs: vec![from_op(0)],
            },
        ],
        outputs: vec![from_op(1)],
    }
}

fn run(dag: &ir::ExpressionDag, x: &[f32]) -> Vec<f32> {
    let input = ovl_ir::HostTensor::from_vec(&[x.len()], x.to_vec()).unwrap();
    let mut out = vec![ovl_ir::HostTensor::zeros(DType::F32, &[x.len()])];
    ovl_core::interp::interpret(dag, &[&input], &mut out).unwrap();
    out[0].as_slice::<f32>().unwrap().to_vec()
}

#[test]
fn a_written_variable_is_copied_at_the_write() {
    let (fused, report) = optimize(chain(10), OptLevel::FULL).unwrap();
    assert_eq!(report.kernels_after, 1, "{report}");
    let op = &fused.operators[0];
    ovl_ir::validate::validate(op).unwrap();
    assert!(op.expressions.iter().any(|x| x.code == Op::Cast as i32));
    let x: Vec<f32> = (0..8).map(|i| i as f32 - 3.0).collect();
    let want: Vec<f32> = x.iter().map(|v| 2.0 * v * v).collect();
    assert_eq!(run(op, &x), want);
}

#[test]
fn fusion_is_deterministic_and_cached() {
    let (a, _) = optimize(chain(10), OptLevel::FULL).unwrap();
    let (b, _) = optimize(chain(10), OptLevel::FULL).unwrap();
    assert_eq!(a, b);
    let cached = optimize_cached(chain(10), OptLevel::FULL).unwrap();
    assert_eq!(cached, a);
    // Another source location: same hash, so a cache hit, but this graph's location.
    let moved = optimize_cached(chain(50), OptLevel::FULL).unwrap();
    let source = moved.operators[0].source.as_ref().unwrap();
    assert_eq!((source.file.as_str(), source.line), ("double.rs", 51));
    assert_eq!(
        ovl_ir::hash::canonical_hash_operator_dag(&moved),
        ovl_ir::hash::canonical_hash_operator_dag(&a)
    );
}

#[test]
fn level_zero_refuses_everything() {
    let (fused, report) = optimize(chain(10), OptLevel::NONE).unwrap();
    assert_eq!(fused, chain(10));
    assert_eq!(report.refusals.len(), 1);
    assert!(matches!(
        report.refusals[0].reason,
        Reason::OptLevel { level: 0, .. }
    ));
    assert_eq!(OptLevel::new(9), OptLevel::FULL);
}

#[test]
fn an_invalid_graph_is_an_error() {
    let mut dag = chain(10);
    dag.operator_inputs[1].inputs[0] = from_op(5);
    let err = optimize(dag, OptLevel::FULL).unwrap_err();
    assert!(matches!(err, FuseError::InvalidInput(_)), "{err}");
    assert!(err.to_string().contains("operator 5"), "{err}");
}

#[test]
fn one_variable_written_twice_hands_over_both_values() {
    let n = 5u64;
    // out0[i] = v (v = x[i]); v = v * v; out1[i] = v
    let producer = ir::ExpressionDag {
        version: ovl_ir::IR_VERSION,
        name: "two_snapshots".into(),
        expressions: vec![
            position(),
            access(Op::Read, TensorKind::Input, 0, &[0]),
            e(Op::Variable, Some(DType::F32), &[1]),
            access(Op::Write, TensorKind::Output, 0, &[0, 2]),
            e(Op::Mul, Some(DType::F32), &[2, 2]),
            e(Op::Assign, None, &[2, 4]),
            access(Op::Write, TensorKind::Output, 1, &[0, 2]),
        ],
        workgroup_shape: vec![n],
        inputs: vec![f32_type(&[n])],
        outputs: vec![f32_type(&[n]), f32_type(&[n])],
        ..Default::default()
    };
    // out[i] = a[i] - b[i]
    let consumer = ir::ExpressionDag {
        version: ovl_ir::IR_VERSION,
        name: "difference".into(),
        expressions: vec![
            position(),
            access(Op::Read, TensorKind::Input, 0, &[0]),
            access(Op::Read, TensorKind::Input, 1, &[0]),
            e(Op::Sub, Some(DType::F32), &[1, 2]),
            access(Op::Write, TensorKind::Output, 0, &[0, 3]),
        ],
        workgroup_shape: vec![n],
        inputs: vec![f32_type(&[n]), f32_type(&[n])],
        outputs: vec![f32_type(&[n])],
        ..Default::default()
    };
    let output = |output| ir::ValueRef {
        source: Some(Source::OpOutput(ir::OperatorOutput {
            operator: 0,
            output,
        })),
    };
    let dag = ir::OperatorDag {
        symbols: Vec::new(),
        version: ovl_ir::IR_VERSION,
        operators: vec![producer, consumer],
        inputs: vec![f32_type(&[n])],
        operator_inputs: vec![
            ir::OperatorInputs {
                inputs: vec![ir::ValueRef {
                    source: Some(Source::GraphInput(0)),
                }],
            },
            ir::OperatorInputs {
                inputs: vec![output(0), output(1)],
            },
        ],
        outputs: vec![from_op(1)],
    };
    let (fused, report) = optimize(dag, OptLevel::FULL).unwrap();
    assert_eq!(report.kernels_after, 1, "{report}");
    let x: Vec<f32> = (0..5).map(|i| i as f32 + 0.5).collect();
    let want: Vec<f32> = x.iter().map(|v| v - v * v).collect();
    assert_eq!(run(&fused.operators[0], &x), want);
}
