//! Merging a consumer into a reduction that feeds it by running the consumer as a loop inside
//! the producer's worker.
//!
//! A row reduction (workgroup `[rows, 1]`, a worker per row looping over the row) and an
//! elementwise consumer of its result (workgroup `[rows, cols]`, reading the statistic at
//! `[r, 0]`) cannot hand over in a register (the workgroups differ) and recomputing the
//! reduction at each of the consumer's reads costs a row per element. Instead the consumer can
//! be *looped*: its workgroup becomes the producer's, and its body runs inside RANGE loops
//! `for c in 0..cols` over the axes the producer does not have (each position on such an axis
//! becomes the loop's index). Every element is still computed once, by the worker of its row,
//! in the same order along the row; the row's statistic is then a value the worker already
//! holds, and the ordinary vertical merge applies: softmax or layer norm from their ops runs
//! as one pass per row with the row in cache, instead of a second pass over memory.
//!
//! Only a consumer that cannot fault is looped (interval analysis, as for index
//! substitution): a fault would stop the rest of its row and be reported for another worker.
//!
//! The cost is parallelism: `cols` workers become one. It is taken only when the producer's
//! workers already loop at least half that many times each, so a worker's work grows by a constant
//! factor, never by a new dimension, and the kernel has as many workers as the reduction had
//! on its own (with fewer rows than cores, the reduction already left cores idle). The
//! decision depends on the graph alone, not on the machine, so a graph fuses the same way
//! everywhere (and batched with `vmap` as it does unbatched).

use ovl_ir::intervals::Intervals;
use ovl_ir::ir;
use ovl_ir::typed::{Inst, Kernel};
use ovl_ir::{DType, Literal};

/// How to loop a consumer over workgroup `consumer` inside a producer over `producer`: the
/// consumer's new workgroup (its shape with the looped axes set to 1, which the producer is
/// rebased onto) and the looped axes. `None` unless the producer's extents other than 1 are
/// the consumer's, in order, on a subset of its axes (matched from the left), and at least one
/// axis of extent above 1 is left over.
pub(crate) fn loop_axes(producer: &[u64], consumer: &[u64]) -> Option<(Vec<u64>, Vec<usize>)> {
    let mut target = consumer.to_vec();
    let mut looped = Vec::new();
    let mut wanted = producer.iter().copied().filter(|&d| d != 1).peekable();
    for (a, &d) in consumer.iter().enumerate() {
        if d == 1 {
            continue;
        }
        if wanted.peek() == Some(&d) {
            wanted.next();
        } else {
            target[a] = 1;
            looped.push(a);
        }
    }
    (wanted.next().is_none() && !looped.is_empty()).then_some((target, looped))
}

/// `dag` (over workgroup `consumer`) rewritten over `target` with its body inside one RANGE
/// loop per axis in `looped` (outermost first, each `0..extent` step 1), the positions on those
/// axes replaced by the loops' indices. `None` for an operator with sizes known only at run
/// time, and for one with local tensors (each worker starts with them zeroed; iterations of a
/// loop would see the previous iteration's).
pub(crate) fn looped(
    dag: &ir::ExpressionDag,
    kernel: &Kernel,
    target: &[u64],
    looped: &[usize],
) -> Option<ir::ExpressionDag> {
    if dag.symbol_count > 0 || !dag.symbolic_workgroup.is_empty() || !dag.locals.is_empty() {
        return None;
    }
    let constant = |v: i64| Inst::Const(Literal::Int(v)).encode(Some(DType::I64));
    let mut out = dag.clone();
    out.workgroup_shape = target.to_vec();
    out.expressions.clear();
    let one = out.expressions.len() as u32;
    out.expressions.push(constant(1));
    let zero = out.expressions.len() as u32;
    out.expressions.push(constant(0));
    // The RANGE of each workgroup axis that is looped.
    let mut index_of_axis = vec![None; dag.workgroup_shape.len()];
    for &a in looped {
        let end = out.expressions.len() as u32;
        out.expressions
            .push(constant(i64::try_from(dag.workgroup_shape[a]).ok()?));
        index_of_axis[a] = Some(out.expressions.len() as u32);
        let range = Inst::Range {
            start: zero,
            end,
            step: one,
            close: 0,
        };
        out.expressions.push(range.encode(Some(DType::I64)));
    }
    // The body, each expression's operands renumbered; a looped axis's position is its loop.
    let mut new_id = Vec::with_capacity(dag.expressions.len());
    for (e, x) in dag.expressions.iter().zip(&kernel.exprs) {
        if let Inst::Position { axis } = x.inst {
            if let Some(range) = index_of_axis.get(axis as usize).copied().flatten() {
                new_id.push(range);
                continue;
            }
        }
        let mut e = e.clone();
        for o in &mut e.operands {
            *o = *new_id.get(*o as usize)?;
        }
        new_id.push(out.expressions.len() as u32);
        out.expressions.push(e);
    }
    for _ in looped {
        out.expressions
            .push(Inst::EndRange { range: 0 }.encode(None));
    }
    Some(out)
}

/// Whether each worker of `producer` already runs at least `extent / 2` iterations of some
/// loop (loops of loops multiply), so that looping a consumer over `extent` elements adds
/// work of the same order (a maximum seeded with the first element loops `extent - 1` times).
pub(crate) fn loops_enough(producer: &Kernel, iv: &Intervals, extent: u64) -> bool {
    producer.exprs.iter().enumerate().any(|(i, e)| {
        matches!(e.inst, Inst::Range { .. })
            && crate::cost::runs_per_worker(producer, iv, i)
                .zip(iv.trips(i))
                .is_some_and(|(runs, trips)| 2.0 * runs * trips as f64 >= extent as f64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ovl_ir::ir::Op;

    #[test]
    fn the_axes_a_reduction_lacks_are_looped() {
        assert_eq!(loop_axes(&[4, 1], &[4, 8]), Some((vec![4, 1], vec![1])));
        assert_eq!(loop_axes(&[4], &[4, 8]), Some((vec![4, 1], vec![1])));
        assert_eq!(loop_axes(&[8], &[4, 8]), Some((vec![1, 8], vec![0])));
        assert_eq!(
            loop_axes(&[2, 1, 1], &[2, 3, 5]),
            Some((vec![2, 1, 1], vec![1, 2]))
        );
        // Nothing to loop, or extents that are not the consumer's.
        assert_eq!(loop_axes(&[4, 8], &[4, 8]), None);
        assert_eq!(loop_axes(&[3], &[4, 8]), None);
        assert_eq!(loop_axes(&[8, 4], &[4, 8]), None);
    }

    #[test]
    fn a_looped_operator_runs_its_body_in_a_loop_over_the_axis() {
        use ovl_ir::builder::{Builder, IN, OUT};
        let mut b = Builder::new("scale", &[2, 3]);
        let x = b.input(DType::F32, &[2, 3]);
        let out = b.output(DType::F32, &[2, 3]);
        let (p0, p1) = (b.position(0), b.position(1));
        let v = b.read(IN, x, &[p0, p1]);
        let two = b.f32(2.0);
        let y = b.op(Op::Mul, &[v, two]);
        b.write(OUT, out, &[p0, p1], y);
        let dag = b.build();
        let dag = looped(&dag, &Kernel::decode(&dag).unwrap(), &[2, 1], &[1]).unwrap();
        ovl_ir::validate::validate(&dag).unwrap();
        assert_eq!(dag.workgroup_shape, vec![2, 1]);
        let codes: Vec<i32> = dag.expressions.iter().map(|e| e.code).collect();
        assert_eq!(codes.iter().filter(|&&c| c == Op::Range as i32).count(), 1);
        assert_eq!(codes.last(), Some(&(Op::EndRange as i32)));
        // Only the row's position is left.
        assert_eq!(
            codes.iter().filter(|&&c| c == Op::Position as i32).count(),
            1
        );
        // The row is written at every column: no zero-fill is needed.
        assert_eq!(ovl_ir::written::written_everywhere(&dag), vec![true]);
    }

    #[test]
    fn an_operator_with_a_local_tensor_is_not_looped() {
        use ovl_ir::builder::{Builder, OUT};
        use ovl_ir::Literal;
        let mut b = Builder::new("scratch", &[2, 3]);
        let out = b.output(DType::F32, &[2, 3]);
        let (p0, p1) = (b.position(0), b.position(1));
        let local = b.local(DType::F32, &[1], Literal::Float(0.0));
        let zero = b.i64(0);
        let v = b.read(ovl_ir::builder::LOC, local, &[zero]);
        b.write(OUT, out, &[p0, p1], v);
        let dag = b.build();
        assert!(looped(&dag, &Kernel::decode(&dag).unwrap(), &[2, 1], &[1]).is_none());
    }
}
