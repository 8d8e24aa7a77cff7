use super::*;
use crate::builder::{Builder, IN, LOC, OUT};
use crate::dtype::Literal;
use crate::ir::TensorKind;

/// out[i] = x[i] + 1 over a workgroup of 4.
fn base() -> Builder {
    let mut b = Builder::new("op", &[4]);
    b.input(DType::F32, &[4]);
    b.output(DType::F32, &[4]);
    b
}

fn valid() -> ir::ExpressionDag {
    let mut b = base();
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let one = b.f32(1.0);
    let y = b.op(Op::Add, &[x, one]);
    b.write(OUT, 0, &[i], y);
    b.build()
}

/// Asserts that validation fails at expression `index` (None: an operator-level error) with a
/// message containing `needle`.
#[track_caller]
fn fails(dag: &ir::ExpressionDag, index: Option<usize>, needle: &str) {
    let e = validate(dag).expect_err("expected a validation error");
    let msg = e.to_string();
    assert!(msg.contains(needle), "message {msg:?} lacks {needle:?}");
    assert!(msg.contains(&format!("`{}`", dag.name)), "{msg}");
    match (&e, index) {
        (ValidationError::Expression { index: got, .. }, Some(want)) => {
            assert_eq!(*got, want, "{msg}")
        }
        (ValidationError::Expression { .. }, None) => panic!("unexpected expression error {msg}"),
        (_, Some(_)) => panic!("expected an expression error, got {msg}"),
        (_, None) => {}
    }
}

#[test]
fn a_valid_operator_passes() {
    validate(&valid()).unwrap();
}

#[test]
fn version_workgroup_and_tensor_types() {
    let mut d = valid();
    d.version = 1;
    let e = validate(&d).unwrap_err();
    assert_eq!(
        e.to_string(),
        "operator `op` (defined at src/ops.rs:12): IR version 1 is not supported: this build of \
         ovl reads IR version 2; trace the operator again with this version of ovl"
    );
    let mut d = valid();
    d.workgroup_shape = vec![];
    fails(&d, None, "workgroup shape is empty");
    // A workgroup with a zero dimension has no worker: valid (the operator runs nothing).
    let mut d = valid();
    d.workgroup_shape = vec![4, 0];
    assert!(validate(&d).is_ok());
    let mut d = valid();
    d.workgroup_shape = vec![u64::MAX, 4];
    fails(&d, None, "more workers");
    let mut d = valid();
    d.inputs[0].dtype = ir::Dtype::Unspecified as i32;
    fails(&d, None, "input 0 has dtype DTYPE_UNSPECIFIED");
    let mut d = valid();
    d.outputs[0].dtype = 0;
    fails(&d, None, "output 0 has dtype DTYPE_UNSPECIFIED");
    let mut d = valid();
    d.outputs[0].shape = vec![u64::MAX, u64::MAX];
    fails(&d, None, "does not fit");
    // Empty dimensions and rank-0 tensors are fine.
    let mut d = valid();
    d.locals.push(ir::TensorType {
        symbolic: Vec::new(),
        dtype: DType::I8.to_ir() as i32,
        shape: vec![0, 3],
    });
    d.locals.push(ir::TensorType {
        symbolic: Vec::new(),
        dtype: DType::I8.to_ir() as i32,
        shape: vec![],
    });
    validate(&d).unwrap();
    // No source location: the message has no "defined at".
    let mut d = valid();
    d.source = None;
    d.expressions[3].code = 12345;
    let msg = validate(&d).unwrap_err().to_string();
    assert_eq!(
        msg,
        "operator `op`: expression %3 (op 12345): opcode 12345 is not a known operation"
    );
}

#[test]
fn operands_must_be_earlier_value_producing_expressions() {
    let mut d = valid();
    d.expressions[3].operands[1] = 3;
    fails(
        &d,
        Some(3),
        "operand 1 is %3, which is not an earlier expression",
    );
    let mut d = valid();
    d.expressions[3].operands[1] = 40;
    fails(&d, Some(3), "not an earlier expression");
    let mut b = base();
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let w = b.write(OUT, 0, &[i], x);
    b.push(Op::Neg, Some(DType::F32), &[w]);
    fails(
        &b.build(),
        Some(3),
        "operand 0 is %2 (write), a statement that produces no value",
    );
    let mut d = valid();
    d.expressions[3].operands.push(0);
    fails(&d, Some(3), "expects 2 operand(s)");
    let mut d = valid();
    d.expressions[3].code = 0;
    fails(&d, Some(3), "not a known operation");
}

#[test]
fn operand_dtype_rules() {
    let unary = |op: Op, d: DType, result: DType| {
        let mut b = Builder::new("u", &[1]);
        let x = b.constant(d, Literal::Int(1));
        b.push(op, Some(result), &[x]);
        validate(&b.build())
    };
    let floats_only = [
        Op::Sqrt,
        Op::Rsqrt,
        Op::Exp,
        Op::Exp2,
        Op::Expm1,
        Op::Log,
        Op::Log2,
        Op::Log10,
        Op::Log1p,
        Op::Sin,
        Op::Cos,
        Op::Tan,
        Op::Asin,
        Op::Acos,
        Op::Atan,
        Op::Sinh,
        Op::Cosh,
        Op::Tanh,
        Op::Sigmoid,
        Op::Erf,
        Op::Ceil,
        Op::Floor,
        Op::Round,
    ];
    for op in floats_only {
        unary(op, DType::F32, DType::F32).unwrap();
        unary(op, DType::F64, DType::F64).unwrap();
        let e = unary(op, DType::I32, DType::I32).unwrap_err().to_string();
        assert!(e.contains("takes float operands"), "{e}");
        assert!(unary(op, DType::Bool, DType::Bool).is_err());
        assert!(unary(op, DType::F32, DType::F64).is_err());
    }
    for op in [Op::Isinf, Op::Isfinite, Op::Isnan] {
        unary(op, DType::F64, DType::Bool).unwrap();
        let e = unary(op, DType::F64, DType::F64).unwrap_err().to_string();
        assert!(
            e.contains("its dtype is f64 but its result dtype is bool"),
            "{e}"
        );
        assert!(unary(op, DType::U8, DType::Bool).is_err());
    }
    for op in [Op::Neg, Op::Abs] {
        for d in DType::ALL {
            assert_eq!(unary(op, d, d).is_ok(), d != DType::Bool, "{op:?} {d}");
        }
    }
    for d in DType::ALL {
        assert_eq!(unary(Op::Not, d, d).is_ok(), !d.is_float(), "not {d}");
    }

    let binary = |op: Op, a: DType, b_: DType, result: DType| {
        let mut b = Builder::new("b", &[1]);
        let x = b.constant(a, Literal::Int(1));
        let y = b.constant(b_, Literal::Int(1));
        b.push(op, Some(result), &[x, y]);
        validate(&b.build())
    };
    for op in [
        Op::Add,
        Op::Sub,
        Op::Mul,
        Op::Div,
        Op::Mod,
        Op::Min,
        Op::Max,
    ] {
        for d in DType::ALL {
            assert_eq!(binary(op, d, d, d).is_ok(), d != DType::Bool, "{op:?} {d}");
        }
        let e = binary(op, DType::F32, DType::F64, DType::F32)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("operands have different dtypes (f32 and f64)"),
            "{e}"
        );
    }
    for op in [Op::Pow, Op::Atan2] {
        for d in DType::ALL {
            assert_eq!(binary(op, d, d, d).is_ok(), d.is_float(), "{op:?} {d}");
        }
    }
    for op in [Op::Lt, Op::Le, Op::Gt, Op::Ge, Op::Eq, Op::Ne] {
        for d in DType::ALL {
            binary(op, d, d, DType::Bool).unwrap();
            if d != DType::Bool {
                assert!(binary(op, d, d, d).is_err());
            }
        }
        assert!(binary(op, DType::I32, DType::I64, DType::Bool).is_err());
    }
    for op in [Op::And, Op::Or] {
        for d in DType::ALL {
            assert_eq!(binary(op, d, d, DType::Bool).is_ok(), d == DType::Bool);
        }
    }
}

#[test]
fn select_fma_cast_variable_assign() {
    let mut b = Builder::new("t", &[1]);
    let c = b.boolean(true);
    let x = b.f32(1.0);
    let y = b.f32(2.0);
    let n = b.i32(3);
    let s = b.push(Op::Select, Some(DType::F32), &[c, x, y]);
    let bad_sel = b.push(Op::Select, Some(DType::F32), &[x, x, y]);
    let _ = (s, bad_sel);
    fails(
        &b.dag,
        Some(5),
        "the condition (operand 0) must be bool, found f32",
    );
    b.dag.expressions.pop();
    b.push(Op::Select, Some(DType::F32), &[c, x, n]);
    fails(
        &b.dag,
        Some(5),
        "alternatives have different dtypes (f32 and i32)",
    );
    b.dag.expressions.pop();
    b.push(Op::Fma, Some(DType::F32), &[x, y, x]);
    validate(&b.dag).unwrap();
    b.push(Op::Fma, Some(DType::F32), &[x, y, n]);
    fails(&b.dag, Some(6), "different dtypes");
    b.dag.expressions.pop();
    let ni = b.i32(4);
    b.push(Op::Fma, Some(DType::I32), &[n, ni, n]);
    fails(&b.dag, Some(7), "takes float operands");
    b.dag.expressions.pop();
    b.cast(c, DType::U64);
    b.push(Op::Cast, None, &[c]);
    fails(
        &b.dag,
        Some(8),
        "its dtype DTYPE_UNSPECIFIED is not a supported value dtype",
    );
    b.dag.expressions.pop();
    let v = b.var(x);
    b.push(Op::Variable, Some(DType::F64), &[x]);
    fails(
        &b.dag,
        Some(9),
        "its dtype is f64 but the dtype of its initial value is f32",
    );
    b.dag.expressions.pop();
    b.assign(v, y);
    validate(&b.dag).unwrap();
    b.assign(v, n);
    fails(
        &b.dag,
        Some(10),
        "the value has dtype i32 but the variable %8 has dtype f32",
    );
    b.dag.expressions.pop();
    b.assign(x, y);
    fails(
        &b.dag,
        Some(10),
        "operand 0 must be a variable expression, but %1 is const",
    );
    b.dag.expressions.pop();
    b.push(Op::Assign, Some(DType::F32), &[v, y]);
    fails(&b.dag, Some(10), "a statement produces no value");
}

#[test]
fn constants_must_fit_their_dtype() {
    let mut b = Builder::new("k", &[1]);
    b.constant(DType::I8, Literal::Int(127));
    b.constant(DType::U16, Literal::UInt(65535));
    b.constant(DType::Bool, Literal::Bool(true));
    validate(&b.dag).unwrap();
    b.constant(DType::I8, Literal::Int(128));
    fails(
        &b.dag,
        Some(3),
        "the literal 128 (int_value) does not fit in i8",
    );
    b.dag.expressions.pop();
    b.constant(DType::U32, Literal::UInt(1 << 32));
    fails(&b.dag, Some(3), "does not fit in u32");
    b.dag.expressions.pop();
    b.constant(DType::Bool, Literal::Int(2));
    fails(&b.dag, Some(3), "bool literal");
}

#[test]
fn reads_and_writes() {
    // Rank and index dtypes.
    let mut b = base();
    let i = b.position(0);
    let f = b.f32(0.0);
    b.read(IN, 0, &[i, i]);
    fails(
        &b.dag,
        Some(2),
        "input 0 has rank 1 (shape [4]) but is read with 2 index operand(s)",
    );
    b.dag.expressions.pop();
    b.read(IN, 0, &[f]);
    fails(
        &b.dag,
        Some(2),
        "index operand 0 has dtype f32; tensor indices must be integers",
    );
    b.dag.expressions.pop();
    // Kinds.
    b.read(OUT, 0, &[i]);
    fails(&b.dag, Some(2), "outputs are write-only");
    b.dag.expressions.pop();
    b.write(IN, 0, &[i], f);
    fails(&b.dag, Some(2), "inputs are read-only");
    b.dag.expressions.pop();
    let mut e = b.dag.expressions[0].clone();
    e.code = Op::Read as i32;
    e.operands = vec![i];
    e.tensor = Some(ir::TensorRef {
        kind: TensorKind::Input as i32,
        index: 3,
    });
    b.raw(e);
    fails(
        &b.dag,
        Some(2),
        "it refers to input 3, but the operator has 1 input(s)",
    );
    b.dag.expressions.pop();
    b.dag.expressions.push(ir::Expression {
        code: Op::Read as i32,
        dtype: DType::F32.to_ir() as i32,
        operands: vec![i],
        ..Default::default()
    });
    fails(&b.dag, Some(2), "tensor reference is missing");
    b.dag.expressions.pop();
    // Dtypes.
    let x = b.read(IN, 0, &[i]);
    b.dag.expressions[x as usize].dtype = DType::F64.to_ir() as i32;
    fails(
        &b.dag,
        Some(2),
        "its dtype is f64 but the dtype of the tensor it reads is f32",
    );
    b.dag.expressions.pop();
    let n = b.i64(1);
    b.write(OUT, 0, &[i], n);
    fails(
        &b.dag,
        Some(3),
        "the value written has dtype i64 but output 0 holds f32",
    );
    b.dag.expressions.pop();
    b.write(OUT, 0, &[], f);
    fails(
        &b.dag,
        Some(3),
        "a write takes 1 index operand(s) and the value, found 1",
    );
    b.dag.expressions.pop();
    let w = b.write(OUT, 0, &[i], f);
    validate(&b.dag).unwrap();
    b.dag.expressions[w as usize].dtype = DType::F32.to_ir() as i32;
    fails(&b.dag, Some(w as usize), "a statement produces no value");
}

#[test]
fn locals_are_initialized_before_use() {
    let mut b = base();
    let i = b.position(0);
    b.dag.locals.push(ir::TensorType {
        symbolic: Vec::new(),
        dtype: DType::I32.to_ir() as i32,
        shape: vec![4],
    });
    b.read(LOC, 0, &[i]);
    fails(
        &b.dag,
        Some(1),
        "local 0 is used before its local_tensor expression initializes it",
    );
    b.dag.expressions.pop();
    let z = b.i32(0);
    b.write(LOC, 0, &[i], z);
    fails(&b.dag, Some(2), "local 0 is used before");
    b.dag.expressions.pop();
    let mut e = ir::Expression {
        code: Op::LocalTensor as i32,
        tensor: Some(ir::TensorRef {
            kind: TensorKind::Local as i32,
            index: 0,
        }),
        ..Default::default()
    };
    b.raw(e.clone());
    b.write(LOC, 0, &[i], z);
    b.read(LOC, 0, &[i]);
    validate(&b.dag).unwrap();
    // The dtype of LOCAL_TENSOR may be the local's.
    e.dtype = DType::I32.to_ir() as i32;
    b.raw(e.clone());
    validate(&b.dag).unwrap();
    e.dtype = DType::F32.to_ir() as i32;
    b.raw(e.clone());
    fails(&b.dag, Some(6), "differs from the dtype i32 of local 0");
    b.dag.expressions.pop();
    e.dtype = 0;
    e.int_value = 1 << 40;
    b.raw(e.clone());
    fails(&b.dag, Some(6), "does not fit in i32");
    b.dag.expressions.pop();
    e.int_value = 0;
    e.tensor = Some(ir::TensorRef {
        kind: TensorKind::Output as i32,
        index: 0,
    });
    b.raw(e);
    fails(&b.dag, Some(6), "only local tensors can be initialized");
}

#[test]
fn position_axis() {
    let mut b = Builder::new("p", &[2, 3]);
    b.position(1);
    validate(&b.dag).unwrap();
    b.position(2);
    fails(
        &b.dag,
        Some(1),
        "axis 2 is out of range: the workgroup [2, 3] has rank 2",
    );
    b.dag.expressions[1].axis = 0;
    b.dag.expressions[1].dtype = DType::I32.to_ir() as i32;
    fails(
        &b.dag,
        Some(1),
        "its dtype is i32 but a position component is i64",
    );
}

#[test]
fn control_flow_nesting() {
    let mut b = Builder::new("cf", &[1]);
    let c = b.boolean(true);
    b.if_(c);
    b.else_();
    b.end_if();
    let (s, e, st) = (b.i64(0), b.i64(4), b.i64(1));
    b.range(s, e, st);
    b.while_begin();
    b.while_cond(c);
    b.if_(c);
    b.end_if();
    b.while_end();
    b.end_range();
    validate(&b.dag).unwrap();

    let mut d = b.dag.clone();
    d.expressions.pop();
    fails(
        &d,
        None,
        "a `range` loop (closed by end_range) opened by expression %7 is never closed",
    );
    let mut d = b.dag.clone();
    d.expressions.swap(12, 13);
    fails(
        &d,
        Some(12),
        "end_range does not match the innermost open block",
    );
    let mut b2 = Builder::new("cf", &[1]);
    b2.end_if();
    fails(&b2.dag, Some(0), "end_if appears outside any block");
    let mut b2 = Builder::new("cf", &[1]);
    let c = b2.boolean(true);
    b2.if_(c);
    b2.else_();
    b2.else_();
    fails(&b2.dag, Some(3), "else does not match");
    let mut b2 = Builder::new("cf", &[1]);
    let c = b2.boolean(true);
    b2.while_begin();
    b2.while_end();
    fails(&b2.dag, Some(2), "while_end does not match");
    let mut b2 = Builder::new("cf", &[1]);
    let c2 = b2.boolean(true);
    b2.while_cond(c2);
    fails(&b2.dag, Some(1), "while_cond must directly follow");
    let _ = c;
    // Conditions.
    let mut b2 = Builder::new("cf", &[1]);
    let n = b2.i32(1);
    b2.if_(n);
    fails(&b2.dag, Some(1), "the condition must be bool, found i32");
    let mut b2 = Builder::new("cf", &[1]);
    let (s, e, st) = (b2.i32(0), b2.i64(4), b2.i64(1));
    b2.range(s, e, st);
    fails(
        &b2.dag,
        Some(3),
        "operand 0 (start) has dtype i32; range bounds must be i64",
    );
    let mut b2 = Builder::new("cf", &[1]);
    b2.dag.expressions.push(ir::Expression {
        code: Op::Else as i32,
        operands: vec![],
        dtype: DType::Bool.to_ir() as i32,
        ..Default::default()
    });
    fails(&b2.dag, Some(0), "a statement produces no value");
}

#[test]
fn values_do_not_escape_their_block() {
    // A value defined in the `then` branch used after end_if.
    let mut b = Builder::new("scope", &[1]);
    let c = b.boolean(true);
    let v0 = b.i32(0);
    let var = b.var(v0);
    b.if_(c);
    let inner = b.i32(5);
    b.assign(var, inner); // fine: the variable is declared outside
    b.else_();
    b.op(Op::Neg, &[inner]);
    fails(
        &b.dag,
        Some(7),
        "operand 0 is %4, which is defined inside an `if`, `for` or `while`",
    );
    b.dag.expressions.pop();
    b.end_if();
    b.op(Op::Neg, &[var]); // the variable itself is visible after the block
    validate(&b.dag).unwrap();
    b.op(Op::Neg, &[inner]);
    fails(&b.dag, Some(9), "declare a variable before the block");
    b.dag.expressions.pop();
    // The RANGE value is only usable inside its loop.
    let (s, e, st) = (b.i64(0), b.i64(4), b.i64(1));
    let j = b.range(s, e, st);
    b.op(Op::Neg, &[j]);
    b.end_range();
    validate(&b.dag).unwrap();
    b.op(Op::Neg, &[j]);
    fails(&b.dag, Some(15), "operand 0 is %12");
    b.dag.expressions.pop();
    // While: condition values are visible in the body, not after the loop.
    b.while_begin();
    let cond = b.op(Op::Not, &[c]);
    b.while_cond(cond);
    b.op(Op::Not, &[cond]);
    b.while_end();
    validate(&b.dag).unwrap();
    b.op(Op::Not, &[cond]);
    fails(&b.dag, Some(20), "operand 0 is %16");
    b.dag.expressions.pop();
    // ASSIGN to a variable declared inside an ended block.
    b.if_(c);
    let inner_var = b.var(v0);
    b.end_if();
    b.assign(inner_var, v0);
    fails(&b.dag, Some(23), "operand 0 is %21");
}

fn graph() -> ir::OperatorDag {
    let op = valid();
    let t = op.inputs[0].clone();
    let input = |k| ir::ValueRef {
        source: Some(Source::GraphInput(k)),
    };
    let out = |o, k| ir::ValueRef {
        source: Some(Source::OpOutput(ir::OperatorOutput {
            operator: o,
            output: k,
        })),
    };
    ir::OperatorDag {
        symbols: Vec::new(),
        version: crate::IR_VERSION,
        operators: vec![op.clone(), op],
        inputs: vec![t],
        operator_inputs: vec![
            ir::OperatorInputs {
                inputs: vec![input(0)],
            },
            ir::OperatorInputs {
                inputs: vec![out(0, 0)],
            },
        ],
        outputs: vec![out(1, 0), out(0, 0), input(0)],
    }
}

#[test]
fn operator_dags() {
    validate_operator_dag(&graph()).unwrap();
    let graph_err = |g: &ir::OperatorDag, needle: &str| {
        let msg = validate_operator_dag(g).unwrap_err().to_string();
        assert!(msg.contains(needle), "{msg:?} lacks {needle:?}");
    };
    let mut g = graph();
    g.version = 7;
    graph_err(&g, "IR version 7 is not supported");
    let mut g = graph();
    g.operator_inputs.pop();
    graph_err(
        &g,
        "operator_inputs has 1 entries but there are 2 operators",
    );
    let mut g = graph();
    g.operator_inputs[0].inputs[0].source = Some(Source::OpOutput(ir::OperatorOutput {
        operator: 1,
        output: 0,
    }));
    graph_err(
        &g,
        "input 0 of operator 0 (`op`): it refers to operator 1, which does not come before it",
    );
    let mut g = graph();
    g.operator_inputs[1].inputs[0].source = Some(Source::OpOutput(ir::OperatorOutput {
        operator: 0,
        output: 1,
    }));
    graph_err(
        &g,
        "refers to output 1 of operator 0 (`op`), which has 1 output(s)",
    );
    let mut g = graph();
    g.operator_inputs[1].inputs[0].source = Some(Source::GraphInput(1));
    graph_err(&g, "graph input 1, but the graph has 1 input(s)");
    let mut g = graph();
    g.operator_inputs[1].inputs[0].source = None;
    graph_err(&g, "the reference is empty");
    let mut g = graph();
    let extra = g.operator_inputs[1].inputs[0];
    g.operator_inputs[1].inputs.push(extra);
    graph_err(
        &g,
        "operator 1 (`op`) declares 1 input(s) but is wired to 2",
    );
    let mut g = graph();
    g.inputs[0].shape = vec![5];
    graph_err(&g, "input 0 of operator 0 (`op`) is declared as f32[4] but is fed graph input 0 of type f32[5]");
    let mut g = graph();
    g.operators[0].outputs[0].dtype = DType::F64.to_ir() as i32;
    g.operators[0].expressions.clear();
    graph_err(&g, "is fed operator 0 (`op`) output 0 of type f64[4]");
    let mut g = graph();
    g.outputs.push(ir::ValueRef {
        source: Some(Source::OpOutput(ir::OperatorOutput {
            operator: 2,
            output: 0,
        })),
    });
    graph_err(
        &g,
        "graph output 3: it refers to operator 2, but the graph has 2 operator(s)",
    );
    let mut g = graph();
    g.operators[1].expressions[3].operands[0] = 9;
    let e = validate_operator_dag(&g).unwrap_err();
    assert!(matches!(e, ValidationError::GraphOperator { index: 1, .. }));
    assert!(
        e.to_string()
            .starts_with("operator DAG: operator 1: operator `op`"),
        "{e}"
    );
}
