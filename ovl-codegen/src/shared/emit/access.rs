//! Tensor accesses and faults: indices (checked only where the interval analysis cannot prove
//! them inside), reads, writes, variables, local tensors, and the chain that records a fault and
//! ends the worker.

use super::{list_kind, Dialect, Emitted, Emitter, TensorInfo, Unproven, STOP};
use crate::error::CodegenError;
use crate::shared::literal::ctype;
use crate::shared::sizes::Size;
use ovl_ir::ir::{self, Op, TensorKind};
use ovl_ir::names::kind_word;
use ovl_ir::DType;
use std::fmt::Write as _;

impl Emitter<'_> {
    pub(super) fn tensor(
        &self,
        k: usize,
        r: &Option<ir::TensorRef>,
    ) -> Result<&TensorInfo, CodegenError> {
        let r = r
            .as_ref()
            .ok_or_else(|| self.err(Some(k), "the expression names no tensor"))?;
        let list = match TensorKind::try_from(r.kind) {
            Ok(TensorKind::Input) => &self.inputs,
            Ok(TensorKind::Output) => &self.outputs,
            Ok(TensorKind::Local) => &self.locals,
            _ => return Err(self.err(Some(k), format!("unknown tensor kind {}", r.kind))),
        };
        list.get(r.index as usize).ok_or_else(|| {
            self.err(
                Some(k),
                format!(
                    "{} {} does not exist",
                    kind_word(list_kind(r.kind)),
                    r.index
                ),
            )
        })
    }

    /// Index operands `0..rank` of a READ/WRITE: (C++ linear index, the unproven axes as
    /// `(axis, variable, size)`).
    pub(super) fn indices(
        &self,
        k: usize,
        t: &TensorInfo,
    ) -> Result<(String, Unproven), CodegenError> {
        if let (TensorKind::Local, Some(c)) = (t.kind, &self.coop) {
            // A cooperative group's thread holds element `i` of a local (one axis, indexed by
            // a split loop from 0: `ovl_ir::cooperative::plan`) at `i / width`.
            let (o, _) = self.operand(k, 0)?;
            let linear = format!("(int32_t)((uint64_t)v{o} >> {})", c.width_log2());
            return Ok((linear, Vec::new()));
        }
        let mut terms = Vec::new();
        let mut unproven = Vec::new();
        // On the GPU, 64-bit integer arithmetic costs several instructions: index a tensor whose
        // elements a 32-bit int counts in 32 bits (every index is in range where it is used).
        // A tensor sized at run time is indexed in 64 bits.
        let narrow =
            self.dialect == Dialect::Cuda && t.elements.is_some_and(|n| n <= i32::MAX as u64);
        for axis in 0..t.shape.len() {
            let (o, d) = self.operand(k, axis)?;
            if !d.is_int() {
                return Err(self.err(Some(k), format!("index operand {axis} has dtype {d}")));
            }
            let v = format!("v{o}");
            let size = t.sizes[axis];
            if !self.proven_inside((k, axis, o), size) {
                unproven.push((axis, v.clone(), size.cpp_unsigned()));
            }
            if t.elements.is_none() {
                let idx = if d == DType::I64 {
                    v
                } else {
                    format!("(int64_t){v}")
                };
                terms.push(match t.stride(axis) {
                    None => idx,
                    Some(stride) => format!("{idx} * {stride}"),
                });
                continue;
            }
            let stride = t.strides[axis];
            if narrow {
                let idx = if d == DType::I32 {
                    v
                } else {
                    format!("(int32_t){v}")
                };
                terms.push(if stride == 1 {
                    idx
                } else {
                    format!("{idx} * {stride}")
                });
                continue;
            }
            let idx = if d == DType::I64 {
                v
            } else {
                format!("(int64_t){v}")
            };
            terms.push(if stride == 1 {
                idx
            } else {
                format!("{idx} * {stride}LL")
            });
        }
        let mut linear = if terms.is_empty() {
            "0".to_string()
        } else {
            terms.join(" + ")
        };
        if let (TensorKind::Local, Some(b)) = (t.kind, &self.blocked) {
            // The block keeps the workers' copies interleaved (`blocked`).
            linear = format!("({linear}) * {} + ovl_j", b.width);
        }
        Ok((linear, unproven))
    }

    pub(super) fn bounds_condition(unproven: &[(usize, String, String)]) -> String {
        unproven
            .iter()
            .map(|(_, v, size)| format!("ovl::inb({v}, {size})"))
            .collect::<Vec<_>>()
            .join(" && ")
    }

    /// The statements run when a bounds check fails: record the fault, end the worker.
    pub(super) fn fault_chain(
        &self,
        k: usize,
        t: &TensorInfo,
        unproven: &[(usize, String, String)],
    ) -> String {
        self.stops.set(true);
        let mut s = String::new();
        let w = self.worker_expr();
        for (i, (axis, v, size)) in unproven.iter().enumerate() {
            let call = format!(
                "ovl::oob(ovl_st, {k}, {}, {}, {axis}, {v}, {size}, {w});",
                t.kind as i32, t.index
            );
            if i + 1 < unproven.len() {
                let _ = write!(s, "if (!ovl::inb({v}, {size})) {call} else ");
            } else {
                s.push_str(&call);
            }
        }
        s.push(' ');
        s.push_str(STOP);
        s
    }

    /// Whether operand `j` of expression `k`, value `o`, is provably a valid index of a
    /// dimension of size `size`: by its interval where `k` reads it (narrowed by the guards
    /// around `k`) for a known size, by that interval and its symbolic bound for one sized at
    /// run time.
    pub(super) fn proven_inside(&self, (k, j, o): (usize, usize, usize), size: Size) -> bool {
        let Some(iv) = self.intervals.operand(k, j) else {
            return false;
        };
        match size {
            Size::Known(n) => iv.inside(n),
            Size::Symbolic {
                symbol,
                scale,
                offset,
            } => {
                iv.lo >= 0
                    && self
                        .intervals
                        .sym_bound(o)
                        .is_some_and(|b| b.below(symbol, scale, offset))
            }
        }
    }

    /// A READ of an input or local tensor (bounds-checked where not proven).
    pub(super) fn read(&mut self, k: usize) -> Emitted {
        let dag = self.dag;
        let e = &dag.expressions[k];
        let t = self.tensor(k, &e.tensor)?;
        if !matches!(t.kind, TensorKind::Input | TensorKind::Local) {
            return Err(self.err(Some(k), "a read must read an input or a local tensor"));
        }
        let (linear, unproven) = self.indices(k, t)?;
        let (d, name) = (t.dtype, t.name.clone());
        let ct = ctype(d);
        if let Some(lines) = self
            .lane_read(k, &name, &linear)
            .filter(|_| unproven.is_empty())
        {
            lines.iter().for_each(|l| self.line(l));
            return Ok(Some(d));
        }
        if unproven.is_empty() {
            self.line(&format!("const {ct} v{k} = {name}[{linear}];"));
        } else {
            let cond = Self::bounds_condition(&unproven);
            let faults = self.fault_chain(k, t, &unproven);
            self.line(&format!("{ct} v{k}{{}};"));
            self.line(&format!("if (OVL_LIKELY({cond})) v{k} = {name}[{linear}];"));
            self.line(&format!("else {{ {faults} }}"));
        }
        Ok(Some(d))
    }

    /// A WRITE to an output or local tensor (bounds-checked where not proven).
    pub(super) fn write(&mut self, k: usize) -> Emitted {
        let dag = self.dag;
        let e = &dag.expressions[k];
        let t = self.tensor(k, &e.tensor)?;
        if !matches!(t.kind, TensorKind::Output | TensorKind::Local) {
            return Err(self.err(Some(k), "a write must write an output or a local tensor"));
        }
        let rank = t.shape.len();
        let (value, vd) = self.operand(k, rank)?;
        if vd != t.dtype {
            return Err(self.err(
                Some(k),
                format!("writes a {vd} value into a {} tensor", t.dtype),
            ));
        }
        let (linear, unproven) = self.indices(k, t)?;
        let name = t.name.clone();
        if let Some(lines) = self
            .lane_write(k, &linear, value)
            .filter(|_| unproven.is_empty())
        {
            lines.iter().for_each(|l| self.line(l));
            return Ok(None);
        }
        // Outside its split loops, a cooperative group writes from its thread 0 only.
        let only_first = self.write_guard(t.kind == TensorKind::Output);
        if unproven.is_empty() {
            self.line(&format!("{only_first}{name}[{linear}] = v{value};"));
        } else {
            let cond = Self::bounds_condition(&unproven);
            let faults = self.fault_chain(k, t, &unproven);
            self.line(&format!(
                "if (OVL_LIKELY({cond})) {name}[{linear}] = v{value};"
            ));
            self.line(&format!("else {{ {faults} }}"));
        }
        Ok(None)
    }

    /// LOCAL_TENSOR: (re)fills a local tensor.
    pub(super) fn local_tensor(&mut self, k: usize) -> Emitted {
        let dag = self.dag;
        let e = &dag.expressions[k];
        let t = self.tensor(k, &e.tensor)?;
        if t.kind != TensorKind::Local {
            return Err(self.err(Some(k), "local_tensor must name a local tensor"));
        }
        let lit = self.literal(t.dtype, e.float_value, e.int_value, e.uint_value);
        // Locals have known sizes (checked in `Emitter::new`).
        let (name, mut n) = (t.name.clone(), t.elements.unwrap_or(0));
        if let Some(c) = &self.coop {
            // A cooperative group's thread holds its share (see `indices`).
            n = c.local_elements.get(t.index as usize).copied().unwrap_or(n);
        }
        if let Some(b) = &self.blocked {
            // Every worker's copy of the block (`blocked`).
            n = n.saturating_mul(b.width);
        }
        if n > 0 {
            self.line(&format!("ovl::fill({name}, {n}LL, {lit});"));
        }
        Ok(None)
    }

    /// A worker-local VARIABLE.
    pub(super) fn variable(&mut self, k: usize) -> Emitted {
        let (init, d) = self.operand(k, 0)?;
        self.line(&format!("{} v{k} = v{init};", ctype(d)));
        Ok(Some(d))
    }

    /// An ASSIGN to a variable.
    pub(super) fn assign(&mut self, k: usize) -> Emitted {
        let (var, vd) = self.operand(k, 0)?;
        let (value, d) = self.operand(k, 1)?;
        if self.ops[var] != Op::Variable {
            return Err(self.err(
                Some(k),
                format!("assigns to %{var}, which is not a variable"),
            ));
        }
        if vd != d {
            return Err(self.err(Some(k), format!("assigns a {d} value to a {vd} variable")));
        }
        self.line(&format!("v{var} = v{value};"));
        Ok(None)
    }
}
