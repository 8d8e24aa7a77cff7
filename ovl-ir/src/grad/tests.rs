//! Structural tests of the pass; the values are checked against central differences on the
//! interpreter, C++ and CUDA validation in `tests/core/autodiff/`.

use super::*;
use crate::builder::{Builder, IN, OUT};
use crate::DType;

/// out[i, j] = tanh(x[i, j]) * b[j]: x read at the worker's element, b broadcast.
fn bias_tanh() -> ir::ExpressionDag {
    let mut b = Builder::new("bias_tanh", &[2, 3]);
    b.input(DType::F64, &[2, 3]);
    b.input(DType::F64, &[3]);
    b.output(DType::F64, &[2, 3]);
    let (i, j) = (b.position(0), b.position(1));
    let x = b.read(IN, 0, &[i, j]);
    let t = b.op(Op::Tanh, &[x]);
    let bj = b.read(IN, 1, &[j]);
    let y = b.op(Op::Mul, &[t, bj]);
    b.write(OUT, 0, &[i, j], y);
    b.build()
}

#[test]
fn elementwise_inputs_share_the_forward_workgroup_and_broadcasts_gather() {
    let dag = bias_tanh();
    crate::validate::validate(&dag).unwrap();
    let ops = derive(&dag, &[true, true], &[true]).unwrap();
    assert_eq!(ops.len(), 2);
    assert_eq!(ops[0].outputs, vec![0]);
    assert_eq!(ops[0].dag.workgroup_shape, vec![2, 3]);
    assert_eq!(ops[1].outputs, vec![1]);
    assert_eq!(ops[1].dag.workgroup_shape, vec![3]);
    assert_eq!(
        ops[0].inputs,
        vec![
            GradInput::Forward(0),
            GradInput::Forward(1),
            GradInput::Adjoint(0)
        ]
    );
    // Only what is wanted.
    let ops = derive(&dag, &[false, true], &[true]).unwrap();
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0].outputs, vec![1]);
}

#[test]
fn constructs_that_are_not_differentiated_are_errors_naming_the_operator() {
    // A loop carrying `v = v * v` for a trip count read from data: its record has no size.
    let mut b = Builder::new("looped", &[2]);
    b.input(DType::F64, &[2]);
    b.input(DType::I64, &[2]);
    b.output(DType::F64, &[2]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let v = b.var(x);
    let (z, one) = (b.i64(0), b.i64(1));
    let n = b.read(IN, 1, &[i]);
    b.range(z, n, one);
    let s = b.op(Op::Mul, &[v, v]);
    b.assign(v, s);
    b.end_range();
    b.write(OUT, 0, &[i], v);
    let dag = b.build();
    crate::validate::validate(&dag).unwrap();
    let e = derive(&dag, &[true, false], &[true]).unwrap_err();
    assert_eq!(e.construct, Construct::LoopCarried);
    assert_eq!(e.operator, "looped");
    assert!(e.to_string().contains("src/ops.rs:12"), "{e}");

    // A gather, x[idx[i]]: a scatter-add by one worker holding all of x in a buffer, so
    // refused when x is past the local-memory limit.
    let gather = |n: u64| {
        let mut b = Builder::new("gather", &[2]);
        b.input(DType::F64, &[n]);
        b.input(DType::I64, &[2]);
        b.output(DType::F64, &[2]);
        let i = b.position(0);
        let k = b.read(IN, 1, &[i]);
        let x = b.read(IN, 0, &[k]);
        b.write(OUT, 0, &[i], x);
        b.build()
    };
    let ops = derive(&gather(4), &[true, false], &[true]).unwrap();
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0].dag.workgroup_shape, vec![1]);
    let limit = crate::limits::PORTABLE_LOCAL_BYTES / 8;
    assert!(derive(&gather(limit), &[true, false], &[true]).is_ok());
    let e = derive(&gather(limit + 1), &[true, false], &[true]).unwrap_err();
    assert_eq!(e.construct, Construct::DataDependentRead { input: 0 });

    // Two workers writing one element.
    let mut b = Builder::new("shared", &[2]);
    b.input(DType::F64, &[2]);
    b.output(DType::F64, &[1]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let z = b.i64(0);
    b.write(OUT, 0, &[z], x);
    let e = derive(&b.build(), &[true], &[true]).unwrap_err();
    assert_eq!(e.construct, Construct::SharedWrite { output: 0 });
}

/// A 0-d input read by every worker: its gradient operator has one worker, which loops over
/// the forward's workers; an empty workgroup gives operators that still validate.
#[test]
fn scalar_inputs_and_empty_workgroups() {
    for n in [3u64, 0] {
        let mut b = Builder::new("scale", &[n]);
        b.input(DType::F64, &[n]);
        b.input(DType::F64, &[]);
        b.output(DType::F64, &[n]);
        let i = b.position(0);
        let x = b.read(IN, 0, &[i]);
        let s = b.read(IN, 1, &[]);
        let y = b.op(Op::Mul, &[x, s]);
        b.write(OUT, 0, &[i], y);
        let dag = b.build();
        crate::validate::validate(&dag).unwrap();
        let ops = derive(&dag, &[true, true], &[true]).unwrap();
        assert_eq!(ops.len(), 2, "n = {n}");
        let of_s: Vec<_> = ops.iter().filter(|g| g.outputs == vec![1]).collect();
        assert_eq!(of_s.len(), 1);
        // With no forward worker, nothing reads `s`: the forward's (empty) workgroup writes it.
        let want = if n == 0 { vec![0] } else { vec![1] };
        assert_eq!(of_s[0].dag.workgroup_shape, want, "n = {n}");
    }
}

/// `y[r, k] = e[k] / sum(e)` with `e = exp(x[r, :])` kept in a local row buffer (softmax
/// without its max, as row reuse writes it).
fn exp_norm_buffered(rows: u64, cols: u64) -> ir::ExpressionDag {
    let mut b = Builder::new("exp_norm_buffered", &[rows]);
    b.input(DType::F32, &[rows, cols]);
    b.output(DType::F32, &[rows, cols]);
    b.declare_local(DType::F32, &[cols]);
    let r = b.position(0);
    let (start, end, one) = (b.i64(0), b.i64(cols as i64), b.i64(1));
    b.local_fill(0, crate::dtype::Literal::Float(0.0));
    let zero = b.f32(0.0);
    let total = b.accumulator(crate::ops::Combiner::Sum, zero);
    let k = b.range(start, end, one);
    let x = b.read(IN, 0, &[r, k]);
    let e = b.op(Op::Exp, &[x]);
    b.write(crate::builder::LOC, 0, &[k], e);
    b.accumulate(total, e);
    b.end_range();
    let k = b.range(start, end, one);
    let e = b.read(crate::builder::LOC, 0, &[k]);
    let y = b.op(Op::Div, &[e, total]);
    b.write(OUT, 0, &[r, k], y);
    b.end_range();
    b.build()
}

/// Row kernels (a normalization, a softmax-like kernel with a row buffer): the backward walk
/// visits each loop in forward order and sums the adjoints of the row's statistics in
/// accumulators, so the gradient reads the row as the forward does, vectorizes on the CPU, and
/// runs with a group of threads per row on a GPU (`cooperative::plan` accepts it). (A max
/// reduction's loop is still walked last first: its adjoint goes to the last equal value.)
#[test]
fn row_gradients_walk_forward_and_sum_in_accumulators() {
    for (dag, seeded) in [
        (crate::fixtures::norm_rows(4, 1024), &[true, true][..]),
        (exp_norm_buffered(4, 1024), &[true][..]),
    ] {
        crate::validate::validate(&dag).unwrap();
        let wanted = vec![true; dag.inputs.len()];
        let ops = derive(&dag, &wanted, seeded).unwrap();
        let of_x = ops.iter().find(|g| g.outputs == vec![0]).unwrap();
        let k = Kernel::from_validated(&of_x.dag);
        // Every loop starts at 0 and counts up by 1: no reversed walk.
        for x in &k.exprs {
            if let crate::typed::Inst::Range { start, step, .. } = x.inst {
                let int = |v: u32| match k.exprs[v as usize].inst {
                    crate::typed::Inst::Const(crate::dtype::Literal::Int(i)) => Some(i),
                    _ => None,
                };
                assert_eq!((int(start), int(step)), (Some(0), Some(1)), "{}", dag.name);
            }
        }
        let plan = crate::cooperative::plan(&of_x.dag);
        assert!(
            plan.is_some(),
            "{}: {}",
            dag.name,
            crate::text::to_text(&of_x.dag)
        );
        if dag.name == "norm_rows" {
            // The statistics recomputed, the walks of the output loop and of the statistics
            // loop, which writes the row's gradient out itself: no loop copying the buffer.
            let loops = k
                .exprs
                .iter()
                .filter(|x| matches!(x.inst, crate::typed::Inst::Range { .. }))
                .count();
            assert_eq!(loops, 3, "{}", crate::text::to_text(&of_x.dag));
        }
    }
}

/// Deriving an operator again gives the same IR, bit for bit (each `HashMap` gets its own
/// random order, so an emission that followed one would differ from call to call, and the
/// gradient's cache key with it). Min/max ties, snapshots and loop entries included; the
/// gradients of the gradients too.
#[test]
fn derived_gradients_are_deterministic() {
    use prost::Message;
    let mut programs: Vec<ir::ExpressionDag> =
        crate::fixtures::all().into_iter().map(|f| f.dag).collect();
    programs.push(crate::fixtures::norm_rows(3, 40));
    programs.push(crate::fixtures::softmax_rows(3, 40, true));
    programs.push(exp_norm_buffered(3, 40));
    let derive_all = |dag: &ir::ExpressionDag| -> Vec<ir::ExpressionDag> {
        let float = |t: &ir::TensorType| DType::from_ir(t.dtype).is_some_and(|d| d.is_float());
        let wanted: Vec<bool> = dag.inputs.iter().map(float).collect();
        let seeded: Vec<bool> = dag.outputs.iter().map(float).collect();
        derive(dag, &wanted, &seeded).map_or_else(
            |_| Vec::new(),
            |ops| ops.into_iter().map(|g| g.dag).collect(),
        )
    };
    let mut derived = 0;
    for dag in &programs {
        let first = derive_all(dag);
        let mut second_order = Vec::new();
        for g in &first {
            second_order.extend(derive_all(g));
        }
        for _ in 0..4 {
            let again = derive_all(dag);
            assert_eq!(again.len(), first.len(), "{}", dag.name);
            for (a, b) in again.iter().zip(&first) {
                assert_eq!(a.encode_to_vec(), b.encode_to_vec(), "{}", a.name);
            }
            let again: Vec<_> = first.iter().flat_map(derive_all).collect();
            for (a, b) in again.iter().zip(&second_order) {
                assert_eq!(a.encode_to_vec(), b.encode_to_vec(), "{}", a.name);
            }
        }
        derived += first.len() + second_order.len();
    }
    assert!(
        derived > 20,
        "only {derived} gradient operators were derived"
    );
}

/// `p = p * x[i] + 1` over `n` iterations: the loop carries `p`.
fn carried(n: i64) -> ir::ExpressionDag {
    let mut b = Builder::new("carried", &[2]);
    b.input(DType::F64, &[2]);
    b.output(DType::F64, &[2]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let one_f = b.f64(1.0);
    let p = b.var(one_f);
    let (z, end, one) = (b.i64(0), b.i64(n), b.i64(1));
    b.range(z, end, one);
    let m = b.op(Op::Mul, &[p, x]);
    let s = b.op(Op::Add, &[m, one_f]);
    b.assign(p, s);
    b.end_range();
    b.write(OUT, 0, &[i], p);
    b.build()
}

#[test]
fn carried_state_is_recorded_checkpointed_or_refused_by_its_size() {
    let shapes = |n: i64| -> Vec<Vec<u64>> {
        let dag = carried(n);
        crate::validate::validate(&dag).unwrap();
        let ops = derive(&dag, &[true], &[true]).unwrap();
        ops[0].dag.locals.iter().map(|t| t.shape.clone()).collect()
    };
    // 100 f64 states fit: one record of every iteration.
    assert_eq!(shapes(100), vec![vec![100]]);
    // 9,000 do not (72,000 bytes): checkpoints every 95 iterations and a segment's record.
    assert_eq!(shapes(9000), vec![vec![95], vec![95]]);
    // 2^32 iterations: even the checkpoints pass the budget.
    let dag = carried(1 << 32);
    let e = derive(&dag, &[true], &[true]).unwrap_err();
    assert!(
        matches!(e.construct, Construct::TapeTooLarge { trips, .. } if trips == 1 << 32),
        "{e}"
    );
    assert!(e.to_string().contains("carried"), "{e}");
}
