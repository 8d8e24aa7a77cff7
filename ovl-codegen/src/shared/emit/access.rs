//! Tensor accesses and faults: indices (checked only where the interval analysis cannot prove
//! them inside), reads, writes, variables, local tensors, and the chain that records a fault and
//! ends the worker.

use super::{Dialect, Emitted, Emitter, TensorInfo, Unproven, STOP};
use crate::shared::literal::{load, storage_literal, store, vtype};
use crate::shared::sizes::Size;
use ovl_ir::ir::TensorKind;
use ovl_ir::typed::{TensorId, ValueId};
use ovl_ir::{DType, Literal};
use std::fmt::Write as _;

impl Emitter<'_> {
    /// The indices of READ/WRITE `k` of `t` (integers, one per dimension, as validation
    /// proved): (C++ linear index, the unproven axes as `(axis, variable, size)`).
    pub(super) fn indices(
        &self,
        k: usize,
        t: &TensorInfo,
        indices: &[ValueId],
    ) -> (String, Unproven) {
        if let (TensorKind::Local, Some(c)) = (t.kind, &self.coop) {
            // A cooperative group's thread holds element `i` of a local (one axis, indexed by
            // a split loop from 0: `ovl_ir::cooperative::plan`) at `i / width`.
            let o = indices[0];
            let linear = format!("(int32_t)((uint64_t)v{o} >> {})", c.width_log2());
            return (linear, Vec::new());
        }
        let mut terms = Vec::new();
        let mut unproven = Vec::new();
        // On the GPU, 64-bit integer arithmetic costs several instructions: index a tensor whose
        // elements a 32-bit int counts in 32 bits (every index is in range where it is used).
        // A tensor sized at run time is indexed in 64 bits.
        let narrow =
            self.dialect == Dialect::Cuda && t.elements.is_some_and(|n| n <= i32::MAX as u64);
        for (axis, &index) in indices.iter().enumerate() {
            let (o, d) = self.value(index);
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
        (linear, unproven)
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
    pub(super) fn read(&mut self, k: usize, tensor: TensorId, indices: &[ValueId]) -> Emitted {
        let t = self.tensor_info(tensor);
        let (linear, unproven) = self.indices(k, t, indices);
        let (d, name) = (t.dtype, t.name.clone());
        let ct = vtype(d);
        if let Some(lines) = self
            .lane_read(k, &name, &linear)
            .filter(|_| unproven.is_empty())
        {
            lines.iter().for_each(|l| self.line(l));
            return Ok(Some(d));
        }
        let element = load(d, &format!("{name}[{linear}]"));
        if unproven.is_empty() {
            self.line(&format!("const {ct} v{k} = {element};"));
        } else {
            let cond = Self::bounds_condition(&unproven);
            let faults = self.fault_chain(k, t, &unproven);
            self.line(&format!("{ct} v{k}{{}};"));
            self.line(&format!("if (OVL_LIKELY({cond})) v{k} = {element};"));
            self.line(&format!("else {{ {faults} }}"));
        }
        Ok(Some(d))
    }

    /// A WRITE of `value` to an output or local tensor (bounds-checked where not proven).
    pub(super) fn write(
        &mut self,
        k: usize,
        tensor: TensorId,
        indices: &[ValueId],
        value: ValueId,
    ) -> Emitted {
        let t = self.tensor_info(tensor);
        let value = value as usize;
        let (linear, unproven) = self.indices(k, t, indices);
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
        let store = store(t.dtype, &format!("{name}[{linear}]"), &format!("v{value}"));
        if unproven.is_empty() {
            self.line(&format!("{only_first}{store}"));
        } else {
            let cond = Self::bounds_condition(&unproven);
            let faults = self.fault_chain(k, t, &unproven);
            self.line(&format!("if (OVL_LIKELY({cond})) {store}"));
            self.line(&format!("else {{ {faults} }}"));
        }
        Ok(None)
    }

    /// LOCAL_TENSOR at expression `k`: (re)fills a local tensor with `fill`, except where the
    /// loop that follows writes every element before anything reads one
    /// (`ovl_ir::written::overwritten_before_read`; a row buffer of softmax, 16 KiB per row)
    /// and each worker holds the whole local (not a cooperative group's share).
    pub(super) fn local_tensor(&mut self, k: usize, tensor: TensorId, fill: Literal) -> Emitted {
        if self.coop.is_none() && ovl_ir::written::overwritten_before_read(&self.kernel, k) {
            self.line("// written whole by the next loop before any read: no fill");
            return Ok(None);
        }
        let t = self.tensor_info(tensor);
        // The fill is an element in memory: a half one is the struct of its bits.
        let lit = if t.dtype.is_half() {
            let (f, i, u) = super::literal_parts(fill);
            storage_literal(t.dtype, f, i, u)
        } else {
            self.typed_literal(t.dtype, fill)
        };
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
    pub(super) fn variable(&mut self, k: usize, init: ValueId) -> Emitted {
        let (init, d) = self.value(init);
        self.line(&format!("{} v{k} = v{init};", vtype(d)));
        Ok(Some(d))
    }

    /// An ASSIGN of `value` to a VARIABLE.
    pub(super) fn assign(&mut self, variable: ValueId, value: ValueId) -> Emitted {
        self.line(&format!("v{variable} = v{value};"));
        Ok(None)
    }
}
