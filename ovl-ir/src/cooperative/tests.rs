use super::*;
use crate::builder::{Builder, IN, OUT};
use crate::dtype::DType;
use crate::fixtures::{column_stats, int_rows, matmul, norm_rows, reductions, softmax_rows};
use crate::ops::Combiner;

#[test]
fn row_kernels_cooperate_with_a_width_by_row_length() {
    let p = plan(&softmax_rows(4, 300, true)).expect("softmax walks rows");
    assert_eq!((p.width, p.workers_per_block, p.block()), (64, 1, 64));
    assert_eq!(p.loops.len(), 3);
    assert_eq!(p.local_elements, vec![5]);
    let p = plan(&softmax_rows(4, 4096, false)).expect("softmax walks rows");
    assert_eq!((p.width, p.workers_per_block), (512, 1));
    let p = plan(&norm_rows(9, 100)).expect("a norm walks rows");
    assert_eq!((p.width, p.workers_per_block, p.block()), (32, 8, 256));
    assert_eq!(plan(&int_rows(3, 40)).map(|p| p.width), Some(32));
    assert_eq!(
        plan(&softmax_rows(2, 100_000, false)).map(|p| p.width),
        Some(1024)
    );
}

#[test]
fn other_operators_keep_one_thread_per_worker() {
    // A runtime step may fault; columns and matmul read along another axis; short rows.
    assert_eq!(plan(&reductions(4, 21)), None);
    assert_eq!(plan(&column_stats(7, 150)), None);
    assert_eq!(plan(&matmul(4, 64, 4)), None);
    assert_eq!(plan(&softmax_rows(4, MIN_ROW - 1, false)), None);
    // Empty rows: no loop runs, nothing to share.
    assert_eq!(plan(&softmax_rows(4, 0, false)), None);
    assert!(plan(&softmax_rows(4, MIN_ROW, false)).is_some());
    // A data-dependent index may fault.
    let mut b = Builder::new("gathered_sum", &[2]);
    b.input(DType::F32, &[2, 40]);
    b.input(DType::I64, &[2, 40]);
    b.output(DType::F32, &[2]);
    let r = b.position(0);
    let zero = b.f32(0.0);
    let acc = b.accumulator(Combiner::Sum, zero);
    let (s, e, one) = (b.i64(0), b.i64(40), b.i64(1));
    let k = b.range(s, e, one);
    let at = b.read(IN, 1, &[r, k]);
    let x = b.read(IN, 0, &[r, at]);
    b.accumulate(acc, x);
    b.end_range();
    b.write(OUT, 0, &[r], acc);
    assert_eq!(plan(&b.build()), None);
    // A variable carried across iterations (a scan).
    let mut b = Builder::new("scan", &[2]);
    b.input(DType::F32, &[2, 40]);
    b.output(DType::F32, &[2, 40]);
    b.output(DType::F32, &[2]);
    let r = b.position(0);
    let zero = b.f32(0.0);
    let acc = b.accumulator(Combiner::Sum, zero);
    let run = b.var(zero);
    let (s, e, one) = (b.i64(0), b.i64(40), b.i64(1));
    let k = b.range(s, e, one);
    let x = b.read(IN, 0, &[r, k]);
    b.accumulate(acc, x);
    let t = b.op(crate::ir::Op::Add, &[run, x]);
    b.assign(run, t);
    b.write(OUT, 0, &[r, k], run);
    b.end_range();
    b.write(OUT, 1, &[r], acc);
    assert_eq!(plan(&b.build()), None);
}

#[test]
fn widths_are_powers_of_two_in_range() {
    assert_eq!(width_for(1), WARP);
    assert_eq!(width_for(256), WARP);
    assert_eq!(width_for(257), 64);
    assert_eq!(width_for(4096), 512);
    assert_eq!(width_for(1 << 30), MAX_WIDTH);
}

#[test]
fn the_pairwise_fold_pairs_neighbours_level_by_level() {
    let lanes: Vec<String> = (0..8).map(|i| i.to_string()).collect();
    let folded = pairwise_fold(
        &lanes.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        |a, b| Some(Box::leak(format!("({a}{b})").into_boxed_str()) as &str),
    );
    assert_eq!(folded, Some("(((01)(23))((45)(67)))"));
    let loops = |order| -> Vec<usize> {
        range_lanes(&softmax_rows(2, 300, false), order)
            .into_iter()
            .filter(|&n| n != 0)
            .collect()
    };
    assert_eq!(loops(ReductionOrder::Lanes), vec![8, 8, 8]);
    assert_eq!(loops(ReductionOrder::Cuda), vec![64, 64, 64]);
}

#[test]
fn the_row_programs_are_valid() {
    for (name, dag) in crate::fixtures::row_programs() {
        crate::validate::validate(&dag).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(plan(&dag).is_some(), "{name}");
    }
}
