//! Readable text dumps of the IR, for users and for debugging.
//!
//! [`to_text`] prints one operator: a header (name, source location, IR version, workgroup,
//! inputs, outputs, locals) and one line per expression, like `%3 = add %1, %2 : f32`,
//! `%5 = read input0[%1, %4] : f32` or `write output0[%0] = %5`, with the bodies of `if`,
//! `range` and `while` indented. [`operator_dag_to_text`] prints the wiring of an operator DAG,
//! then each operator. Both accept invalid IR (they never panic) and print what they find.

use crate::dtype::DType;
use crate::ir::{self, value_ref::Source, Op, TensorKind};
use crate::names::dtype_name;
use crate::ops::Block;
use crate::validate::produces_value;
use std::fmt::Write as _;

fn tensor_type(t: &ir::TensorType) -> String {
    format!(
        "{}{}",
        dtype_name(t.dtype),
        crate::symbolic::shape_text(&t.shape, &t.symbolic, &[])
    )
}

/// `input0`, `output1`, `local2`.
fn tensor_ref(r: Option<&ir::TensorRef>) -> String {
    match r {
        None => "<no tensor>".into(),
        Some(r) => match TensorKind::try_from(r.kind) {
            Ok(TensorKind::Input) => format!("input{}", r.index),
            Ok(TensorKind::Output) => format!("output{}", r.index),
            Ok(TensorKind::Local) => format!("local{}", r.index),
            _ => format!("<tensor kind {}>{}", r.kind, r.index),
        },
    }
}

/// The literal of a CONST or LOCAL_TENSOR of dtype `d` as a value (`1.5`, `-3`, `true`).
fn literal(e: &ir::Expression, d: Option<DType>) -> String {
    match d {
        Some(DType::F32) => format!("{:?}", e.float_value as f32),
        Some(DType::F64) => format!("{:?}", e.float_value),
        Some(d @ (DType::F16 | DType::BF16)) => {
            let bits = crate::half_float::literal_bits(d, e.float_value).unwrap_or(0);
            format!(
                "{:?}",
                crate::half_float::from_bits(d, bits).unwrap_or(f32::NAN)
            )
        }
        Some(DType::Bool) => match e.int_value {
            0 => "false".into(),
            1 => "true".into(),
            v => format!("<bool {v}>"),
        },
        Some(d) if d.is_unsigned_int() => e.uint_value.to_string(),
        Some(_) => e.int_value.to_string(),
        None => format!(
            "<float {:?} int {} uint {}>",
            e.float_value, e.int_value, e.uint_value
        ),
    }
}

fn operands(ids: &[u32]) -> String {
    let v: Vec<String> = ids.iter().map(|o| format!("%{o}")).collect();
    v.join(", ")
}

/// The text of one expression, without indentation.
fn expression(dag: &ir::ExpressionDag, i: usize, e: &ir::Expression) -> String {
    let op = Op::try_from(e.code).ok();
    let name = crate::names::op_name(e.code);
    let dtype = DType::from_ir(e.dtype);
    let typed = |body: String| {
        if e.dtype == ir::Dtype::Unspecified as i32 {
            format!("%{i} = {body}")
        } else {
            format!("%{i} = {body} : {}", dtype_name(e.dtype))
        }
    };
    match op {
        Some(Op::Const) => typed(format!("const {}", literal(e, dtype))),
        Some(Op::Position) => typed(format!("position {}", e.axis)),
        Some(Op::Symbol) => typed(format!(
            "symbol {}",
            crate::symbolic::default_symbol_name(e.axis)
        )),
        Some(Op::Read) => typed(format!(
            "read {}[{}]",
            tensor_ref(e.tensor.as_ref()),
            operands(&e.operands)
        )),
        Some(Op::Write) => {
            let (idx, value) = match e.operands.split_last() {
                Some((v, idx)) => (operands(idx), format!("%{v}")),
                None => (String::new(), "<no value>".into()),
            };
            format!("write {}[{idx}] = {value}", tensor_ref(e.tensor.as_ref()))
        }
        Some(Op::Assign) if e.operands.len() == 2 => {
            format!("assign %{} = %{}", e.operands[0], e.operands[1])
        }
        Some(Op::LocalTensor) => {
            let local = e
                .tensor
                .as_ref()
                .filter(|r| r.kind == TensorKind::Local as i32)
                .and_then(|r| dag.locals.get(r.index as usize))
                .and_then(|t| DType::from_ir(t.dtype));
            format!(
                "local_tensor {} fill {}",
                tensor_ref(e.tensor.as_ref()),
                literal(e, local.or(dtype))
            )
        }
        Some(Op::Accumulator) => {
            let combiner = crate::ops::Combiner::from_code(e.int_value).map_or_else(
                || format!("combiner {}", e.int_value),
                |c| c.name().to_string(),
            );
            typed(format!(
                "accumulator {combiner} from {}",
                operands(&e.operands)
            ))
        }
        Some(Op::Accumulate) if e.operands.len() == 2 => {
            format!("accumulate %{} <- %{}", e.operands[0], e.operands[1])
        }
        Some(op) if produces_value(op) => {
            if e.operands.is_empty() {
                typed(name)
            } else {
                typed(format!("{name} {}", operands(&e.operands)))
            }
        }
        _ => {
            let mut s = name;
            if !e.operands.is_empty() {
                s += &format!(" {}", operands(&e.operands));
            }
            if e.dtype != ir::Dtype::Unspecified as i32 {
                s += &format!(" : {}", dtype_name(e.dtype));
            }
            s
        }
    }
}

/// A readable listing of one operator.
///
/// ```text
/// operator `scale` (src/ops.rs:12), IR version 2
/// workgroup [4]
/// input0: f32[4]
/// output0: f32[4]
/// %0 = position 0 : i64
/// %1 = read input0[%0] : f32
/// %2 = const 2.0 : f32
/// %3 = mul %1, %2 : f32
/// write output0[%0] = %3
/// ```
pub fn to_text(dag: &ir::ExpressionDag) -> String {
    let mut s = String::new();
    let _ = write!(s, "operator `{}`", dag.name);
    if let Some(src) = &dag.source {
        let _ = write!(s, " ({}:{})", src.file, src.line);
    }
    let _ = writeln!(s, ", IR version {}", dag.version);
    let _ = writeln!(
        s,
        "workgroup {}",
        crate::symbolic::shape_text(&dag.workgroup_shape, &dag.symbolic_workgroup, &[])
    );
    for (kind, list) in [
        ("input", &dag.inputs),
        ("output", &dag.outputs),
        ("local", &dag.locals),
    ] {
        for (k, t) in list.iter().enumerate() {
            let _ = writeln!(s, "{kind}{k}: {}", tensor_type(t));
        }
    }
    if dag.gradient.is_some() {
        let _ = writeln!(s, "gradient: an operator DAG (not shown)");
    }
    if crate::library::is_library_call(dag) {
        let _ = writeln!(
            s,
            "library call: {}(input0, input1) -> output0",
            crate::library::describe(dag)
        );
    }
    let mut depth = 0usize;
    for (i, e) in dag.expressions.iter().enumerate() {
        let own = match crate::ops::info_of_code(e.code).map(|row| row.block) {
            Some(Block::Open) => {
                depth += 1;
                depth - 1
            }
            Some(Block::Middle) => depth.saturating_sub(1),
            Some(Block::Close) => {
                depth = depth.saturating_sub(1);
                depth
            }
            Some(Block::None) | None => depth,
        };
        let _ = writeln!(s, "{}{}", "  ".repeat(own), expression(dag, i, e));
    }
    s
}

fn value_ref(v: &ir::ValueRef) -> String {
    match &v.source {
        Some(Source::GraphInput(k)) => format!("input{k}"),
        Some(Source::OpOutput(o)) => format!("op{}.output{}", o.operator, o.output),
        None => "<none>".into(),
    }
}

/// A readable listing of an operator DAG: its inputs, one line per operator with where its
/// inputs come from, the requested outputs, then every operator as printed by [`to_text`].
///
/// ```text
/// operator DAG, IR version 2
/// input0: f32[4]
/// op0 = `scale`(input0) -> f32[4]
/// op1 = `scale`(op0.output0) -> f32[4]
/// output0 = op1.output0
/// ```
pub fn operator_dag_to_text(dag: &ir::OperatorDag) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "operator DAG, IR version {}", dag.version);
    for (k, t) in dag.inputs.iter().enumerate() {
        let _ = writeln!(s, "input{k}: {}", tensor_type(t));
    }
    for (i, op) in dag.operators.iter().enumerate() {
        let args: Vec<String> = dag
            .operator_inputs
            .get(i)
            .map(|inputs| inputs.inputs.iter().map(value_ref).collect())
            .unwrap_or_else(|| vec!["<missing>".into()]);
        let outs: Vec<String> = op.outputs.iter().map(tensor_type).collect();
        let outs = if outs.len() == 1 {
            outs[0].clone()
        } else {
            format!("({})", outs.join(", "))
        };
        let _ = writeln!(s, "op{i} = `{}`({}) -> {outs}", op.name, args.join(", "));
    }
    for (k, v) in dag.outputs.iter().enumerate() {
        let _ = writeln!(s, "output{k} = {}", value_ref(v));
    }
    for (i, op) in dag.operators.iter().enumerate() {
        let _ = writeln!(s, "\n--- op{i} ---");
        s += &to_text(op);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{Builder, IN, LOC, OUT};
    use crate::dtype::Literal;

    fn sample() -> ir::ExpressionDag {
        let mut b = Builder::new("cumsum_rows", &[2]);
        b.input(DType::F32, &[2, 3]);
        b.output(DType::F32, &[2, 3]);
        b.local(DType::U8, &[2], Literal::UInt(7));
        let row = b.position(0);
        let zero = b.f32(0.0);
        let acc = b.var(zero);
        let (s, e, st) = (b.i64(0), b.i64(3), b.i64(1));
        let j = b.range(s, e, st);
        let x = b.read(IN, 0, &[row, j]);
        let sum = b.op(Op::Add, &[acc, x]);
        b.assign(acc, sum);
        b.write(OUT, 0, &[row, j], sum);
        let neg = b.op(Op::Lt, &[sum, zero]);
        b.if_(neg);
        b.assign(acc, zero);
        b.else_();
        let k = b.constant(DType::U8, Literal::UInt(1));
        b.write(LOC, 0, &[s], k);
        b.end_if();
        b.end_range();
        b.while_begin();
        let f = b.boolean(false);
        b.while_cond(f);
        let h = b.f64(-0.5);
        let t = b.cast(h, DType::Bool);
        b.read(LOC, 0, &[row]);
        let _ = t;
        b.while_end();
        b.build()
    }

    #[test]
    fn dump_of_an_operator() {
        let dag = sample();
        crate::validate::validate(&dag).unwrap();
        let text = to_text(&dag);
        let expected = "\
operator `cumsum_rows` (src/ops.rs:12), IR version 2
workgroup [2]
input0: f32[2, 3]
output0: f32[2, 3]
local0: u8[2]
local_tensor local0 fill 7
%1 = position 0 : i64
%2 = const 0.0 : f32
%3 = variable %2 : f32
%4 = const 0 : i64
%5 = const 3 : i64
%6 = const 1 : i64
%7 = range %4, %5, %6 : i64
  %8 = read input0[%1, %7] : f32
  %9 = add %3, %8 : f32
  assign %3 = %9
  write output0[%1, %7] = %9
  %12 = lt %9, %2 : bool
  if %12
    assign %3 = %2
  else
    %16 = const 1 : u8
    write local0[%4] = %16
  end_if
end_range
while_begin
  %21 = const false : bool
while_cond %21
  %23 = const -0.5 : f64
  %24 = cast %23 : bool
  %25 = read local0[%1] : u8
while_end
";
        assert_eq!(text, expected, "got:\n{text}");
    }

    #[test]
    fn dump_of_an_operator_dag() {
        let mut b = Builder::new("scale", &[4]);
        b.input(DType::F32, &[4]);
        b.output(DType::F32, &[4]);
        let i = b.position(0);
        let x = b.read(IN, 0, &[i]);
        let two = b.f32(2.0);
        let y = b.op(Op::Mul, &[x, two]);
        b.write(OUT, 0, &[i], y);
        let op = b.build();
        let g = ir::OperatorDag {
            symbols: Vec::new(),
            version: crate::IR_VERSION,
            operators: vec![op.clone(), op],
            inputs: vec![ir::TensorType {
                symbolic: Vec::new(),
                dtype: DType::F32.to_ir() as i32,
                shape: vec![4],
            }],
            operator_inputs: vec![
                ir::OperatorInputs {
                    inputs: vec![ir::ValueRef {
                        source: Some(Source::GraphInput(0)),
                    }],
                },
                ir::OperatorInputs {
                    inputs: vec![ir::ValueRef {
                        source: Some(Source::OpOutput(ir::OperatorOutput {
                            operator: 0,
                            output: 0,
                        })),
                    }],
                },
            ],
            outputs: vec![ir::ValueRef {
                source: Some(Source::OpOutput(ir::OperatorOutput {
                    operator: 1,
                    output: 0,
                })),
            }],
        };
        let op_text = "\
operator `scale` (src/ops.rs:12), IR version 2
workgroup [4]
input0: f32[4]
output0: f32[4]
%0 = position 0 : i64
%1 = read input0[%0] : f32
%2 = const 2.0 : f32
%3 = mul %1, %2 : f32
write output0[%0] = %3
";
        let expected = format!(
            "\
operator DAG, IR version 2
input0: f32[4]
op0 = `scale`(input0) -> f32[4]
op1 = `scale`(op0.output0) -> f32[4]
output0 = op1.output0

--- op0 ---
{op_text}
--- op1 ---
{op_text}"
        );
        let text = operator_dag_to_text(&g);
        assert_eq!(text, expected, "got:\n{text}");
    }

    #[test]
    fn invalid_ir_does_not_panic() {
        let dag = ir::ExpressionDag {
            expressions: vec![
                ir::Expression {
                    code: 999,
                    dtype: 77,
                    operands: vec![5],
                    ..Default::default()
                },
                ir::Expression {
                    code: Op::EndIf as i32,
                    ..Default::default()
                },
                ir::Expression {
                    code: Op::Write as i32,
                    ..Default::default()
                },
                ir::Expression {
                    code: Op::Const as i32,
                    dtype: 78,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let text = to_text(&dag);
        assert!(text.contains("op 999 %5 : dtype 77"), "{text}");
        assert!(text.contains("write <no tensor>[] = <no value>"), "{text}");
        assert!(text.contains("dtype 78"), "{text}");
        let g = ir::OperatorDag {
            operators: vec![dag],
            ..Default::default()
        };
        assert!(operator_dag_to_text(&g).contains("<missing>"));
    }
}
