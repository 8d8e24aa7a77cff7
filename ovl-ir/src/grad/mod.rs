//! Reverse-mode differentiation of an operator's IR into gradient operators in the same IR.
//!
//! Given a validated operator, which of its inputs need a gradient and which of its outputs
//! carry an adjoint, [`derive()`] emits operators that compute the gradients. They read the
//! forward inputs and the outputs' adjoints, never the forward outputs: each recomputes what it
//! needs (see `sweep`), so it fuses with the forward operator and with other operators like any
//! operator.
//!
//! **What is differentiated.** Float arithmetic and every op of the table with a derivative rule
//! ([`crate::derivatives`]), casts between floats, `select`, worker-local variables, `if`/`else`
//! (the backward walk takes the branch the forward took), worker-local tensors (their adjoint
//! is a local tensor of the same shape), counted loops that carry only sums
//! from one iteration to the next, counted loops with constant bounds that carry any state
//! (recurrences: the state is recorded per worker, or checkpointed, see `sweep::tape`), sum and
//! product accumulators, min and max accumulators (the adjoint goes to the value equal to the
//! result: on a tie the last in loop order, the initial value only when none equals it), and
//! reads of inputs at indices that are
//! affine maps of the worker's position and of loop indices (the worker's own element,
//! broadcasts, transposes and other permutations, stencils, strided and reversed reads,
//! convolutions), and at indices computed from data. Integer and bool values carry no gradient.
//! Forward values are recomputed, not stored (see `sweep`), except the state of recurrences.
//!
//! **How adjoints are accumulated.** Without races and deterministically:
//! - when every read of an input is outside loops, provably in bounds, one-to-one (no two
//!   workers read one element) and the reads' maps cover disjoint elements (the worker's
//!   element; the four gates of an LSTM cell read at `[b, h + k H]`), the input's gradient is
//!   written by the forward's own workers, each element by the one worker that read it. All
//!   such inputs share one gradient operator with the forward's workgroup, with the inputs
//!   read once, inside loops, at elements no other worker or iteration reads, whose adjoint is
//!   written in the iteration of the backward walk that reaches the read, and the inputs each
//!   worker owns a slice of (every read indexes them by the worker's position and otherwise by
//!   loop indices and literals: a row read in several loops), whose adjoints are summed in a
//!   worker-local buffer (within the GPU's row-buffer budget) written out after the sweep;
//! - otherwise (a broadcast, a stencil, a read under a guard that may fall outside, a read in
//!   a loop) the input gets its own gradient operator, one worker per input element, which sums
//!   over the forward workers that read it: the read map is inverted (each position axis that
//!   an index names alone is solved from it, with its divisibility and range checked; the other
//!   axes are looped over, only over the window `q - loop part` when an index is the axis plus
//!   terms of loops with known bounds; indices naming a loop's index are compared at the read,
//!   in the iteration the backward walk is at), each such worker's sweep is recomputed and its
//!   adjoints added, in a fixed order (map by map in program order, loops in axis order), so
//!   the result is the same on every run and every backend;
//! - an input read at an index computed from data (a gather) gets a scatter-add in a defined
//!   order (`scatter`): one worker per slice of the gradient, summing in a local buffer in
//!   forward-worker order.
//!
//! **What is an error** ([`DeriveError`], naming the operator, its source line and the
//! construct): `while` loops, counted loops whose bounds are not constants carrying more than
//! sums into what the gradient needs (a local tensor changed in the loop counts as carried),
//! records past the worker-local memory bound even checkpointed, a gather whose scatter-add buffer would
//! pass the local-memory limit per worker, writes at a
//! data-dependent index, at an index two workers or two iterations may share, or twice by one
//! worker, sizes known only at run time, and library calls. Never a wrong gradient.

mod affine;
mod check;
mod scatter;
mod sweep;

pub use affine::{affine_of, Affine, IndexMap};

use crate::builder::{Builder, OUT};
use crate::dtype::Literal;
use crate::ir::{self, Op};
use crate::typed::{Kernel, ValueId};
use affine::{disjoint, in_bounds, injective};
use std::collections::HashMap;
use thiserror::Error;

/// A construct the pass does not differentiate.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Construct {
    /// `while` loops run a data-dependent number of times.
    #[error("a `while` loop (its trip count depends on data) is not differentiated")]
    WhileLoop,
    /// A counted loop whose iterations depend on each other other than through sums (a value
    /// the backward pass needs is computed from a variable the loop updates: `p = p * x`), and
    /// whose bounds are not constants, so that its record cannot be sized.
    #[error("a counted loop whose bounds are known only when it runs carries a value from one iteration to the next that the gradient needs (loops with constant bounds are recorded; only sums may be carried otherwise: `s += f(..)`)")]
    LoopCarried,
    /// A counted loop carrying values the gradient needs whose record does not fit in the
    /// worker-local memory left to records, even checkpointed.
    #[error("the counted loop at expression {at} ({trips} iterations) carries values the gradient needs: recording them takes {recorded} bytes per worker, checkpointing every sqrt(n)-th iteration {checkpointed} bytes, past the {} KiB per worker that the records of an operator share (fewer iterations per worker, or a smaller carried state, fit)", crate::limits::PORTABLE_LOCAL_BYTES / 1024)]
    TapeTooLarge {
        /// The loop's RANGE expression.
        at: u32,
        /// Its trip count.
        trips: u64,
        /// Bytes per worker to record every iteration.
        recorded: u64,
        /// Bytes per worker with checkpoints every `ceil(sqrt(trips))` iterations.
        checkpointed: u64,
    },
    /// A product reduction, or a min/max one reduced by several loops, in a loop whose bounds
    /// are not constants (its record cannot be sized).
    #[error("a `{combiner}` reduction in a loop whose bounds are known only when it runs is not differentiated (sums are, and min/max reduced by one loop; products and the others are in loops with constant bounds)")]
    Reduction {
        /// `product`, `min` or `max`.
        combiner: &'static str,
    },
    /// An output written at an index computed from data.
    #[error("output {output} is written at an index that depends on data")]
    DataDependentWrite {
        /// The output.
        output: u32,
    },
    /// An output written at an index that two workers may share.
    #[error("output {output} is written at an index that two workers may share")]
    SharedWrite {
        /// The output.
        output: u32,
    },
    /// An output written more than once by a worker (or at two different indices).
    #[error("output {output} is written more than once by a worker (outside exclusive `if`/`else` branches, or at two index patterns)")]
    RepeatedWrite {
        /// The output.
        output: u32,
    },
    /// A differentiated input read at an index computed from data, whose scatter-add would
    /// need a buffer past the local-memory limit per worker.
    #[error("input {input} is read at an index that depends on data (a gather), and the scatter-add of its gradient would keep more than {} KiB per worker (the elements of the input along the indices that are not the forward worker's position)", crate::limits::PORTABLE_LOCAL_BYTES / 1024)]
    DataDependentRead {
        /// The input.
        input: u32,
    },
    /// Sizes known only at run time.
    #[error("its sizes are known only at run time (symbolic)")]
    Symbolic,
    /// A library call (a GEMM).
    #[error("it is a library call")]
    LibraryCall,
    /// The emitted operator did not validate: a bug of the pass.
    #[error("the derived gradient operator is invalid (a bug in ovl): {0}")]
    Internal(String),
}

/// Why an operator's gradient could not be derived.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("cannot derive the gradient of operator `{operator}`{}: {construct}; attach a gradient with `#[operator(gradient = ..)]` or `set_gradient`", crate::names::at(.defined_at))]
pub struct DeriveError {
    /// The operator's name.
    pub operator: String,
    /// `file:line` of the operator's source, or empty.
    pub defined_at: String,
    /// What stopped the derivation.
    pub construct: Construct,
}

/// Where an input of a gradient operator comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradInput {
    /// Input `i` of the forward operator.
    Forward(u32),
    /// The adjoint of output `o` of the forward operator.
    Adjoint(u32),
}

/// One derived gradient operator.
#[derive(Clone, Debug, PartialEq)]
pub struct GradOperator {
    /// The operator (validated).
    pub dag: ir::ExpressionDag,
    /// Its inputs, in order: every forward input, then the adjoints of the outputs that have
    /// one.
    pub inputs: Vec<GradInput>,
    /// Its outputs: output `i` is the gradient of forward input `outputs[i]`.
    pub outputs: Vec<u32>,
}

/// Derives the gradient operators of `dag` (which passed [`crate::validate::validate`]):
/// gradients for the inputs where `wanted` holds, from adjoints of the outputs where `seeded`
/// holds. An input that gets no operator output has a zero gradient (no active read); integer
/// and bool inputs never get one.
pub fn derive(
    dag: &ir::ExpressionDag,
    wanted: &[bool],
    seeded: &[bool],
) -> Result<Vec<GradOperator>, DeriveError> {
    let fail = |construct| DeriveError {
        operator: dag.name.clone(),
        defined_at: crate::names::defined_at(dag),
        construct,
    };
    if crate::library::is_library_call(dag) {
        return Err(fail(Construct::LibraryCall));
    }
    if dag.symbol_count > 0 || !dag.symbolic_workgroup.is_empty() {
        return Err(fail(Construct::Symbolic));
    }
    let k = Kernel::from_validated(dag);
    let float_in = |i: usize| k.inputs[i].dtype.is_float();
    let wanted: Vec<bool> = (0..k.inputs.len())
        .map(|i| wanted.get(i).copied().unwrap_or(false) && float_in(i))
        .collect();
    let seeded: Vec<bool> = (0..k.outputs.len())
        .map(|o| seeded.get(o).copied().unwrap_or(false) && k.outputs[o].dtype.is_float())
        .collect();
    let facts = check::analyse(&k, &wanted, &seeded).map_err(fail)?;
    let w = check::workgroup(&k).map_err(fail)?;

    // The gradient operators' inputs: forward inputs, then the adjoints.
    let mut inputs: Vec<GradInput> = (0..k.inputs.len() as u32).map(GradInput::Forward).collect();
    let mut adjoint_inputs = vec![None; k.outputs.len()];
    for (o, &s) in seeded.iter().enumerate() {
        if s {
            adjoint_inputs[o] = Some(inputs.len() as u32);
            inputs.push(GradInput::Adjoint(o as u32));
        }
    }
    let none = sweep::Plan::default();
    let sweep = sweep::Sweep {
        dag,
        k: &k,
        facts: &facts,
        adjoint_inputs: &adjoint_inputs,
        plan: &none,
    };
    let plan = sweep.check_loops().map_err(fail)?;
    let sweep = sweep::Sweep {
        plan: &plan,
        ..sweep
    };
    let shell = |name: String, workgroup: &[u64]| {
        let mut b = Builder::new(&name, workgroup);
        b.dag.source = dag.source.clone();
        // The forward's local tensors keep their numbers (the sweep copies their accesses);
        // the gradient's own come after them.
        b.dag.locals = dag.locals.clone();
        for t in &inputs {
            let ty = match *t {
                GradInput::Forward(i) => &dag.inputs[i as usize],
                GradInput::Adjoint(o) => &dag.outputs[o as usize],
            };
            b.dag.inputs.push(ty.clone());
        }
        b
    };

    let mut direct = Vec::new();
    let mut looped = Vec::new();
    let mut owned: Vec<(usize, Slice)> = Vec::new();
    let mut local_bytes = 0u64;
    let mut gathered = Vec::new();
    for (i, reads) in facts.reads.iter().enumerate() {
        if reads.is_empty() {
            continue;
        }
        let shape = &dag.inputs[i].shape;
        let maps = distinct_maps(reads);
        // Written by the reading worker: reads outside loops only (one adjoint per read).
        let outside_loops = reads
            .iter()
            .all(|&(e, _)| k.enclosing_loops(e as usize).next().is_none());
        let ok = outside_loops
            && maps
                .iter()
                .all(|m| in_bounds(m, &w, shape) && injective(m, &w))
            && maps
                .iter()
                .enumerate()
                .all(|(a, x)| maps[a + 1..].iter().all(|y| disjoint(x, y, &w)));
        // The only read, inside loops, of elements that no other worker or iteration reads:
        // written by the reading worker in the iteration that read it.
        let single = match reads.as_slice() {
            [(e, map)] if !outside_loops => {
                let loops: Vec<ValueId> = k.enclosing_loops(*e as usize).collect();
                affine::injective_in_loops(map, &w, &loops)
            }
            _ => false,
        };
        let slice = owned_slice(&maps, &w, shape).filter(|s| {
            s.bytes(k.inputs[i].dtype) + local_bytes <= crate::limits::GPU_ROW_BUFFER_BYTES
        });
        if ok {
            direct.push(i);
        } else if single {
            looped.push(i);
        } else if let Some(slice) = slice {
            local_bytes += slice.bytes(k.inputs[i].dtype);
            owned.push((i, slice));
        } else {
            gathered.push(i);
        }
    }

    // Each gradient operator differentiates only the paths from its own inputs' reads.
    let only = |inputs: &[usize]| -> Result<check::Facts, DeriveError> {
        let mut w = vec![false; wanted.len()];
        for &i in inputs {
            w[i] = true;
        }
        check::analyse(&k, &w, &seeded).map_err(fail)
    };
    let mut ops = Vec::new();
    if !direct.is_empty() || !looped.is_empty() || !owned.is_empty() {
        let mine: Vec<usize> = direct
            .iter()
            .chain(&looped)
            .copied()
            .chain(owned.iter().map(|(i, _)| *i))
            .collect();
        let facts = only(&mine)?;
        let sweep = sweep::Sweep {
            facts: &facts,
            ..sweep
        };
        let mut b = shell(format!("{}_grad", dag.name), &dag.workgroup_shape);
        let pos: Vec<ValueId> = (0..w.len() as u32).map(|a| b.position(a)).collect();
        let mut outputs = Vec::new();
        let mut sinks = HashMap::new();
        for &i in &looped {
            let output = b.output(k.inputs[i].dtype, &dag.inputs[i].shape);
            let (e, index) = facts.reads[i][0].clone();
            sinks.insert(e, sweep::Sink::Write { output, index });
            outputs.push(i as u32);
        }
        // Owned slices: a local buffer each, summed into at every read, written out after.
        let mut buffers = Vec::new();
        for (i, slice) in &owned {
            let d = k.inputs[*i].dtype;
            let local = b.local(d, &slice.sizes, Literal::Float(0.0));
            for (e, map) in &facts.reads[*i] {
                let free = slice.free.iter().map(|&c| map[c].clone()).collect();
                sinks.insert(*e, sweep::Sink::Local { local, free });
            }
            buffers.push((*i, local));
        }
        let adj = sweep.emit(&mut b, &pos, &sinks);
        for ((i, slice), (_, local)) in owned.iter().zip(&buffers) {
            let out = b.output(k.inputs[*i].dtype, &dag.inputs[*i].shape);
            if !write_out_in_last_loop(&mut b, slice, *local, out, &pos) {
                write_slice(&mut b, slice, *local, out, &pos);
            }
            outputs.push(*i as u32);
        }
        for &i in &direct {
            let out = b.output(k.inputs[i].dtype, &dag.inputs[i].shape);
            for map in distinct_maps(&facts.reads[i]) {
                let total = sum_of(&mut b, &facts.reads[i], &map, &adj);
                let idx: Vec<ValueId> = map
                    .iter()
                    .map(|a| emit_affine(&mut b, a, &pos, &HashMap::new()))
                    .collect();
                b.write(OUT, out, &idx, total);
            }
            outputs.push(i as u32);
        }
        ops.push(finish(b, outputs, &inputs).map_err(fail)?);
    }
    // Inputs read at indices computed from data: a scatter-add in a defined order.
    for (i, reads) in facts.scattered.iter().enumerate() {
        if reads.is_empty() {
            continue;
        }
        let facts = only(&[i])?;
        let sweep = sweep::Sweep {
            facts: &facts,
            ..sweep
        };
        let (d, shape) = (k.inputs[i].dtype, &dag.inputs[i].shape);
        let reads = &facts.scattered[i];
        let plan = scatter::Plan::new(reads, &w, shape);
        if plan.buffer_bytes(d) > crate::limits::PORTABLE_LOCAL_BYTES {
            return Err(fail(Construct::DataDependentRead { input: i as u32 }));
        }
        let mut b = shell(format!("{}_grad_{i}", dag.name), &plan.workgroup);
        let out = b.output(d, shape);
        scatter::emit(&mut b, &sweep, &plan, &w, reads, d, out);
        ops.push(finish(b, vec![i as u32], &inputs).map_err(fail)?);
    }
    for &i in &gathered {
        let facts = only(&[i])?;
        let sweep = sweep::Sweep {
            facts: &facts,
            ..sweep
        };
        let shape = dag.inputs[i].shape.clone();
        let d = k.inputs[i].dtype;
        // A 0-d input: one worker (a workgroup has rank >= 1).
        let workgroup = if shape.is_empty() {
            vec![1]
        } else {
            shape.clone()
        };
        let mut b = shell(format!("{}_grad_{i}", dag.name), &workgroup);
        let out = b.output(d, &shape);
        let q: Vec<ValueId> = (0..shape.len() as u32).map(|a| b.position(a)).collect();
        let z = b.constant(d, Literal::Float(0.0));
        let total = b.var(z);
        for map in distinct_maps(&facts.reads[i]) {
            gather(&mut b, &sweep, &w, &map, &q, total, &facts.reads[i]);
        }
        b.write(OUT, out, &q, total);
        ops.push(finish(b, vec![i as u32], &inputs).map_err(fail)?);
    }
    Ok(ops)
}

/// The distinct index maps of `reads`, in program order.
fn distinct_maps(reads: &[(ValueId, IndexMap)]) -> Vec<IndexMap> {
    let mut maps: Vec<IndexMap> = Vec::new();
    for (_, m) in reads {
        if !maps.contains(m) {
            maps.push(m.clone());
        }
    }
    maps
}

/// The sum of the adjoints of the reads with map `map`, in program order.
fn sum_of(
    b: &mut Builder,
    reads: &[(ValueId, IndexMap)],
    map: &IndexMap,
    adj: &HashMap<ValueId, ValueId>,
) -> ValueId {
    let mut total: Option<ValueId> = None;
    for (e, m) in reads {
        if m != map {
            continue;
        }
        let a = adj[e];
        total = Some(match total {
            None => {
                // A copy of the variable's value here (an operand reads it where it is used).
                let d = b.dtype(a);
                let z = b.constant(d, Literal::Float(0.0));
                b.op(Op::Add, &[a, z])
            }
            Some(t) => b.op(Op::Add, &[t, a]),
        });
    }
    total.unwrap_or(0)
}

/// `a` of the position values `pos` and loop indices `loops`, in i64.
fn emit_affine(
    b: &mut Builder,
    a: &Affine,
    pos: &[ValueId],
    loops: &HashMap<ValueId, ValueId>,
) -> ValueId {
    // `None` until a term or a nonzero constant: an index that is one loop index or position
    // stays that value (what the GPU's cooperative rows recognise).
    let mut v = (a.constant != 0).then(|| b.i64(a.constant));
    let terms = a
        .coeffs
        .iter()
        .enumerate()
        .map(|(k, &c)| (pos[k], c))
        .chain(
            a.loops
                .iter()
                .map(|&(l, c)| (loops.get(&l).copied().unwrap_or(l), c)),
        );
    for (x, c) in terms.collect::<Vec<_>>() {
        if c == 0 {
            continue;
        }
        let term = if c == 1 {
            x
        } else {
            let c = b.i64(c);
            b.op(Op::Mul, &[x, c])
        };
        v = Some(match v {
            None => term,
            Some(v) => b.op(Op::Add, &[v, term]),
        });
    }
    v.unwrap_or_else(|| b.i64(0))
}

/// Adds to `total` the adjoints of the reads with map `map` of every forward worker whose read
/// lands on element `q`: the axes an index names alone are solved, the others looped over.
fn gather(
    b: &mut Builder,
    sweep: &sweep::Sweep<'_>,
    w: &[u64],
    map: &IndexMap,
    q: &[ValueId],
    total: ValueId,
    reads: &[(ValueId, IndexMap)],
) {
    let mut p: Vec<Option<ValueId>> = vec![None; w.len()];
    let mut conds: Vec<ValueId> = Vec::new();
    let mut solved_by = vec![false; map.len()];
    let zero = b.i64(0);
    for (d, a) in map.iter().enumerate() {
        let Some((axis, c)) = a.single_axis() else {
            continue;
        };
        if p[axis].is_some() {
            continue;
        }
        // q_d = c * p + k  =>  p = (q_d - k) / c, when divisible and inside the workgroup.
        let k = b.i64(a.constant);
        let t = b.op(Op::Sub, &[q[d], k]);
        let v = if c == 1 {
            t
        } else {
            let cc = b.i64(c);
            let r = b.op(Op::Mod, &[t, cc]);
            conds.push(b.op(Op::Eq, &[r, zero]));
            b.op(Op::Div, &[t, cc])
        };
        let n = b.i64(w[axis] as i64);
        conds.push(b.op(Op::Ge, &[v, zero]));
        conds.push(b.op(Op::Lt, &[v, n]));
        p[axis] = Some(v);
        solved_by[d] = true;
    }
    // The other axes: loops, in axis order; over the whole axis, or only over the workers
    // whose read can land on `q` when an index is `p + loop terms` (a convolution's window).
    let one = b.i64(1);
    let mut loops = 0;
    for (axis, slot) in p.iter_mut().enumerate() {
        if slot.is_some() {
            continue;
        }
        let n = b.i64(w[axis] as i64);
        let window = map.iter().enumerate().find_map(|(d, a)| {
            let only_axis =
                a.coeffs
                    .iter()
                    .enumerate()
                    .all(|(k, &c)| if k == axis { c == 1 } else { c == 0 });
            let (lo, hi) = loop_span(sweep.k, &a.loops)?;
            (only_axis && !a.loops.is_empty()).then_some((d, a.constant, lo, hi))
        });
        let (start, end) = match window {
            // q_d = p + constant + loop part, loop part in lo..=hi.
            Some((d, constant, lo, hi)) => {
                let (from, to) = (constant.checked_add(hi), constant.checked_add(lo));
                match (from, to) {
                    (Some(from), Some(to)) => {
                        let (from, to) = (b.i64(from), b.i64(to));
                        let first = b.op(Op::Sub, &[q[d], from]);
                        let last = b.op(Op::Sub, &[q[d], to]);
                        let after = b.op(Op::Add, &[last, one]);
                        let low = b.op(Op::Max, &[first, zero]);
                        (low, b.op(Op::Min, &[after, n]))
                    }
                    _ => (zero, n),
                }
            }
            None => (zero, n),
        };
        *slot = Some(b.range(start, end, one));
        loops += 1;
    }
    let pos: Vec<ValueId> = p.into_iter().map(|v| v.unwrap_or(zero)).collect();
    // The indices not used to solve must agree too: those of the position alone here, those
    // naming a loop's index at the read, in the iteration the backward walk is at.
    let mut checks = Vec::new();
    for (d, a) in map.iter().enumerate() {
        if solved_by[d] {
            continue;
        }
        if a.loops.is_empty() {
            let v = emit_affine(b, a, &pos, &HashMap::new());
            conds.push(b.op(Op::Eq, &[v, q[d]]));
        } else {
            checks.push((a.clone(), q[d]));
        }
    }
    let guard = conds.into_iter().reduce(|x, y| b.op(Op::And, &[x, y]));
    if let Some(g) = guard {
        b.if_(g);
    }
    let sinks: HashMap<ValueId, sweep::Sink> = reads
        .iter()
        .filter(|(_, m)| m == map)
        .map(|(e, _)| {
            let sink = sweep::Sink::Add {
                total,
                checks: checks.clone(),
            };
            (*e, sink)
        })
        .collect();
    sweep.emit(b, &pos, &sinks);
    if guard.is_some() {
        b.end_if();
    }
    for _ in 0..loops {
        b.end_range();
    }
}

/// The elements of an input that one worker owns: the indices that are the worker's position
/// (`pos[axis]`, the same in every read) and the free ones, which name no position.
struct Slice {
    /// Index `d` is position axis `axis`: `(d, axis)`.
    fixed: Vec<(usize, usize)>,
    /// The other indices, in order.
    free: Vec<usize>,
    /// The input's sizes along the free indices (the local buffer's shape).
    sizes: Vec<u64>,
}

impl Slice {
    fn bytes(&self, d: crate::DType) -> u64 {
        self.sizes
            .iter()
            .try_fold(d.size() as u64, |n, &s| n.checked_mul(s))
            .unwrap_or(u64::MAX)
    }
}

/// The slice each worker owns when every read of an input indexes it by the worker's position
/// (the same axes, at the same indices) and otherwise by loop indices and literals only, and
/// every axis of extent > 1 is among those: then no two workers read one element.
fn owned_slice(maps: &[IndexMap], w: &[u64], shape: &[u64]) -> Option<Slice> {
    let first = maps.first()?;
    let kind = |a: &Affine| -> Option<Option<usize>> {
        if a.coeffs.iter().all(|&c| c == 0) {
            return Some(None);
        }
        match a.single_axis() {
            Some((axis, 1)) if a.constant == 0 => Some(Some(axis)),
            _ => None,
        }
    };
    let kinds: Vec<Option<usize>> = first.iter().map(kind).collect::<Option<_>>()?;
    for m in maps {
        let k: Vec<Option<usize>> = m.iter().map(kind).collect::<Option<_>>()?;
        if k != kinds {
            return None;
        }
    }
    let fixed: Vec<(usize, usize)> = kinds
        .iter()
        .enumerate()
        .filter_map(|(d, k)| k.map(|axis| (d, axis)))
        .collect();
    let free: Vec<usize> = (0..kinds.len()).filter(|&d| kinds[d].is_none()).collect();
    let owns = w
        .iter()
        .enumerate()
        .all(|(axis, &n)| n <= 1 || fixed.iter().any(|&(_, a)| a == axis));
    // Every worker's slice lies inside the input (the write-out is in bounds).
    let inside = fixed.iter().all(|&(d, axis)| shape[d] >= w[axis]);
    if free.is_empty() || !owns || !inside {
        return None;
    }
    let sizes = free.iter().map(|&d| shape[d]).collect();
    Some(Slice { fixed, free, sizes })
}

/// Writes the buffer `local` of an owned slice to output `out`, element by element.
fn write_slice(b: &mut Builder, slice: &Slice, local: u32, out: u32, pos: &[ValueId]) {
    let (zero, one) = (b.i64(0), b.i64(1));
    let mut js = Vec::new();
    for &n in &slice.sizes {
        let n = b.i64(n as i64);
        js.push(b.range(zero, n, one));
    }
    let v = b.read(crate::builder::LOC, local, &js);
    let rank = slice.fixed.len() + slice.free.len();
    let mut idx = vec![zero; rank];
    for &(d, axis) in &slice.fixed {
        idx[d] = pos[axis];
    }
    for (f, &d) in slice.free.iter().enumerate() {
        idx[d] = js[f];
    }
    b.write(OUT, out, &idx, v);
    for _ in &slice.sizes {
        b.end_range();
    }
}

/// Writes a one-axis slice's buffer out where the sweep makes its last change to it, when that
/// is a write at the index of a top-level loop over the whole slice (`0..n`, step 1), made in
/// every iteration (not under an `if`), with no access to the buffer in that loop at another
/// index: the write goes to output `out` instead (at the slice's element), and no loop copying
/// the buffer out is needed. (The last walk of a row kernel's first loop, a layer norm's.)
/// Returns whether it did.
fn write_out_in_last_loop(
    b: &mut Builder,
    slice: &Slice,
    local: u32,
    out: u32,
    pos: &[ValueId],
) -> bool {
    let (&[free], &[n]) = (slice.free.as_slice(), slice.sizes.as_slice()) else {
        return false;
    };
    let exprs = &b.dag.expressions;
    let on_local = |i: usize| {
        exprs[i]
            .tensor
            .as_ref()
            .is_some_and(|t| t.kind == ir::TensorKind::Local as i32 && t.index == local)
    };
    let Some(last) = (0..exprs.len()).rev().find(|&i| on_local(i)) else {
        return false;
    };
    // `last` directly in the body of a top-level loop `l` (not under an `if`).
    let depths = crate::analysis::nesting_depths(&b.dag);
    let Some(l) = crate::analysis::innermost_loops(&b.dag)[last] else {
        return false;
    };
    if depths[last] != 1
        || exprs[last].code != Op::Write as i32
        || crate::analysis::counted_range(&b.dag, l) != Some((0, n))
        || exprs[last].operands.first() != Some(&(l as u32))
    {
        return false;
    }
    // Every access to the buffer in the loop is at the loop's own element.
    let end = (l + 1..exprs.len())
        .find(|&i| depths[i] == 0)
        .unwrap_or(exprs.len());
    if (l + 1..end).any(|i| on_local(i) && exprs[i].operands.first() != Some(&(l as u32))) {
        return false;
    }
    let value = exprs[last].operands[1];
    let rank = slice.fixed.len() + 1;
    let mut idx = vec![0u32; rank];
    for &(d, axis) in &slice.fixed {
        idx[d] = pos[axis];
    }
    idx[free] = l as u32;
    idx.push(value);
    let w = &mut b.dag.expressions[last];
    w.tensor = Some(ir::TensorRef {
        kind: ir::TensorKind::Output as i32,
        index: out,
    });
    w.operands = idx;
    true
}

/// The smallest and largest value of `sum(c * index)` over loops with constant bounds that run
/// at least once; `None` otherwise.
fn loop_span(k: &Kernel, loops: &[(ValueId, i64)]) -> Option<(i64, i64)> {
    let (mut lo, mut hi) = (0i64, 0i64);
    for &(l, c) in loops {
        let constant = |v: ValueId| match k.exprs[v as usize].inst {
            crate::typed::Inst::Const(Literal::Int(i)) => Some(i),
            _ => None,
        };
        let bounds: Vec<i64> = k
            .operands(l as usize)
            .map(constant)
            .collect::<Option<_>>()?;
        let [start, end, step] = bounds[..] else {
            return None;
        };
        if step <= 0 || end <= start {
            return None;
        }
        let trips = (end as i128 - start as i128 + step as i128 - 1) / step as i128;
        let last = i64::try_from(start as i128 + (trips - 1) * step as i128).ok()?;
        let (a, z) = (start.checked_mul(c)?, last.checked_mul(c)?);
        lo = lo.checked_add(a.min(z))?;
        hi = hi.checked_add(a.max(z))?;
    }
    Some((lo, hi))
}

/// Validates a built gradient operator.
fn finish(b: Builder, outputs: Vec<u32>, inputs: &[GradInput]) -> Result<GradOperator, Construct> {
    let dag = b.build();
    crate::validate::validate(&dag).map_err(|e| Construct::Internal(e.to_string()))?;
    Ok(GradOperator {
        dag,
        inputs: inputs.to_vec(),
        outputs,
    })
}

#[cfg(test)]
mod tests;
