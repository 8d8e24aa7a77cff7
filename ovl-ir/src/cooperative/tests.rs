use super::*;
use crate::builder::{Builder, IN, OUT};
use crate::dtype::DType;
use crate::fixtures::{
    column_stats, int_rows, matmul, norm_columns, norm_rows, reductions, softmax_columns,
    softmax_rows, sum_columns, sum_middle,
};
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
    // A runtime step may fault; short columns; matmul folds into a variable; short rows.
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
    assert_eq!(loops(ReductionOrder::Lanes), vec![16, 16, 16]);
    assert_eq!(loops(ReductionOrder::Cuda), vec![64, 64, 64]);
}

#[test]
fn the_row_programs_are_valid() {
    for (name, dag) in crate::fixtures::row_programs() {
        crate::validate::validate(&dag).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(plan(&dag).is_some(), "{name}");
    }
}

#[test]
fn column_kernels_cooperate_where_the_workers_are_few() {
    // The benchmark's sizes: 1,024 columns of 8,192 rows make 128 blocks of 8 columns x 128
    // row-threads; 4,096 columns of 1,024, 128 blocks of 32 x 32.
    let p = plan(&sum_columns(8192, 1024)).expect("a column sum");
    assert_eq!(p.layout, Layout::Columns);
    assert_eq!((p.width, p.workers_per_block, p.block()), (128, 8, 1024));
    let p = plan(&softmax_columns(1024, 4096, true)).expect("softmax down columns");
    assert_eq!(
        (p.layout, p.width, p.workers_per_block),
        (Layout::Columns, 32, 32)
    );
    assert_eq!(p.loops.len(), 3);
    assert_eq!(p.local_elements, vec![32]);
    // Short columns share little: a width of 8 iterations per thread at least.
    let p = plan(&norm_columns(64, 40)).expect("a norm down columns");
    assert_eq!(
        (p.layout, p.width, p.workers_per_block),
        (Layout::Columns, 8, 8)
    );
    assert_eq!(
        plan(&sum_middle(3, 50, 20)).map(|p| (p.layout, p.width)),
        Some((Layout::Columns, 4))
    );
    // Enough columns fill the GPU alone: one thread per worker.
    assert_eq!(plan(&sum_columns(64, COLUMN_THREADS)), None);
    assert_eq!(
        plan(&sum_columns(64, COLUMN_THREADS / 2)).map(|p| p.width),
        Some(2)
    );
    // Too short to split.
    assert_eq!(plan(&sum_columns(MIN_ROW - 1, 40)), None);
    // Rows stay rows.
    assert_eq!(
        plan(&softmax_rows(4, 300, true)).map(|p| p.layout),
        Some(Layout::Rows)
    );
}

#[test]
fn the_column_layout_follows_workers_loop_length_and_shared_memory() {
    // Few workers: 8 per block, wide groups; many: 32 per block, narrow groups.
    assert_eq!(column_layout(1024, 8192, 4), Some((128, 8)));
    assert_eq!(column_layout(100, 1 << 20, 4), Some((128, 8)));
    assert_eq!(column_layout(4096, 1024, 4), Some((32, 32)));
    assert_eq!(column_layout(8192, 1 << 20, 4), Some((16, 32)));
    // At least PER_THREAD iterations per thread.
    assert_eq!(column_layout(1024, 64, 4), Some((8, 8)));
    assert_eq!(column_layout(1024, 15, 4), None);
    // The folds' shared memory bounds a block: 12 f64 accumulators in one loop.
    assert_eq!(column_layout(1024, 8192, 96), Some((32, 8)));
    assert_eq!(column_layout(0, 8192, 4), None);
    assert_eq!(column_layout(COLUMN_THREADS, 8192, 4), None);
}

#[test]
fn a_column_kernel_reduces_in_its_width_of_lanes() {
    let lanes: Vec<usize> = range_lanes(&softmax_columns(1024, 4096, false), ReductionOrder::Cuda)
        .into_iter()
        .filter(|&n| n != 0)
        .collect();
    assert_eq!(lanes, vec![32, 32, 32]);
}

#[test]
fn a_column_output_written_along_two_axes_keeps_one_thread() {
    // y[k, c] in one loop and y[c, k] in another: two threads of a group could write one
    // element, so the operator keeps one thread per worker.
    let n = 64u64;
    let mut b = Builder::new("two_ways", &[n]);
    b.input(DType::F32, &[n, n]);
    b.output(DType::F32, &[n, n]);
    b.output(DType::F32, &[n]);
    let c = b.position(0);
    let zero = b.f32(0.0);
    let acc = b.accumulator(Combiner::Sum, zero);
    let (s, e, one) = (b.i64(0), b.i64(n as i64), b.i64(1));
    let k = b.range(s, e, one);
    let x = b.read(IN, 0, &[k, c]);
    b.accumulate(acc, x);
    b.write(OUT, 0, &[k, c], x);
    b.end_range();
    let k = b.range(s, e, one);
    b.write(OUT, 0, &[c, k], acc);
    b.end_range();
    b.write(OUT, 1, &[c], acc);
    assert_eq!(plan(&b.build()), None);
}

#[test]
fn the_column_programs_are_valid() {
    for (name, dag) in crate::fixtures::column_programs() {
        crate::validate::validate(&dag).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            plan(&dag).map(|p| p.layout),
            Some(Layout::Columns),
            "{name}"
        );
    }
}

#[test]
fn a_column_operator_that_may_fault_or_is_sized_at_run_time_keeps_one_thread() {
    // y[c] = sum_k x[idx[k, c], c]: a data-dependent row may be out of range.
    let (rows, cols) = (64u64, 40u64);
    let mut b = Builder::new("gathered_column_sum", &[cols]);
    b.input(DType::F32, &[rows, cols]);
    b.input(DType::I64, &[rows, cols]);
    b.output(DType::F32, &[cols]);
    let c = b.position(0);
    let zero = b.f32(0.0);
    let acc = b.accumulator(Combiner::Sum, zero);
    let (s, e, one) = (b.i64(0), b.i64(rows as i64), b.i64(1));
    let k = b.range(s, e, one);
    let at = b.read(IN, 1, &[k, c]);
    let x = b.read(IN, 0, &[at, c]);
    b.accumulate(acc, x);
    b.end_range();
    b.write(OUT, 0, &[c], acc);
    assert_eq!(plan(&b.build()), None);
    // The same column sum as `sum_columns`, but with a symbolic size: the launch shape is fixed
    // when compiling, so it keeps one thread per worker.
    let mut sized = sum_columns(rows, cols);
    assert!(plan(&sized).is_some());
    sized.symbol_count = 1;
    assert_eq!(plan(&sized), None);
}
