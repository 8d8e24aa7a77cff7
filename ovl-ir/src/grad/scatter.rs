//! The gradient of an input read at indices computed from data (a gather, `x[idx[i], j]`): a
//! scatter-add whose order is defined, so that results are the same on every backend and in
//! every run.
//!
//! The input's indices that every read names by the same position axis (`j` above, over the
//! whole axis) are *bound*: one worker per combination of them, which owns that slice of the
//! gradient. The others are *free*: the worker keeps its slice in a local buffer (at most
//! [`crate::limits::PORTABLE_LOCAL_BYTES`]), walks the forward workers with its bound
//! coordinates in row-major order (the others over their whole range), runs each one's
//! backward sweep, and adds the adjoint of every read into the buffer at the read's indices (the
//! data-dependent ones as the forward computed them) as the walk reaches it; then it writes the
//! buffer out. A forward worker's reads are thus summed in the order of forward workers, then
//! of the sweep, which one thread follows on every backend. Elements no read lands on get 0.

use super::affine::Affine;
use super::sweep::{ScatterIndex, Sink, Sweep};
use super::{write_slice, Slice};
use crate::builder::Builder;
use crate::dtype::{DType, Literal};
use crate::typed::ValueId;
use std::collections::HashMap;

/// How a gathered input's gradient is laid out over workers.
pub(super) struct Plan {
    /// The gradient operator's workgroup: the bound indices' extents (`[1]` with none).
    pub workgroup: Vec<u64>,
    /// Bound indices (`fixed`, each with its worker axis) and free ones (the buffer's shape).
    pub slice: Slice,
    /// The forward position axis of each bound index, in the order of the worker axes.
    axes: Vec<usize>,
}

impl Plan {
    /// The plan for an input of `shape` read by `reads` (each index affine or `None`) in a
    /// forward operator of workgroup `w`.
    pub fn new(reads: &[(ValueId, Vec<Option<Affine>>)], w: &[u64], shape: &[u64]) -> Plan {
        let position_axis = |a: &Option<Affine>| -> Option<usize> {
            let a = a.as_ref()?;
            if !a.loops.is_empty() || a.constant != 0 {
                return None;
            }
            match a.single_axis()? {
                (p, 1) => Some(p),
                _ => None,
            }
        };
        let (mut fixed, mut axes) = (Vec::new(), Vec::new());
        for (d, &n) in shape.iter().enumerate() {
            let Some(p) = reads.first().and_then(|(_, m)| position_axis(&m[d])) else {
                continue;
            };
            let every = reads.iter().all(|(_, m)| position_axis(&m[d]) == Some(p));
            if every && w[p] == n && !axes.contains(&p) {
                fixed.push((d, axes.len()));
                axes.push(p);
            }
        }
        let free: Vec<usize> = (0..shape.len())
            .filter(|d| !fixed.iter().any(|&(x, _)| x == *d))
            .collect();
        let sizes = free.iter().map(|&d| shape[d]).collect();
        let workgroup = if axes.is_empty() {
            vec![1]
        } else {
            fixed.iter().map(|&(d, _)| shape[d]).collect()
        };
        Plan {
            workgroup,
            slice: Slice { fixed, free, sizes },
            axes,
        }
    }

    /// The bytes of each worker's buffer.
    pub fn buffer_bytes(&self, d: DType) -> u64 {
        self.slice.bytes(d)
    }
}

/// Emits the scatter into `b` (a gradient operator of the plan's workgroup, output `out`).
pub(super) fn emit(
    b: &mut Builder,
    sweep: &Sweep<'_>,
    plan: &Plan,
    w: &[u64],
    reads: &[(ValueId, Vec<Option<Affine>>)],
    d: DType,
    out: u32,
) {
    let q: Vec<ValueId> = (0..plan.workgroup.len() as u32)
        .map(|a| b.position(a))
        .collect();
    let local = b.local(d, &plan.slice.sizes, Literal::Float(0.0));
    let (zero, one) = (b.i64(0), b.i64(1));
    let mut pos: Vec<Option<ValueId>> = vec![None; w.len()];
    for (k, &p) in plan.axes.iter().enumerate() {
        pos[p] = Some(q[k]);
    }
    let mut loops = 0;
    for (axis, slot) in pos.iter_mut().enumerate() {
        if slot.is_none() {
            let n = b.i64(w[axis] as i64);
            *slot = Some(b.range(zero, n, one));
            loops += 1;
        }
    }
    let pos: Vec<ValueId> = pos.into_iter().map(|v| v.unwrap_or(zero)).collect();
    let sinks: HashMap<ValueId, Sink> = reads
        .iter()
        .map(|(e, parts)| {
            let index = plan
                .slice
                .free
                .iter()
                .map(|&f| match &parts[f] {
                    Some(a) => ScatterIndex::Affine(a.clone()),
                    None => ScatterIndex::Operand(f),
                })
                .collect();
            (*e, Sink::Scatter { local, index })
        })
        .collect();
    sweep.emit(b, &pos, &sinks);
    for _ in 0..loops {
        b.end_range();
    }
    write_slice(b, &plan.slice, local, out, &q);
}
