//! What the gradient pass needs to know before it emits anything: the constructs it refuses
//! (with the reason), which values carry a gradient (*active*: a float that depends on a read of
//! a differentiated input and reaches a write of an output that has an adjoint), and the index
//! maps of the accesses that matter.

use super::affine::{affine_of, index_map, injective_in_loops, Affine, IndexMap};
use super::Construct;
use crate::derivatives::{rule, Rule};
use crate::ir::TensorKind;
use crate::typed::{Inst, Kernel, ValueId};

/// The facts the emitter reads.
pub(super) struct Facts {
    /// Per expression: a float value that carries a gradient.
    pub active: Vec<bool>,
    /// The active reads of each input (expression, index map), in program order, for the inputs
    /// read only at affine indices.
    pub reads: Vec<Vec<(ValueId, IndexMap)>>,
    /// The active reads of each input some read of which indexes it by data (a gather): every
    /// index of each read, affine or `None` (computed from data), in program order. Their
    /// adjoints are scattered, in a defined order (`super::scatter`).
    pub scattered: Vec<Vec<(ValueId, Vec<Option<Affine>>)>>,
    /// Per expression: how many operands name it.
    pub uses: Vec<u32>,
    /// Per local tensor: whether a gradient flows through it (its adjoint is a local tensor).
    pub active_locals: Vec<bool>,
}

/// The float operands through which a gradient flows back from expression `e`, by operand slot.
pub(super) fn flows(k: &Kernel, e: usize) -> Vec<(usize, ValueId)> {
    let x = &k.exprs[e];
    let float = |v: ValueId| k.exprs[v as usize].dtype.is_some_and(|d| d.is_float());
    if !x.dtype.is_some_and(|d| d.is_float()) {
        return Vec::new();
    }
    match &x.inst {
        Inst::Unary { op, .. } | Inst::Binary { op, .. } => match rule(*op) {
            Rule::Partials(_) => k.operands(e).enumerate().collect(),
            _ => Vec::new(),
        },
        Inst::Fma { .. } => k.operands(e).enumerate().collect(),
        Inst::Select {
            if_true, if_false, ..
        } => vec![(1, *if_true), (2, *if_false)],
        Inst::Cast { value } if float(*value) => vec![(0, *value)],
        Inst::Variable { init } | Inst::Accumulator { init, .. } => vec![(0, *init)],
        _ => Vec::new(),
    }
}

/// Checks `k` (the operator `wanted`/`seeded` describe) and finds its active values.
pub(super) fn analyse(k: &Kernel, wanted: &[bool], seeded: &[bool]) -> Result<Facts, Construct> {
    if k.exprs
        .iter()
        .any(|x| matches!(x.inst, Inst::WhileBegin { .. }))
    {
        return Err(Construct::WhileLoop);
    }
    let n = k.exprs.len();
    let is_float = |e: usize| k.exprs[e].dtype.is_some_and(|d| d.is_float());
    // Assignments of each variable, values accumulated into each accumulator.
    let mut assigns: Vec<Vec<ValueId>> = vec![Vec::new(); n];
    for x in &k.exprs {
        match x.inst {
            Inst::Assign { variable, value } => assigns[variable as usize].push(value),
            Inst::Accumulate {
                accumulator, value, ..
            } => assigns[accumulator as usize].push(value),
            _ => {}
        }
    }
    // Writes into each local tensor.
    let mut local_writes: Vec<Vec<ValueId>> = vec![Vec::new(); k.locals.len()];
    for x in &k.exprs {
        if let Inst::Write { tensor, value, .. } = &x.inst {
            if tensor.kind == TensorKind::Local {
                local_writes[tensor.index as usize].push(*value);
            }
        }
    }
    // Forward: values that depend on a differentiated read (a local tensor, on a write into it).
    let mut varied = vec![false; n];
    let mut local_varied = vec![false; k.locals.len()];
    loop {
        let mut changed = false;
        for (t, writes) in local_writes.iter().enumerate() {
            if !local_varied[t] && writes.iter().any(|&v| varied[v as usize]) {
                local_varied[t] = true;
                changed = true;
            }
        }
        for e in 0..n {
            if varied[e] || !is_float(e) {
                continue;
            }
            let v = match &k.exprs[e].inst {
                Inst::Read { tensor, .. } if tensor.kind == TensorKind::Local => {
                    local_varied[tensor.index as usize]
                }
                Inst::Read { tensor, .. } => {
                    tensor.kind == TensorKind::Input
                        && wanted.get(tensor.index as usize).copied().unwrap_or(false)
                }
                Inst::Variable { .. } | Inst::Accumulator { .. } => {
                    flows(k, e).iter().any(|&(_, o)| varied[o as usize])
                        || assigns[e].iter().any(|&v| varied[v as usize])
                }
                _ => flows(k, e).iter().any(|&(_, o)| varied[o as usize]),
            };
            if v {
                varied[e] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    // Backward: values that reach a write of an output with an adjoint.
    let mut useful = vec![false; n];
    for x in &k.exprs {
        if let Inst::Write { tensor, value, .. } = &x.inst {
            if tensor.kind == TensorKind::Output && seeded[tensor.index as usize] {
                useful[*value as usize] = true;
            }
        }
    }
    let mut local_useful = vec![false; k.locals.len()];
    loop {
        let mut changed = false;
        for e in 0..n {
            if let Inst::Read { tensor, .. } = &k.exprs[e].inst {
                let t = tensor.index as usize;
                if tensor.kind == TensorKind::Local && useful[e] && !local_useful[t] {
                    local_useful[t] = true;
                    for &v in &local_writes[t] {
                        useful[v as usize] = true;
                    }
                    changed = true;
                }
            }
        }
        for e in (0..n).rev() {
            if !useful[e] {
                continue;
            }
            let mut mark = |o: ValueId| {
                if !useful[o as usize] {
                    useful[o as usize] = true;
                    changed = true;
                }
            };
            for (_, o) in flows(k, e) {
                mark(o);
            }
            if matches!(
                k.exprs[e].inst,
                Inst::Variable { .. } | Inst::Accumulator { .. }
            ) {
                for &v in &assigns[e] {
                    mark(v);
                }
            }
        }
        if !changed {
            break;
        }
    }
    let active: Vec<bool> = (0..n)
        .map(|e| varied[e] && useful[e] && is_float(e))
        .collect();
    let active_locals: Vec<bool> = (0..k.locals.len())
        .map(|t| local_varied[t] && local_useful[t] && k.locals[t].dtype.is_float())
        .collect();
    // Products, and min/max reduced by several loops, are recorded (`sweep::tape`).

    let w = workgroup(k)?;
    let rank = w.len();
    // Writes of outputs with an adjoint: at an affine index no two workers share, one map per
    // output, and no worker writes an element twice (several writes only in exclusive branches).
    let mut writes: Vec<Vec<(usize, IndexMap)>> = vec![Vec::new(); k.outputs.len()];
    for (e, x) in k.exprs.iter().enumerate() {
        let Inst::Write {
            tensor, indices, ..
        } = &x.inst
        else {
            continue;
        };
        if tensor.kind != TensorKind::Output || !seeded[tensor.index as usize] {
            continue;
        }
        let output = tensor.index;
        let map = index_map(k, indices, rank).ok_or(Construct::DataDependentWrite { output })?;
        let loops: Vec<ValueId> = k.enclosing_loops(e).collect();
        if !injective_in_loops(&map, &w, &loops) {
            return Err(Construct::SharedWrite { output });
        }
        for (other, m) in &writes[output as usize] {
            if *m != map || !exclusive(k, *other, e) {
                return Err(Construct::RepeatedWrite { output });
            }
        }
        writes[output as usize].push((e, map));
    }
    // Reads of differentiated inputs that carry a gradient: at affine indices, or at indices
    // computed from data (then every read of that input is scattered).
    let mut reads = vec![Vec::new(); k.inputs.len()];
    let mut scattered: Vec<Vec<(ValueId, Vec<Option<Affine>>)>> = vec![Vec::new(); k.inputs.len()];
    for (e, x) in k.exprs.iter().enumerate() {
        let Inst::Read { tensor, indices } = &x.inst else {
            continue;
        };
        if tensor.kind != TensorKind::Input || !active[e] {
            continue;
        }
        let input = tensor.index as usize;
        let parts: Vec<Option<Affine>> = indices.iter().map(|&v| affine_of(k, v, rank)).collect();
        scattered[input].push((e as ValueId, parts));
        if let Some(map) = index_map(k, indices, rank) {
            reads[input].push((e as ValueId, map));
        }
    }
    for (input, s) in scattered.iter_mut().enumerate() {
        if s.len() == reads[input].len() {
            s.clear();
        } else {
            reads[input].clear();
        }
    }
    let mut uses = vec![0u32; n];
    for e in 0..n {
        for o in k.operands(e) {
            uses[o as usize] += 1;
        }
    }
    Ok(Facts {
        active,
        reads,
        scattered,
        uses,
        active_locals,
    })
}

/// The one loop that accumulates into accumulator `acc`, if there is exactly one.
pub(super) fn extremum_loop(k: &Kernel, acc: usize) -> Option<ValueId> {
    let mut found = None;
    for x in &k.exprs {
        if let Inst::Accumulate {
            accumulator, range, ..
        } = x.inst
        {
            if accumulator as usize == acc {
                if found.is_some_and(|f| f != range) {
                    return None;
                }
                found = Some(range);
            }
        }
    }
    found
}

/// The workgroup's sizes; sizes known only at run time are refused.
pub(super) fn workgroup(k: &Kernel) -> Result<Vec<u64>, Construct> {
    k.workgroup
        .iter()
        .map(|d| d.known().ok_or(Construct::Symbolic))
        .collect()
}

/// The IF branches around `e`: (IF, whether in its ELSE part), innermost first.
fn branches(k: &Kernel, e: usize) -> Vec<(ValueId, bool)> {
    let mut out = Vec::new();
    let mut b = k.exprs[e].block;
    while let Some(opener) = b {
        if let Inst::If { else_, .. } = k.exprs[opener as usize].inst {
            out.push((opener, else_.is_some_and(|el| e as ValueId > el)));
        }
        b = k.exprs[opener as usize].block;
    }
    out
}

/// Whether no run of a worker executes both `a` and `b`: they lie in the two branches of one IF.
fn exclusive(k: &Kernel, a: usize, b: usize) -> bool {
    let (x, y) = (branches(k, a), branches(k, b));
    x.iter()
        .any(|&(i, side)| y.iter().any(|&(j, other)| i == j && side != other))
}
