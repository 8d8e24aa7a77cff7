//! Helpers of the integration tests: a hand builder of expression DAGs, a private cache
//! directory per test, and a comparison against the reference interpreter.

#![allow(dead_code)]

use ovl_codegen::{compile_with_outcome, CacheOutcome, CompileOptions, CompiledOperator};
use ovl_core::ir::{self, Op, TensorKind};
use ovl_core::{DType, HostTensor, Literal};
use std::sync::Arc;

#[allow(unused_imports)]
pub use TensorKind::{Input as IN, Local as LOC, Output as OUT};

/// Builds an `ExpressionDag` expression by expression.
pub struct Builder {
    pub dag: ir::ExpressionDag,
}

fn tensor_type(d: DType, shape: &[u64]) -> ir::TensorType {
    ir::TensorType {
        dtype: d.to_ir() as i32,
        shape: shape.to_vec(),
    }
}

/// Stores a literal in the field the IR uses for `d`.
pub fn set_literal(e: &mut ir::Expression, d: DType, v: Literal) {
    match v {
        Literal::Float(f) if d.is_float() => e.float_value = f,
        Literal::Int(i) if d.is_unsigned_int() => e.uint_value = i as u64,
        Literal::Int(i) => e.int_value = i,
        Literal::UInt(u) => e.uint_value = u,
        Literal::Bool(b) => e.int_value = b as i64,
        Literal::Float(f) => e.int_value = f as i64,
    }
}

impl Builder {
    pub fn new(name: &str, workgroup: &[u64]) -> Builder {
        Builder {
            dag: ir::ExpressionDag {
                version: ovl_core::IR_VERSION,
                name: name.into(),
                workgroup_shape: workgroup.to_vec(),
                source: Some(ir::SourceLocation {
                    file: "tests/ops.rs".into(),
                    line: 7,
                    column: 1,
                }),
                ..Default::default()
            },
        }
    }

    pub fn input(&mut self, d: DType, shape: &[u64]) -> u32 {
        self.dag.inputs.push(tensor_type(d, shape));
        self.dag.inputs.len() as u32 - 1
    }

    pub fn output(&mut self, d: DType, shape: &[u64]) -> u32 {
        self.dag.outputs.push(tensor_type(d, shape));
        self.dag.outputs.len() as u32 - 1
    }

    /// Declares a local tensor (no LOCAL_TENSOR expression: see [`Builder::local_fill`]).
    pub fn declare_local(&mut self, d: DType, shape: &[u64]) -> u32 {
        self.dag.locals.push(tensor_type(d, shape));
        self.dag.locals.len() as u32 - 1
    }

    /// Emits LOCAL_TENSOR for local `index` with a fill value.
    pub fn local_fill(&mut self, index: u32, fill: Literal) -> u32 {
        let d = DType::from_ir(self.dag.locals[index as usize].dtype).expect("dtype");
        let mut e = ir::Expression {
            code: Op::LocalTensor as i32,
            tensor: Some(ir::TensorRef {
                kind: TensorKind::Local as i32,
                index,
            }),
            ..Default::default()
        };
        set_literal(&mut e, d, fill);
        self.raw(e)
    }

    /// Declares a local tensor and emits its LOCAL_TENSOR with the fill value.
    pub fn local(&mut self, d: DType, shape: &[u64], fill: Literal) -> u32 {
        let index = self.declare_local(d, shape);
        self.local_fill(index, fill);
        index
    }

    pub fn dtype(&self, id: u32) -> DType {
        DType::from_ir(self.dag.expressions[id as usize].dtype).expect("a value")
    }

    pub fn raw(&mut self, e: ir::Expression) -> u32 {
        self.dag.expressions.push(e);
        self.dag.expressions.len() as u32 - 1
    }

    pub fn push(&mut self, code: Op, dtype: Option<DType>, operands: &[u32]) -> u32 {
        self.raw(ir::Expression {
            code: code as i32,
            dtype: dtype.map_or(0, |d| d.to_ir() as i32),
            operands: operands.to_vec(),
            ..Default::default()
        })
    }

    pub fn constant(&mut self, d: DType, v: Literal) -> u32 {
        let mut e = ir::Expression {
            code: Op::Const as i32,
            dtype: d.to_ir() as i32,
            ..Default::default()
        };
        set_literal(&mut e, d, v);
        self.raw(e)
    }

    pub fn f32(&mut self, v: f32) -> u32 {
        self.constant(DType::F32, Literal::Float(v as f64))
    }

    pub fn f64(&mut self, v: f64) -> u32 {
        self.constant(DType::F64, Literal::Float(v))
    }

    pub fn i64(&mut self, v: i64) -> u32 {
        self.constant(DType::I64, Literal::Int(v))
    }

    pub fn i32(&mut self, v: i32) -> u32 {
        self.constant(DType::I32, Literal::Int(v as i64))
    }

    pub fn boolean(&mut self, v: bool) -> u32 {
        self.constant(DType::Bool, Literal::Bool(v))
    }

    pub fn position(&mut self, axis: u32) -> u32 {
        self.raw(ir::Expression {
            code: Op::Position as i32,
            dtype: DType::I64.to_ir() as i32,
            axis,
            ..Default::default()
        })
    }

    fn tensor_dtype(&self, kind: TensorKind, index: u32) -> DType {
        let list = match kind {
            TensorKind::Input => &self.dag.inputs,
            TensorKind::Output => &self.dag.outputs,
            _ => &self.dag.locals,
        };
        DType::from_ir(list[index as usize].dtype).expect("known dtype")
    }

    pub fn read(&mut self, kind: TensorKind, index: u32, indices: &[u32]) -> u32 {
        let d = self.tensor_dtype(kind, index);
        self.raw(ir::Expression {
            code: Op::Read as i32,
            dtype: d.to_ir() as i32,
            operands: indices.to_vec(),
            tensor: Some(ir::TensorRef {
                kind: kind as i32,
                index,
            }),
            ..Default::default()
        })
    }

    pub fn write(&mut self, kind: TensorKind, index: u32, indices: &[u32], value: u32) -> u32 {
        let mut operands = indices.to_vec();
        operands.push(value);
        self.raw(ir::Expression {
            code: Op::Write as i32,
            operands,
            tensor: Some(ir::TensorRef {
                kind: kind as i32,
                index,
            }),
            ..Default::default()
        })
    }

    pub fn var(&mut self, init: u32) -> u32 {
        let d = self.dtype(init);
        self.push(Op::Variable, Some(d), &[init])
    }

    pub fn assign(&mut self, var: u32, value: u32) -> u32 {
        self.push(Op::Assign, None, &[var, value])
    }

    /// A unary, binary or ternary op whose dtype is derived like the validator's rules.
    pub fn op(&mut self, code: Op, operands: &[u32]) -> u32 {
        let to_bool = matches!(
            code,
            Op::Lt
                | Op::Le
                | Op::Gt
                | Op::Ge
                | Op::Eq
                | Op::Ne
                | Op::And
                | Op::Or
                | Op::Isinf
                | Op::Isfinite
                | Op::Isnan
        );
        let d = if to_bool {
            DType::Bool
        } else if code == Op::Select {
            self.dtype(operands[1])
        } else {
            self.dtype(operands[0])
        };
        self.push(code, Some(d), operands)
    }

    pub fn cast(&mut self, x: u32, to: DType) -> u32 {
        self.push(Op::Cast, Some(to), &[x])
    }

    pub fn if_(&mut self, c: u32) -> u32 {
        self.push(Op::If, None, &[c])
    }

    pub fn else_(&mut self) -> u32 {
        self.push(Op::Else, None, &[])
    }

    pub fn end_if(&mut self) -> u32 {
        self.push(Op::EndIf, None, &[])
    }

    pub fn range(&mut self, start: u32, end: u32, step: u32) -> u32 {
        self.push(Op::Range, Some(DType::I64), &[start, end, step])
    }

    pub fn end_range(&mut self) -> u32 {
        self.push(Op::EndRange, None, &[])
    }

    pub fn while_begin(&mut self) -> u32 {
        self.push(Op::WhileBegin, None, &[])
    }

    pub fn while_cond(&mut self, c: u32) -> u32 {
        self.push(Op::WhileCond, None, &[c])
    }

    pub fn while_end(&mut self) -> u32 {
        self.push(Op::WhileEnd, None, &[])
    }

    pub fn build(self) -> ir::ExpressionDag {
        self.dag
    }
}

/// A private cache directory (removed when dropped) and options using it.
pub struct TestCache {
    pub dir: tempfile::TempDir,
}

impl TestCache {
    pub fn new() -> TestCache {
        TestCache {
            dir: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    pub fn options(&self) -> CompileOptions {
        CompileOptions::default().with_cache_dir(self.dir.path())
    }
}

/// Compiles `dag` into a fresh private cache.
pub fn compiled(dag: &ir::ExpressionDag) -> (Arc<CompiledOperator>, TestCache) {
    let cache = TestCache::new();
    let (op, outcome) = compile_with_outcome(dag, &cache.options())
        .unwrap_or_else(|e| panic!("compilation failed: {e}"));
    assert_eq!(outcome, CacheOutcome::Compiled);
    (op, cache)
}

/// Zero-filled outputs of the operator's declared types.
pub fn zero_outputs(dag: &ir::ExpressionDag) -> Vec<HostTensor> {
    dag.outputs
        .iter()
        .map(|t| {
            let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
            HostTensor::zeros(DType::from_ir(t.dtype).expect("dtype"), &shape)
        })
        .collect()
}

/// Runs the compiled operator with `threads` threads.
pub fn run(
    op: &CompiledOperator,
    dag: &ir::ExpressionDag,
    inputs: &[&HostTensor],
    threads: usize,
) -> Result<Vec<HostTensor>, ovl_codegen::RunError> {
    let mut outputs = zero_outputs(dag);
    op.run(inputs, &mut outputs, threads)?;
    Ok(outputs)
}

/// Bit patterns of every element, so that 0.0 != -0.0; every NaN is mapped to one pattern
/// (the sign and payload of a NaN are not specified: they depend on operand order in the
/// hardware, which compilers may commute).
pub fn bits(t: &HostTensor) -> Vec<u64> {
    use ovl_core::TensorData as D;
    match &t.data {
        D::F32(v) => v
            .iter()
            .map(|x| {
                if x.is_nan() {
                    u64::MAX
                } else {
                    x.to_bits() as u64
                }
            })
            .collect(),
        D::F64(v) => v
            .iter()
            .map(|x| if x.is_nan() { u64::MAX } else { x.to_bits() })
            .collect(),
        D::I8(v) => v.iter().map(|&x| x as u8 as u64).collect(),
        D::I16(v) => v.iter().map(|&x| x as u16 as u64).collect(),
        D::I32(v) => v.iter().map(|&x| x as u32 as u64).collect(),
        D::I64(v) => v.iter().map(|&x| x as u64).collect(),
        D::U8(v) => v.iter().map(|&x| x as u64).collect(),
        D::U16(v) => v.iter().map(|&x| x as u64).collect(),
        D::U32(v) => v.iter().map(|&x| x as u64).collect(),
        D::U64(v) => v.clone(),
        D::Bool(v) => v.iter().map(|&x| x as u64).collect(),
    }
}

/// Element `i` of a tensor, printed.
pub fn element(t: &HostTensor, i: usize) -> String {
    ovl_core::with_tensor_data!(&t.data, v => format!("{:?}", v[i]))
}

/// Runs the operator compiled and in the reference interpreter and asserts bit-identical
/// outputs (NaN matching any NaN) and the same error-or-not; returns the compiled outputs.
pub fn same_as_interpreter(
    dag: &ir::ExpressionDag,
    inputs: &[&HostTensor],
    threads: usize,
) -> Vec<HostTensor> {
    let (op, _cache) = compiled(dag);
    let got = run(&op, dag, inputs, threads);
    let mut expected = zero_outputs(dag);
    let interp = ovl_core::interp::interpret(dag, inputs, &mut expected);
    match (&got, &interp) {
        (Ok(g), Ok(())) => {
            for (k, (g, e)) in g.iter().zip(&expected).enumerate() {
                assert_eq!(g.dtype(), e.dtype());
                let (gb, eb) = (bits(g), bits(e));
                for (i, (x, y)) in gb.iter().zip(&eb).enumerate() {
                    assert_eq!(
                        x,
                        y,
                        "output {k} element {i} differs: compiled {:?} interpreter {:?}\ninputs \
                         {:?}\n{}",
                        g.data.dtype(),
                        e.data.dtype(),
                        inputs.iter().map(|t| element(t, i)).collect::<Vec<_>>(),
                        ovl_core::text::to_text(dag)
                    );
                }
            }
            got.expect("checked")
        }
        _ => panic!("compiled: {got:?}\ninterpreter: {interp:?}"),
    }
}
