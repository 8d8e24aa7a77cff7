//! Fusion by index substitution: a producer recomputed inside its consumer at every read.
//!
//! Where the consumer reads output `o` of the producer at index `g` (any index expression, in
//! any region: a broadcast, a transpose, a reversed, strided or neighbour read, a read inside
//! the consumer's staged loops and reductions), the merged operator computes the producer's
//! worker position `p` that wrote element `g`, and runs a copy of the part of the producer's
//! program that computes `o`'s value, with `p` in place of the producer's position. The
//! workgroups may differ. The producer stays a kernel of its own only while another operator
//! reads it or its output is requested.
//!
//! What is inverted: the producer's single write of `o` (at the top level, outside any loop or
//! branch; it may follow loops and reductions, e.g. a row maximum) must be an affine map of
//! the position in which every position component of extent > 1 appears in exactly one index,
//! with coefficient 1 or -1, and that index depends on no other component: a permutation of
//! the components with constant offsets and reversals (`[p0]`, `[p1, p0]`, `[p0, 0]`,
//! `[n - 1 - p0]`, `[p0 + 3]`). Then `p_k = ±(g_d - c_d)`. Anything else (`[2*p0]`,
//! `[p0 + p1]`) is refused as [`Reason::NotInvertible`].
//!
//! What is proved, so that semantics, faults included, are exactly preserved:
//! - the producer cannot fault for any worker of its workgroup (every access provably in
//!   bounds, every loop step provably positive, no while loop): recomputing it elsewhere
//!   cannot move a fault ([`Reason::ProducerMayFault`]);
//! - every read lands, for every worker of the consumer, on an element the producer writes:
//!   `p` provably inside the producer's workgroup and the indices the write keeps constant
//!   provably equal to theirs. A read that might be outside the tensor keeps reading memory,
//!   so it faults exactly as before ([`Reason::ReadOutsideWrites`]). The proofs use the
//!   interval analysis of `interval`, which narrows ranges inside guarding `if`s.
//!
//! The cost model (`cost`) decides whether the recomputation pays.

use crate::cost::{self, Verdict};
use crate::graph::{label, Node, Src, Work};
use crate::legality::{check_writes, VerticalPlan};
use crate::merge::{names_of, tidy, Splice};
use crate::report::Reason;
use ovl_ir::intervals::{Interval, Intervals};
use ovl_ir::ir::{self, Op, TensorKind};
use ovl_ir::pattern::{Affine, IndexPattern, PatternAnalysis};
use ovl_ir::typed::{Inst, Kernel};
use ovl_ir::{DType, Literal};

/// How to compute one component of the producer's position from the read index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Component {
    /// An axis of extent <= 1: always 0.
    Zero,
    /// `p = sign * (g[dim] - offset)`.
    FromIndex {
        dim: usize,
        offset: i64,
        negate: bool,
    },
}

/// One handed-over output: its write, the inverse of the write map, and what to recompute.
#[derive(Clone, Debug)]
struct Inlined {
    output: u32,
    /// The producer's write of it.
    write: usize,
    /// One per component of the producer's position.
    inverse: Vec<Component>,
    /// The producer's expressions (before the write) that compute the written value.
    slice: Vec<bool>,
}

/// A legal, profitable substitution of a producer into a consumer.
#[derive(Clone, Debug)]
pub(crate) struct SubstitutionPlan {
    outputs: Vec<Inlined>,
    /// For each consumer input slot: the producer output it reads, if any.
    pub slot_output: Vec<Option<u32>>,
    /// How many times each element is computed after the substitution (the largest over the
    /// outputs).
    pub recompute: f64,
    /// The producer outputs that stay in memory for other readers or as requested results.
    pub kept: Vec<u32>,
    /// The work per element (operation units) of the handed-over outputs that the consumer
    /// computes once more beside the producer, which stays (those computed at most once more;
    /// 0 when the producer goes away).
    pub duplicated: f64,
}

/// The checks for recomputing `producer` in `consumer` at every read.
pub(crate) fn check(
    work: &Work,
    producer: usize,
    consumer: usize,
) -> Result<SubstitutionPlan, Reason> {
    let (plan, write_patterns): (VerticalPlan, Vec<(u32, IndexPattern)>) =
        check_writes(work, producer, consumer)?;
    let (p, c) = (work.node(producer), work.node(consumer));
    let p_iv = work.intervals(producer);
    if let Some(why) = p_iv.first_possible_fault(&p.dag) {
        return Err(Reason::ProducerMayFault { why });
    }
    let c_iv = work.intervals(consumer);
    let (kp, kc) = (work.kernel(producer), work.kernel(consumer));
    let mut c_patterns = PatternAnalysis::new(&kc, &c.dag.workgroup_shape);
    let p_workers: f64 = p.dag.workgroup_shape.iter().map(|&d| d as f64).product();
    let c_workers: f64 = c.dag.workgroup_shape.iter().map(|&d| d as f64).product();
    // The producer's outputs other readers (or the graph's results) still need: it stays.
    let kept: Vec<u32> = (0..p.dag.outputs.len() as u32)
        .filter(|&o| {
            work.used_outside(
                Src::Op {
                    node: producer,
                    output: o,
                },
                consumer,
            )
        })
        .collect();
    let producer_stays = !kept.is_empty();
    // A producer that stays is computed once more in the consumer: at most `MOST_COMPUTED`
    // times in all, so that copies of copies (a recurrence's forward values, read by two
    // kernels each step) cannot grow with the graph.
    let computed = work.most_computed(producer);
    if producer_stays && computed >= cost::MOST_COMPUTED {
        return Err(Reason::ComputedTooOften { times: computed });
    }

    // Whether a boundary keeps the two apart for good (asked only where it matters).
    let apart = std::cell::OnceCell::new();
    let apart = || *apart.get_or_init(|| work.boundary_between(producer, consumer));
    let mut outputs = Vec::new();
    let mut recompute_max = 0.0f64;
    let mut duplicated = 0.0f64;
    for (h, (o, write_pattern)) in plan.handoffs.iter().zip(&write_patterns) {
        debug_assert_eq!(h.output, *o);
        let maps = write_pattern.affine().unwrap_or_default();
        let inverse =
            invert(maps, &p.dag.workgroup_shape).ok_or_else(|| Reason::NotInvertible {
                output: *o,
                write: write_pattern.clone(),
            })?;
        // Every read of `o` lands on a written element; count the reads per worker.
        let mut reads_per_worker = 0.0f64;
        let mut first_read: Option<IndexPattern> = None;
        let mut strided_read: Option<IndexPattern> = None;
        for (i, at, shared) in read_sites(&kc, &plan.slot_output, *o) {
            let read = c_patterns.access(i);
            if strided_read.is_none()
                && !follows_innermost(&read, &inverse, &kp, cost::innermost_axis(&kc))
            {
                strided_read = Some(read.clone());
            }
            if let Some(axis) = outside_writes(i, maps, &inverse, &c_iv, &p.dag.workgroup_shape) {
                if read.affine().is_none() {
                    return Err(Reason::OpaqueRead {
                        write: write_pattern.clone(),
                        read,
                    });
                }
                return Err(Reason::ReadOutsideWrites {
                    output: *o,
                    write: write_pattern.clone(),
                    read,
                    axis,
                });
            }
            if shared.is_none() {
                // A hoisted recomputation runs as often as the loop it was hoisted out of
                // opens (a loop's opener is outside the loop).
                reads_per_worker += cost::runs_per_worker(&kc, &c_iv, at)
                    .ok_or(Reason::UnknownRecomputeCount { output: *o })?;
            }
            first_read.get_or_insert(read);
        }
        let slice = slice_of(&kp, h.write);
        let work_per_element =
            cost::work(&kp, &slice, &p_iv).ok_or(Reason::UnknownRecomputeCount { output: *o })?;
        let recompute = if p_workers > 0.0 {
            c_workers * reads_per_worker / p_workers
        } else {
            0.0
        };
        let verdict = Verdict::new(recompute, work_per_element, producer_stays);
        if !verdict.accepts() {
            return Err(Reason::TooCostly {
                output: *o,
                write: write_pattern.clone(),
                read: first_read.unwrap_or(IndexPattern::Opaque {
                    why: "no read".into(),
                }),
                recompute: verdict.recompute.round() as u64,
                work: verdict.work.round() as u64,
            });
        }
        if let Some(read) = strided_read {
            let reads = cost::lockstep_reads(&kp, &slice, &p_iv)
                .ok_or(Reason::UnknownRecomputeCount { output: *o })?;
            if !verdict.strided(reads).accepts() {
                return Err(Reason::StridedRecompute {
                    output: *o,
                    write: write_pattern.clone(),
                    read,
                    reads: reads.round() as u64,
                });
            }
        }
        if producer_stays {
            // The copy loads its own inputs where the consumer does not read them already.
            // With a boundary between the two kernels, which therefore never become one (in
            // which the loads would be shared), more such loads than the copy saves trade
            // memory for memory and add the work: an LSTM step's kernel recomputing the
            // previous step's cell state, the product `h U` between them, read six gate values
            // and the state before to save reading the state.
            let loads = cost::loads(&kp, &slice, &p_iv, |slot| {
                p.inputs
                    .get(slot as usize)
                    .is_some_and(|src| !c.inputs.contains(src))
            })
            .ok_or(Reason::UnknownRecomputeCount { output: *o })?;
            let saved = recompute + if kept.contains(o) { 0.0 } else { 1.0 };
            if recompute * loads > saved + 1e-9 && apart() {
                return Err(Reason::CopyLoadsMore {
                    output: *o,
                    loads: (recompute * loads).round() as u64,
                    saved: saved.round() as u64,
                });
            }
        }
        recompute_max = recompute_max.max(recompute);
        if producer_stays && recompute <= 1.0 + 1e-9 {
            duplicated += work_per_element;
        }
        outputs.push(Inlined {
            output: *o,
            write: h.write,
            inverse,
            slice,
        });
    }
    // Copies add up: each may repeat a few operations, but not a chain of them (an unrolled
    // LSTM's cell state, each step's copy inlined into the next step's kernel, made the last
    // kernels recompute every step: 2x the layer's time at T = 35).
    if producer_stays && c.duplicated + duplicated > cost::DUPLICATE_WORK {
        return Err(Reason::DuplicatesTooMuch {
            work: (c.duplicated + duplicated).round() as u64,
        });
    }
    Ok(SubstitutionPlan {
        outputs,
        slot_output: plan.slot_output,
        recompute: recompute_max,
        kept,
        duplicated,
    })
}

/// Where the recomputation for the read `i` goes: before the outermost of its enclosing RANGE
/// loops (innermost first, stopping at any other block) that its index does not depend on
/// (its index operands are all defined before the loop opens), else at the read itself. The
/// recomputation is then loop-invariant code outside the loop, run once per loop instead of
/// once per iteration. It never leaves a branch: a guard may be what keeps the index valid.
fn hoist_point(kernel: &Kernel, i: usize) -> usize {
    let last_operand = kernel.operands(i).max();
    let mut at = i;
    let mut enclosing = kernel.exprs[i].block;
    while let Some(l) = enclosing {
        let invariant = last_operand.is_none_or(|x| x < l);
        if !matches!(kernel.exprs[l as usize].inst, Inst::Range { .. }) || !invariant {
            break;
        }
        at = l as usize;
        enclosing = kernel.exprs[l as usize].block;
    }
    at
}

/// The reads of producer output `o` in the consumer: (read, hoist point), and whether a read
/// shares the recomputation of an earlier one (same index operands, same hoist point).
fn read_sites(
    kernel: &Kernel,
    slot_output: &[Option<u32>],
    o: u32,
) -> Vec<(usize, usize, Option<usize>)> {
    let mut sites: Vec<(usize, usize, Option<usize>)> = Vec::new();
    for i in 0..kernel.exprs.len() {
        if !reads_slot_of(kernel, i, slot_output, o) {
            continue;
        }
        let at = hoist_point(kernel, i);
        let shared = (at != i)
            .then(|| {
                sites
                    .iter()
                    .find(|&&(j, a, _)| a == at && kernel.operands(j).eq(kernel.operands(i)))
            })
            .flatten()
            .map(|&(j, _, _)| j);
        sites.push((i, at, shared));
    }
    sites
}

/// Whether expression `i` reads a consumer input slot that holds producer output `o`.
fn reads_slot_of(kernel: &Kernel, i: usize, slot_output: &[Option<u32>], o: u32) -> bool {
    kernel
        .input_read(i)
        .is_some_and(|t| slot_output.get(t as usize).copied().flatten() == Some(o))
}

/// Whether the consumer's read `read` moves the producer's innermost position (through the
/// write's `inverse`) by ±1 with the consumer's innermost position (`consumer_inner`, see
/// [`cost::innermost_axis`]), so that neighbouring consumer workers recompute neighbouring
/// producer workers. A producer with a single worker has no neighbours to keep.
fn follows_innermost(
    read: &IndexPattern,
    inverse: &[Component],
    producer: &Kernel,
    consumer_inner: Option<usize>,
) -> bool {
    let Some(p_inner) = cost::innermost_axis(producer) else {
        return true;
    };
    let Some(&Component::FromIndex { dim, .. }) = inverse.get(p_inner) else {
        return true;
    };
    let (Some(maps), Some(inner)) = (read.affine(), consumer_inner) else {
        return false;
    };
    maps.get(dim)
        .is_some_and(|m| m.coeffs.get(inner).is_some_and(|c| c.abs() == 1))
}

/// The inverse of a write map over `workgroup`, when every position component of extent > 1
/// appears in exactly one index, alone, with coefficient 1 or -1.
fn invert(maps: &[Affine], workgroup: &[u64]) -> Option<Vec<Component>> {
    let live = |k: usize| workgroup.get(k).is_some_and(|&d| d > 1);
    let mut inverse = Vec::with_capacity(workgroup.len());
    for k in 0..workgroup.len() {
        if !live(k) {
            inverse.push(Component::Zero);
            continue;
        }
        let dims: Vec<usize> = (0..maps.len())
            .filter(|&d| maps[d].coeffs[k] != 0)
            .collect();
        let [dim] = dims.as_slice() else {
            return None;
        };
        let m = &maps[*dim];
        let a = m.coeffs[k];
        let alone = (0..workgroup.len()).all(|j| j == k || !live(j) || m.coeffs[j] == 0);
        if !alone || a.abs() != 1 {
            return None;
        }
        inverse.push(Component::FromIndex {
            dim: *dim,
            offset: m.constant,
            negate: a < 0,
        });
    }
    Some(inverse)
}

/// The first tensor axis on which the read `read` may land outside the elements the producer
/// writes (its index range, from the consumer's intervals, must map into the producer's
/// workgroup, and equal the write's constant on the axes the write keeps constant).
fn outside_writes(
    read: usize,
    maps: &[Affine],
    inverse: &[Component],
    iv: &Intervals,
    workgroup: &[u64],
) -> Option<usize> {
    let span = |d: usize| iv.operand(read, d);
    let mut dims_used = vec![false; maps.len()];
    for (k, comp) in inverse.iter().enumerate() {
        if let Component::FromIndex {
            dim,
            offset,
            negate,
        } = *comp
        {
            dims_used[dim] = true;
            let Some(Interval { lo, hi }) = span(dim) else {
                return Some(dim);
            };
            let (lo, hi) = (lo - offset as i128, hi - offset as i128);
            let (lo, hi) = if negate { (-hi, -lo) } else { (lo, hi) };
            if lo < 0 || hi >= workgroup[k] as i128 {
                return Some(dim);
            }
        }
    }
    for (d, m) in maps.iter().enumerate() {
        if dims_used[d] {
            continue;
        }
        // The write's index on this axis does not depend on any live component: constant
        // (a component of extent 1 is 0).
        let c = m.constant as i128;
        if span(d) != Some(Interval::point(c)) {
            return Some(d);
        }
    }
    None
}

/// The expressions before `write` that its value depends on: operands, every assignment of a
/// variable and accumulation of an accumulator it reads, the initialisation and writes of a
/// local tensor it reads, and the control flow enclosing any of them.
fn slice_of(kernel: &Kernel, write: usize) -> Vec<bool> {
    let exprs = &kernel.exprs[..write];
    let n = exprs.len();
    // The block structure: the opener enclosing each expression (a closer's is its own
    // opener), and each opener's parts (its ELSE or WHILE_COND and its closer).
    let parent = |i: usize| -> Option<usize> {
        match exprs[i].inst {
            Inst::EndIf { if_: o } | Inst::EndRange { range: o } | Inst::WhileEnd { begin: o } => {
                Some(o as usize)
            }
            _ => exprs[i].block.map(|b| b as usize),
        }
    };
    let parts = |i: usize| -> Vec<usize> {
        match exprs[i].inst {
            Inst::If { else_, end, .. } => else_.into_iter().chain([end]).collect(),
            Inst::Range { close, .. } => vec![close],
            Inst::WhileBegin { cond, end } => vec![cond, end],
            _ => Vec::new(),
        }
        .into_iter()
        .map(|x| x as usize)
        .collect()
    };
    let local_of = |x: &Inst| match x {
        Inst::Read { tensor, .. }
        | Inst::Write { tensor, .. }
        | Inst::LocalTensor { tensor, .. }
            if tensor.kind == TensorKind::Local =>
        {
            Some(tensor.index)
        }
        _ => None,
    };
    let mut needed = vec![false; n];
    let mut todo: Vec<usize> = Vec::new();
    let value = match kernel.exprs[write].inst {
        Inst::Write { value, .. } => value as usize,
        _ => 0,
    };
    let mark = |i: usize, needed: &mut Vec<bool>, todo: &mut Vec<usize>| {
        if i < n && !needed[i] {
            needed[i] = true;
            todo.push(i);
        }
    };
    mark(value, &mut needed, &mut todo);
    while let Some(i) = todo.pop() {
        for op in kernel.operands(i) {
            mark(op as usize, &mut needed, &mut todo);
        }
        if let Some(p) = parent(i) {
            mark(p, &mut needed, &mut todo);
        }
        for part in parts(i) {
            mark(part, &mut needed, &mut todo);
        }
        match &exprs[i].inst {
            Inst::Variable { .. } | Inst::Accumulator { .. } => {
                for (j, x) in exprs.iter().enumerate() {
                    let updates = match x.inst {
                        Inst::Assign { variable: v, .. }
                        | Inst::Accumulate { accumulator: v, .. } => v as usize == i,
                        _ => false,
                    };
                    if updates {
                        mark(j, &mut needed, &mut todo);
                    }
                }
            }
            read @ Inst::Read { .. } => {
                if let Some(t) = local_of(read) {
                    for (j, x) in exprs.iter().enumerate() {
                        let fills = matches!(x.inst, Inst::LocalTensor { .. } | Inst::Write { .. });
                        if fills && local_of(&x.inst) == Some(t) {
                            mark(j, &mut needed, &mut todo);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    needed
}

/// The consumer with the producer recomputed at every read of the handed-over outputs. The
/// producer itself is unchanged (it stays while other readers need it).
pub(crate) fn substitute(
    producer: &Node,
    consumer: &Node,
    plan: &SubstitutionPlan,
    originals: &[String],
) -> Node {
    let names = names_of(producer, consumer, originals);
    let mut s = Splice::new(consumer, &names);
    s.dag.outputs = consumer.dag.outputs.clone();
    s.dag.locals = consumer.dag.locals.clone();
    let c_inputs = s.consumer_inputs(consumer, &plan.slot_output);
    let (kp, kc) = (
        Kernel::from_validated(&producer.dag),
        Kernel::from_validated(&consumer.dag),
    );
    let uses_locals = plan.outputs.iter().any(|o| {
        kp.exprs[..o.write].iter().zip(&o.slice).any(|(e, &k)| {
            k && matches!(&e.inst,
                Inst::Read { tensor, .. } | Inst::Write { tensor, .. } | Inst::LocalTensor { tensor, .. }
                    if tensor.kind == TensorKind::Local)
        })
    });
    let p_local_base = s.dag.locals.len() as u32;
    if uses_locals {
        s.dag.locals.extend(producer.dag.locals.iter().cloned());
    }
    let mut p_inputs: Vec<Option<u32>> = vec![None; producer.inputs.len()];

    // Where each read's recomputation goes.
    let mut hoisted: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    let mut shares: std::collections::HashMap<usize, usize> = Default::default();
    for inl in &plan.outputs {
        for (i, at, shared) in read_sites(&kc, &plan.slot_output, inl.output) {
            match shared {
                Some(j) => {
                    shares.insert(i, j);
                }
                None if at != i => hoisted.entry(at).or_default().push(i),
                None => {}
            }
        }
    }
    let mut values: std::collections::HashMap<usize, u32> = Default::default();
    let plan_of = |i: usize| -> Option<&Inlined> {
        let t = kc.input_read(i)?;
        let o = plan.slot_output.get(t as usize).copied().flatten()?;
        plan.outputs.iter().find(|x| x.output == o)
    };

    let mut remap: Vec<u32> = Vec::with_capacity(consumer.dag.expressions.len());
    for (k, e) in consumer.dag.expressions.iter().enumerate() {
        for &r in hoisted.get(&k).map(Vec::as_slice).unwrap_or_default() {
            let read = &consumer.dag.expressions[r];
            let inl = plan_of(r).expect("a hoisted read reads a handed-over output");
            let index: Vec<u32> = read.operands.iter().map(|&x| remap[x as usize]).collect();
            let v = recompute(
                &mut s,
                producer,
                &kp,
                inl,
                &index,
                p_local_base,
                &mut p_inputs,
            );
            values.insert(r, v);
        }
        if let Some(inl) = plan_of(k) {
            let value = match values
                .get(&k)
                .or_else(|| shares.get(&k).and_then(|j| values.get(j)))
            {
                Some(&v) => v,
                None => {
                    let index: Vec<u32> = e.operands.iter().map(|&x| remap[x as usize]).collect();
                    recompute(
                        &mut s,
                        producer,
                        &kp,
                        inl,
                        &index,
                        p_local_base,
                        &mut p_inputs,
                    )
                }
            };
            remap.push(value);
            continue;
        }
        let mut e = e.clone();
        if let Some(t) = &mut e.tensor {
            if t.kind == TensorKind::Input as i32 {
                t.index = c_inputs[t.index as usize];
            }
        }
        for op in &mut e.operands {
            *op = remap[*op as usize];
        }
        remap.push(push(&mut s.dag, e));
    }
    tidy(&mut s.dag);
    let mut members: Vec<usize> = producer
        .members
        .iter()
        .chain(&consumer.members)
        .copied()
        .collect();
    // With repeats: the consumer computes its own copy of each of the producer's operators
    // (`Work` counts how many times each is computed).
    members.sort_unstable();
    Node {
        dag: s.dag,
        inputs: s.inputs,
        label: label(&names),
        members,
        source_of: consumer.source_of,
        // A producer that goes away leaves its own copies to the consumer.
        duplicated: consumer.duplicated
            + if plan.kept.is_empty() {
                producer.duplicated
            } else {
                plan.duplicated
            },
    }
}

fn push(dag: &mut ir::ExpressionDag, e: ir::Expression) -> u32 {
    dag.expressions.push(e);
    dag.expressions.len() as u32 - 1
}

fn i64_expr(inst: Inst) -> ir::Expression {
    inst.encode(Some(DType::I64))
}

fn i64_const(v: i64) -> ir::Expression {
    i64_expr(Inst::Const(Literal::Int(v)))
}

/// Emits, at the end of `s`, the producer's computation of `inl.output` at the element whose
/// (merged) index expressions are `index`; returns the merged expression holding the value.
fn recompute(
    s: &mut Splice,
    producer: &Node,
    kp: &Kernel,
    inl: &Inlined,
    index: &[u32],
    p_local_base: u32,
    p_inputs: &mut [Option<u32>],
) -> u32 {
    // The producer's position that wrote the element.
    let position: Vec<u32> = inl
        .inverse
        .iter()
        .map(|comp| match *comp {
            Component::Zero => push(&mut s.dag, i64_const(0)),
            Component::FromIndex {
                dim,
                offset,
                negate,
            } => {
                let mut g = index[dim];
                if s.dag.expressions[g as usize].dtype != (DType::I64.to_ir() as i32) {
                    g = push(&mut s.dag, i64_expr(Inst::Cast { value: g }));
                }
                if offset != 0 {
                    let c = push(&mut s.dag, i64_const(offset));
                    let sub = Inst::Binary {
                        op: Op::Sub,
                        a: g,
                        b: c,
                    };
                    g = push(&mut s.dag, i64_expr(sub));
                }
                if negate {
                    g = push(&mut s.dag, i64_expr(Inst::Unary { op: Op::Neg, a: g }));
                }
                g
            }
        })
        .collect();
    let mut remap = vec![u32::MAX; inl.write];
    for (j, e) in producer.dag.expressions[..inl.write].iter().enumerate() {
        if !inl.slice[j] {
            continue;
        }
        if let Inst::Position { axis } = kp.exprs[j].inst {
            remap[j] = position[axis as usize];
            continue;
        }
        let mut e = e.clone();
        if let Some(t) = &mut e.tensor {
            match TensorKind::try_from(t.kind) {
                Ok(TensorKind::Input) => {
                    let k = t.index as usize;
                    t.index = *p_inputs[k].get_or_insert_with(|| {
                        s.input(producer.inputs[k], &producer.dag.inputs[k])
                    });
                }
                Ok(TensorKind::Local) => t.index += p_local_base,
                _ => {}
            }
        }
        for op in &mut e.operands {
            *op = remap[*op as usize];
        }
        remap[j] = push(&mut s.dag, e);
    }
    let value = match kp.exprs[inl.write].inst {
        Inst::Write { value, .. } => value,
        _ => 0,
    };
    let v = remap[value as usize];
    // A variable or an accumulator (copied into the merged operator as it is) is copied, as
    // at a vertical merge's hand-over.
    if kp.is_mutable(value as usize) {
        let dtype = DType::from_ir(s.dag.expressions[v as usize].dtype);
        return push(&mut s.dag, Inst::Cast { value: v }.encode(dtype));
    }
    v
}
