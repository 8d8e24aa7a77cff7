//! Canonical structural hashing of the IR.
//!
//! The hash is SHA-256 over a canonical walk of the IR, not over the protobuf bytes (protobuf
//! serialization is not canonical: field order, packed or unpacked repeated fields and unknown
//! fields may differ between encoders for the same message). The walk visits every field in a
//! fixed order; lists are prefixed by their length, strings by their byte length, floats are
//! hashed by their bit pattern (so `0.0` and `-0.0` differ) and enums by their number. The
//! operator's source location is *not* hashed: moving an operator in its file must not change
//! its identity. Its name is hashed.

use crate::ir;
use sha2::{Digest as _, Sha256};

/// A 256-bit digest of a canonical walk of the IR; `Display` prints it as 64 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// The digest as 64 lower-case hex digits.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

/// `bytes` as lower-case hexadecimal text, two digits a byte: the workspace's one hex encoder
/// (digests, cache keys, the XLA custom call's attributes, golden files).
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// The bytes of hexadecimal text ([`hex`]'s inverse; upper-case digits are accepted too), or
/// `None` when `text` has an odd length or a character that is not a hex digit.
pub fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    text.chunks(2)
        .map(|p| match p {
            [a, b] => Some(digit(*a)? << 4 | digit(*b)?),
            _ => None,
        })
        .collect()
}

/// Feeds a canonical encoding of values to SHA-256.
struct Walk(Sha256);

impl Walk {
    fn new(domain: &str) -> Walk {
        let mut w = Walk(Sha256::new());
        w.str(domain);
        w
    }

    fn u64(&mut self, v: u64) {
        self.0.update(v.to_le_bytes());
    }

    fn u32(&mut self, v: u32) {
        self.u64(v as u64);
    }

    fn i64(&mut self, v: i64) {
        self.u64(v as u64);
    }

    fn i32(&mut self, v: i32) {
        self.i64(v as i64);
    }

    fn f64(&mut self, v: f64) {
        self.u64(v.to_bits());
    }

    fn len(&mut self, n: usize) {
        self.u64(n as u64);
    }

    fn str(&mut self, s: &str) {
        self.len(s.len());
        self.0.update(s.as_bytes());
    }

    fn u64s(&mut self, v: &[u64]) {
        self.len(v.len());
        for &x in v {
            self.u64(x);
        }
    }

    fn tensor_type(&mut self, t: &ir::TensorType) {
        self.i32(t.dtype);
        self.u64s(&t.shape);
        self.symbolic(&t.symbolic);
    }

    /// Symbolic dimensions; nothing for a concrete shape, so concrete IR hashes as before.
    fn symbolic(&mut self, dims: &[ir::SymbolicDim]) {
        if dims.is_empty() {
            return;
        }
        self.str("symbolic");
        self.len(dims.len());
        for d in dims {
            self.u32(d.dim);
            self.u32(d.symbol);
            self.i64(d.scale);
            self.i64(d.offset);
        }
    }

    fn tensor_types(&mut self, list: &[ir::TensorType]) {
        self.len(list.len());
        for t in list {
            self.tensor_type(t);
        }
    }

    fn expression(&mut self, e: &ir::Expression) {
        self.i32(e.code);
        self.i32(e.dtype);
        self.len(e.operands.len());
        for &o in &e.operands {
            self.u32(o);
        }
        self.f64(e.float_value);
        self.i64(e.int_value);
        self.u64(e.uint_value);
        match &e.tensor {
            None => self.u32(0),
            Some(t) => {
                self.u32(1);
                self.i32(t.kind);
                self.u32(t.index);
            }
        }
        self.u32(e.axis);
    }

    fn expression_dag(&mut self, dag: &ir::ExpressionDag) {
        self.u32(dag.version);
        self.str(&dag.name);
        self.len(dag.expressions.len());
        for e in &dag.expressions {
            self.expression(e);
        }
        self.u64s(&dag.workgroup_shape);
        self.symbolic(&dag.symbolic_workgroup);
        if dag.symbol_count > 0 {
            self.str("symbol_count");
            self.u32(dag.symbol_count);
        }
        self.tensor_types(&dag.inputs);
        self.tensor_types(&dag.outputs);
        self.tensor_types(&dag.locals);
        if let Some(call) = &dag.library_call {
            self.str("library_call");
            match &call.call {
                None => self.u32(0),
                Some(ir::library_call::Call::Gemm(g)) => {
                    self.u32(1);
                    self.u32(g.transpose_a as u32);
                    self.u32(g.transpose_b as u32);
                }
            }
        }
        // `source` is deliberately not hashed.
        match &dag.gradient {
            None => self.u32(0),
            Some(g) => {
                self.u32(1);
                self.operator_dag(g);
            }
        }
    }

    fn value_ref(&mut self, v: &ir::ValueRef) {
        match &v.source {
            None => self.u32(0),
            Some(ir::value_ref::Source::GraphInput(k)) => {
                self.u32(1);
                self.u32(*k);
            }
            Some(ir::value_ref::Source::OpOutput(o)) => {
                self.u32(2);
                self.u32(o.operator);
                self.u32(o.output);
            }
        }
    }

    fn operator_dag(&mut self, dag: &ir::OperatorDag) {
        self.u32(dag.version);
        self.len(dag.operators.len());
        for op in &dag.operators {
            self.expression_dag(op);
        }
        self.tensor_types(&dag.inputs);
        self.len(dag.operator_inputs.len());
        for inputs in &dag.operator_inputs {
            self.len(inputs.inputs.len());
            for v in &inputs.inputs {
                self.value_ref(v);
            }
        }
        self.len(dag.outputs.len());
        for v in &dag.outputs {
            self.value_ref(v);
        }
        if !dag.symbols.is_empty() {
            self.str("symbols");
            self.len(dag.symbols.len());
            for s in &dag.symbols {
                self.str(s);
            }
        }
    }

    fn finish(self) -> Digest {
        Digest(self.0.finalize().into())
    }
}

/// Hash of an operator, independent of protobuf serialization details and of the operator's
/// source location (every other field counts, the name included).
pub fn canonical_hash(dag: &ir::ExpressionDag) -> Digest {
    let mut w = Walk::new("ovl.ir.ExpressionDAG");
    w.expression_dag(dag);
    w.finish()
}

/// Hash of an operator DAG: every operator (as in [`canonical_hash`], without source
/// locations), the graph inputs, the wiring and the outputs.
pub fn canonical_hash_operator_dag(dag: &ir::OperatorDag) -> Digest {
    let mut w = Walk::new("ovl.ir.OperatorDAG");
    w.operator_dag(dag);
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{Builder, IN, OUT};
    use crate::dtype::{DType, Literal};
    use crate::ir::Op;

    #[test]
    fn hex_writes_two_lower_case_digits_a_byte_and_unhex_reads_them_back() {
        let bytes: Vec<u8> = (0..=255).collect();
        let text = hex(&bytes);
        assert_eq!(&text[..8], "00010203");
        assert_eq!(&text[text.len() - 4..], "feff");
        let formatted: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(text, formatted);
        assert_eq!(unhex(text.as_bytes()).unwrap(), bytes);
        assert_eq!(unhex(b"0A"), Some(vec![10]));
        assert_eq!(hex(&[]), "");
        for bad in [&b"abc"[..], b"0g", b"+1", b" 1"] {
            assert_eq!(unhex(bad), None, "{bad:?}");
        }
        assert_eq!(Digest([0xab; 32]).to_string(), "ab".repeat(32));
    }

    fn add_op(c: f32) -> ir::ExpressionDag {
        let mut b = Builder::new("add_const", &[4]);
        b.input(DType::F32, &[4]);
        b.output(DType::F32, &[4]);
        let i = b.position(0);
        let x = b.read(IN, 0, &[i]);
        let k = b.f32(c);
        let y = b.op(Op::Add, &[x, k]);
        b.write(OUT, 0, &[i], y);
        b.build()
    }

    #[test]
    fn equal_dags_hash_equal() {
        assert_eq!(canonical_hash(&add_op(1.0)), canonical_hash(&add_op(1.0)));
        let h = canonical_hash(&add_op(1.0)).to_string();
        assert_eq!(h.len(), 64);
        assert!(h
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }

    #[test]
    fn every_meaningful_change_changes_the_hash() {
        let base = add_op(1.0);
        let h = canonical_hash(&base);
        let mut changed = Vec::new();

        changed.push(add_op(2.0));
        changed.push(add_op(-0.0));
        let mut d = base.clone();
        d.outputs[0].shape = vec![5];
        changed.push(d);
        let mut d = base.clone();
        d.workgroup_shape = vec![5];
        changed.push(d);
        let mut d = base.clone();
        d.inputs[0].dtype = DType::F64.to_ir() as i32;
        changed.push(d);
        let mut d = base.clone();
        d.expressions[3].code = Op::Mul as i32;
        changed.push(d);
        let mut d = base.clone();
        d.expressions[3].operands.swap(0, 1);
        changed.push(d);
        let mut d = base.clone();
        d.name = "other".into();
        changed.push(d);
        let mut d = base.clone();
        d.version += 1;
        changed.push(d);
        let mut d = base.clone();
        d.locals.push(ir::TensorType {
            symbolic: Vec::new(),
            dtype: DType::F32.to_ir() as i32,
            shape: vec![],
        });
        changed.push(d);
        let mut d = base.clone();
        d.expressions[0].axis = 1;
        changed.push(d);
        let mut d = base.clone();
        d.gradient = Some(ir::OperatorDag::default());
        changed.push(d);

        let mut seen = vec![h];
        for d in &changed {
            let hd = canonical_hash(d);
            assert!(
                !seen.contains(&hd),
                "a change did not change the hash: {d:?}"
            );
            seen.push(hd);
        }
    }

    #[test]
    fn the_source_location_is_not_hashed() {
        let a = add_op(1.0);
        let mut b = a.clone();
        b.source = Some(ir::SourceLocation {
            file: "elsewhere.rs".into(),
            line: 999,
            column: 7,
        });
        assert_eq!(canonical_hash(&a), canonical_hash(&b));
        b.source = None;
        assert_eq!(canonical_hash(&a), canonical_hash(&b));
    }

    #[test]
    fn list_boundaries_are_unambiguous() {
        // Moving a dimension from the workgroup to an input shape must change the hash.
        let mut a = add_op(1.0);
        a.workgroup_shape = vec![4, 4];
        a.inputs[0].shape = vec![4];
        let mut b = a.clone();
        b.workgroup_shape = vec![4];
        b.inputs[0].shape = vec![4, 4];
        assert_ne!(canonical_hash(&a), canonical_hash(&b));
        // A bool constant stored as int_value: unused fields are hashed too.
        let mut b = Builder::new("k", &[1]);
        b.constant(DType::Bool, Literal::Bool(true));
        let x = b.build();
        let mut y = x.clone();
        y.expressions[0].int_value = 0;
        assert_ne!(canonical_hash(&x), canonical_hash(&y));
    }

    fn graph(op: ir::ExpressionDag) -> ir::OperatorDag {
        let t = op.inputs[0].clone();
        ir::OperatorDag {
            symbols: Vec::new(),
            version: crate::IR_VERSION,
            operators: vec![op.clone(), op],
            inputs: vec![t],
            operator_inputs: vec![
                ir::OperatorInputs {
                    inputs: vec![ir::ValueRef {
                        source: Some(ir::value_ref::Source::GraphInput(0)),
                    }],
                },
                ir::OperatorInputs {
                    inputs: vec![ir::ValueRef {
                        source: Some(ir::value_ref::Source::OpOutput(ir::OperatorOutput {
                            operator: 0,
                            output: 0,
                        })),
                    }],
                },
            ],
            outputs: vec![ir::ValueRef {
                source: Some(ir::value_ref::Source::OpOutput(ir::OperatorOutput {
                    operator: 1,
                    output: 0,
                })),
            }],
        }
    }

    #[test]
    fn operator_dag_hash() {
        let g = graph(add_op(1.0));
        assert_eq!(
            canonical_hash_operator_dag(&g),
            canonical_hash_operator_dag(&graph(add_op(1.0)))
        );
        assert_ne!(
            canonical_hash_operator_dag(&g),
            canonical_hash_operator_dag(&graph(add_op(3.0)))
        );
        let mut rewired = g.clone();
        rewired.operator_inputs[1].inputs[0].source = Some(ir::value_ref::Source::GraphInput(0));
        assert_ne!(
            canonical_hash_operator_dag(&g),
            canonical_hash_operator_dag(&rewired)
        );
        let mut moved = g.clone();
        moved.operators[0].source = Some(ir::SourceLocation {
            file: "x.rs".into(),
            line: 1,
            column: 1,
        });
        assert_eq!(
            canonical_hash_operator_dag(&g),
            canonical_hash_operator_dag(&moved)
        );
    }
}
