//! Cooperative columns (`ovl_ir::cooperative::Layout::Columns`): kernels that reduce down
//! columns, run by a block of neighbouring workers times a few row-threads. Their generated
//! CUDA, run under the host emulation with each block's threads at once (barriers for real),
//! must equal the reference interpreter computing in the CUDA backend's reduction order bit for
//! bit, with columns not a multiple of a block's workers (the last block's spare threads take
//! part in the folds and write nothing) and rows not a multiple of the width; the order must be
//! the documented one (checked against a computation of its own); and the kernels must compile
//! for sm_80 and sm_90.

use crate::cooperative::{
    compile_for_sm_80_and_sm_90, emulated_as_interpreted, interpreted, on_a_gpu_if_there_is_one,
    rows_f32, sum_in_lanes,
};
use ovl_ir::cooperative::{self, Layout, ReductionOrder};
use ovl_ir::fixtures::{norm_columns, softmax_columns, sum_columns, sum_middle};
use ovl_ir::ir::ExpressionDag;
use ovl_ir::HostTensor;

/// (rows, columns): a partial last block of workers everywhere, rows not a multiple of the
/// width, widths from 2 to 128, blocks of 8 and 32 workers, and more blocks than the grid has.
const SIZES: [(usize, usize); 6] = [
    (17, 3),
    (100, 21),
    (300, 37),
    (1000, 45),
    (4100, 33),
    (100, 4100),
];

/// The plan of a column kernel (it must be one).
fn columns(dag: &ExpressionDag) -> cooperative::Cooperative {
    let p = cooperative::plan(dag).unwrap_or_else(|| panic!("{} does not cooperate", dag.name));
    assert_eq!(p.layout, Layout::Columns, "{}", dag.name);
    p
}

#[test]
fn the_sizes_cover_partial_blocks_and_rows() {
    let mut seen = Vec::new();
    for (rows, cols) in SIZES {
        let p = columns(&sum_columns(rows as u64, cols as u64));
        assert_ne!(cols % p.workers_per_block as usize, 0, "{rows}x{cols}");
        assert_ne!(rows % p.width as usize, 0, "{rows}x{cols}");
        seen.push((p.width, p.workers_per_block));
    }
    assert_eq!(
        seen,
        vec![(2, 8), (8, 8), (32, 8), (64, 8), (128, 8), (8, 32)]
    );
}

#[test]
fn column_sums_match_the_interpreter_in_the_cuda_order() {
    for (rows, cols) in SIZES {
        let x = rows_f32(rows, cols);
        emulated_as_interpreted(&sum_columns(rows as u64, cols as u64), &[&x]);
    }
}

#[test]
fn softmax_along_axis_0_matches_the_interpreter_in_the_cuda_order() {
    for (rows, cols) in SIZES {
        let x = rows_f32(rows, cols);
        for buffered in [false, true] {
            let dag = softmax_columns(rows as u64, cols as u64, buffered);
            columns(&dag);
            emulated_as_interpreted(&dag, &[&x]);
        }
    }
}

#[test]
fn layer_norm_along_axis_0_matches_the_interpreter_in_the_cuda_order() {
    for (rows, cols) in SIZES {
        let x = rows_f32(rows, cols);
        let g = HostTensor::from_vec(
            &[rows],
            (0..rows)
                .map(|r| 0.5 + (r % 13) as f32 * 0.1)
                .collect::<Vec<f32>>(),
        )
        .unwrap();
        let dag = norm_columns(rows as u64, cols as u64);
        columns(&dag);
        emulated_as_interpreted(&dag, &[&x, &g]);
    }
}

#[test]
fn f64_sums_along_a_middle_axis_match_the_interpreter_in_the_cuda_order() {
    for (outer, n, cols) in [(3usize, 50usize, 20usize), (2, 333, 13), (5, 2000, 7)] {
        let v: Vec<f64> = (0..outer * n * cols)
            .map(|i| ((i * 7919) % 1013) as f64 * 0.0131 - 6.1 + 1e-9 * i as f64)
            .collect();
        let x = HostTensor::from_vec(&[outer, n, cols], v).unwrap();
        let dag = sum_middle(outer as u64, n as u64, cols as u64);
        columns(&dag);
        emulated_as_interpreted(&dag, &[&x]);
    }
}

#[test]
fn the_column_order_is_the_documented_one_and_differs_from_sixteen_lanes() {
    let (rows, cols) = (1000usize, 45usize);
    let x = rows_f32(rows, cols);
    let dag = sum_columns(rows as u64, cols as u64);
    let width = columns(&dag).width as usize;
    assert_eq!(width, 64);
    let cuda = emulated_as_interpreted(&dag, &[&x]);
    let lanes = interpreted(&dag, &[&x], ReductionOrder::Lanes);
    let data = x.as_slice::<f32>().unwrap();
    let (sums, sums16) = (
        cuda[0].as_slice::<f32>().unwrap(),
        lanes[0].as_slice::<f32>().unwrap(),
    );
    let mut differ = 0;
    for c in [0usize, 11, 44] {
        let column: Vec<f32> = (0..rows).map(|r| data[r * cols + c]).collect();
        assert_eq!(sums[c].to_bits(), sum_in_lanes(&column, width).to_bits());
        assert_eq!(sums16[c].to_bits(), sum_in_lanes(&column, 16).to_bits());
        differ += usize::from(sums[c] != sums16[c]);
    }
    assert!(differ > 0, "the data does not tell the orders apart");
}

#[test]
fn the_column_kernel_guards_its_writes_and_folds_in_shared_memory() {
    // The shape of the generated code the emulation relies on (8 columns x 32 threads, two
    // f32 accumulators in one loop): one loop for the whole block,
    // spare threads inactive, a barrier per level of the fold, no warp shuffle.
    let src = ovl_codegen::cuda::generate_cuda(&norm_columns(300, 37), "k").unwrap();
    assert!(src.contains("const bool ovl_active = ovl_base + (int64_t)ovl_col < 37LL;"));
    assert!(src.contains("if (ovl_active && ovl_lane == 0u) "), "{src}");
    assert!(src.contains("if (ovl_active) "), "{src}");
    assert!(src.contains("__shared__ float ovl_red_f32[512];"), "{src}");
    assert!(!src.contains("ovl::shfl"), "{src}");
}

#[test]
fn column_kernels_on_a_gpu_if_there_is_one() {
    // (program, inputs, f32 ulps): exact where the kernel uses only +, *, /, rsqrt; softmax's
    // `exp` is the GPU's own (issue 29, item 2), a few ulps from the host's.
    let mut cases: Vec<(ExpressionDag, Vec<HostTensor>, u32)> = Vec::new();
    for (rows, cols) in SIZES.into_iter().chain([(8192, 1024), (1024, 4096)]) {
        let x = rows_f32(rows, cols);
        cases.push((sum_columns(rows as u64, cols as u64), vec![x.clone()], 0));
        let g = HostTensor::from_vec(&[rows], vec![0.75f32; rows]).unwrap();
        cases.push((
            norm_columns(rows as u64, cols as u64),
            vec![x.clone(), g],
            0,
        ));
        for buffered in [false, true] {
            let dag = softmax_columns(rows as u64, cols as u64, buffered);
            cases.push((dag, vec![x.clone()], 8));
        }
    }
    for (dag, _, _) in &cases {
        columns(dag);
    }
    on_a_gpu_if_there_is_one("columns.rs", "column kernels", &cases);
}

#[test]
fn column_kernels_compile_for_sm_80_and_sm_90() {
    let mut programs = ovl_ir::fixtures::column_programs();
    // Every block shape: 8 workers x 2 .. 128 threads, 32 x 32.
    for (rows, cols) in [(17u64, 3u64), (8192, 1024), (1024, 4096)] {
        programs.push((
            "softmax_columns",
            softmax_columns(rows, cols, rows % 2 == 0),
        ));
        programs.push(("norm_columns", norm_columns(rows, cols)));
    }
    compile_for_sm_80_and_sm_90("columns.rs", programs, |name, dag, ptx| {
        columns(dag);
        assert!(
            ptx.contains("bar.sync") && ptx.contains(".shared"),
            "{name}: no barrier or shared memory in\n{ptx}"
        );
    });
}

#[test]
fn the_f64_fold_buffers_are_per_dtype() {
    // An f64 sum down a middle axis folds through an f64 buffer of one slot.
    let dag = sum_middle(3, 50, 20);
    let p = columns(&dag);
    let src = ovl_codegen::cuda::generate_cuda(&dag, "k").unwrap();
    assert!(
        src.contains(&format!("__shared__ double ovl_red_f64[{}];", p.block())),
        "{src}"
    );
}

#[test]
fn the_fused_column_kernels_match_the_interpreter_in_the_cuda_order() {
    // The stdlib operators' softmax, layer norm, RMS norm and logsumexp along axis 0 and a
    // middle axis, forward and backward (the gradient `ovl::backward` derives), fused as for
    // the GPU (pinned by `tests/fuse/reductions_axes.rs` at the workspace root), each operator on
    // pseudo-random inputs of its own.
    use prost::Message as _;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/column_kernels");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("an entry").path())
        .collect();
    files.sort();
    assert!(files.len() >= 16, "{files:?}");
    let mut backward = 0;
    for path in files {
        let hex: String = std::fs::read_to_string(&path)
            .expect("read")
            .split_whitespace()
            .collect();
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect();
        let dag = ExpressionDag::decode(bytes.as_slice())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        columns(&dag);
        let inputs: Vec<HostTensor> = dag
            .inputs
            .iter()
            .enumerate()
            .map(|(k, t)| {
                let n: u64 = t.shape.iter().product();
                let v: Vec<f32> = (0..n)
                    .map(|i| ((i * 7919 + k as u64 * 104_729) % 2003) as f32 * 0.003 - 3.0)
                    .collect();
                let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
                HostTensor::from_vec(&shape, v).unwrap()
            })
            .collect();
        let refs: Vec<&HostTensor> = inputs.iter().collect();
        emulated_as_interpreted(&dag, &refs);
        backward += usize::from(path.to_string_lossy().contains("backward"));
    }
    assert!(backward >= 8, "{backward} gradient kernels");
}
