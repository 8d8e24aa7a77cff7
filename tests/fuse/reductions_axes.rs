//! The reductions of the reductions benchmark (layer norm, softmax, RMS norm, logsumexp),
//! composed from stdlib operators with keepdim statistics, along a non-last axis: axis 0 of a
//! matrix and the middle axis of a 3-d tensor, forward and with the gradient `ovl::backward`
//! derives. Their fused kernels reduce down columns, so the C++ backend runs them as blocked
//! workers (neighbouring workers in lockstep, reading rows in memory order), row buffers
//! included. Values: the C++ backend against the interpreter and both against a plain-Rust f64
//! reference; kernel counts asserted; and the blocked program is checked to be generated.

use crate::reduction_kernels as reductions;

use ndarray::{Array2, ArrayD, IxDyn};
use ovl::prelude::*;
use reductions::{max_abs_error, outputs_along, reference, Kernel};

/// `x` with `axis` moved last, as a `[rest, n]` matrix (row `r` is one line along `axis`).
fn lines(x: &ArrayD<f32>, axis: usize) -> Array2<f32> {
    let n = x.shape()[axis];
    let mut order: Vec<usize> = (0..x.ndim()).filter(|&a| a != axis).collect();
    order.push(axis);
    let moved = x.view().permuted_axes(IxDyn(&order));
    let flat: Vec<f32> = moved.iter().copied().collect();
    Array2::from_shape_vec((flat.len() / n.max(1), n), flat).expect("lines")
}

/// The inverse of [`lines`] for a result of `shape` (`keep`: the axis is still there; else it
/// was reduced away and `m` is `[rest]` or `[rest, 1]`).
fn unlines(m: ArrayD<f64>, shape: &[usize], axis: usize, keep: bool) -> ArrayD<f64> {
    let mut moved: Vec<usize> = shape
        .iter()
        .enumerate()
        .filter(|&(a, _)| a != axis)
        .map(|(_, &d)| d)
        .collect();
    if keep {
        moved.push(shape[axis]);
    }
    let flat: Vec<f64> = m.iter().copied().collect();
    let a = ArrayD::from_shape_vec(IxDyn(&moved), flat).expect("unlines");
    if !keep {
        return a;
    }
    // Axis `axis` is last in `a`: move it back.
    let rank = shape.len();
    let mut order: Vec<usize> = (0..rank - 1).collect();
    order.insert(axis, rank - 1);
    a.permuted_axes(IxDyn(&order))
        .as_standard_layout()
        .to_owned()
}

/// The f64 reference of `kernel` along `axis`: `(y, dx)`.
fn reference_along(
    kernel: Kernel,
    x: &ArrayD<f32>,
    dy: &ArrayD<f32>,
    axis: usize,
) -> (ArrayD<f64>, ArrayD<f64>) {
    let xm = lines(x, axis);
    let dym = if kernel.keeps_shape() {
        lines(dy, axis).into_dyn()
    } else {
        let flat: Vec<f32> = dy.iter().copied().collect();
        ArrayD::from_shape_vec(IxDyn(&[flat.len()]), flat).expect("dy")
    };
    let (y, dx) = reference(kernel, &xm, &dym);
    (
        unlines(y, x.shape(), axis, kernel.keeps_shape()),
        unlines(dx, x.shape(), axis, true),
    )
}

/// Evaluates `kernel` along `axis` (with `dy`: forward + backward) under `options`; also returns
/// the fused graph's kernel count and whether every fused kernel that reduces down columns has
/// a blocked program.
fn run(
    kernel: Kernel,
    x: &ArrayD<f32>,
    dy: Option<&ArrayD<f32>>,
    axis: usize,
    options: &Options,
) -> (Vec<ArrayD<f32>>, usize, Vec<bool>) {
    let xl = Lazy::from(x.clone());
    let dyl = dy.map(|d| Lazy::from(d.clone()));
    let handles = outputs_along(kernel, &xl, axis, dyl.as_ref()).expect("outputs");
    let fusion = ovl::fusion_with(handles.as_slice(), options).expect("fusion");
    let blocked = fusion
        .after
        .operators
        .iter()
        .map(|op| {
            let source = ovl_codegen::generate_cpp(op, "test").expect("C++");
            // The loop over a block's workers (`ovl-codegen`'s `shared/emit/blocked.rs`).
            source.contains("for (int64_t ovl_j = 0; ovl_j < ")
        })
        .collect();
    let refs: Vec<&Lazy<f32>> = handles.iter().collect();
    let mut dests: Vec<ArrayD<f32>> = handles.iter().map(|h| ArrayD::zeros(h.shape())).collect();
    ovl::evaluate_into_all(&refs, &mut dests, options)
        .unwrap_or_else(|e| panic!("{} along {axis}: {e}", kernel.name()));
    (dests, fusion.after.operators.len(), blocked)
}

fn assert_close<A: Copy + Into<f64>, B: Copy + Into<f64>>(
    got: &ArrayD<A>,
    want: &ArrayD<B>,
    what: &str,
) {
    let (err, ok) = max_abs_error(got, want);
    assert!(ok, "{what}: max abs error {err:e}");
}

/// The shapes and axes: axis 0 of a matrix and the middle of a 3-d tensor, each with an
/// innermost extent of full blocks of workers and a partial one; columns of 5000 f32, whose row
/// buffers (20000 bytes per worker) narrow the blocks that keep one to 32 workers; and innermost
/// extents that take blocks of 256 workers where the loops stream memory
/// (`ovl_ir::lockstep::WIDEST`): 1064 = 4 * 256 + 40 columns over 7 rows, and a middle axis of 40
/// with 1032 = 4 * 256 + 8 columns.
fn cases() -> Vec<(Vec<usize>, usize)> {
    vec![
        (vec![100, 200], 0),
        (vec![3, 40, 72], 1),
        (vec![5000, 72], 0),
        (vec![7, 1064], 0),
        (vec![2, 40, 1032], 1),
    ]
}

/// Whether the blocked program of `op`'s C++ runs a reduction loop lane by lane
/// (`ovl_ir::lockstep::lane_by_lane`).
fn runs_lane_by_lane(op: &ovl_core::ir::ExpressionDag) -> bool {
    let source = ovl_codegen::generate_cpp(op, "test").expect("C++");
    source.contains("for (uint64_t ovl_t")
}

/// The width of the blocked program of `op`'s C++ (`None`: it has none).
fn block_width(op: &ovl_core::ir::ExpressionDag) -> Option<u64> {
    let source = ovl_codegen::generate_cpp(op, "test").expect("C++");
    let marker = "for (int64_t ovl_j = 0; ovl_j < ";
    let at = source.find(marker)? + marker.len();
    let digits: String = source[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// Blocks of 256 workers where every loop streams memory (layer norm and RMS norm: sums of
/// products, then `x / s`), 64 where a loop computes an `exp` per row (softmax, logsumexp;
/// softmax's row buffer would not fit either), their `max` loop run lane by lane, along axis 0
/// and a middle axis whose innermost extent leaves a partial block; the C++ forward result is
/// the interpreter's (bit for bit without `exp`), and the workers that run alone compute what
/// their twins in blocks compute, bit for bit.
#[test]
fn streaming_column_kernels_take_blocks_of_256_and_match_the_interpreter_exactly() {
    for (shape, axis) in [(vec![7usize, 1064usize], 0usize), (vec![2, 40, 1032], 1)] {
        let mut x = reductions::pseudo_random(&shape, 61);
        // Columns 1024.. (the workers after the last full block) repeat columns 0...
        let inner = shape.len() - 1;
        let twins: Vec<(ndarray::IxDyn, f32)> = x
            .indexed_iter()
            .filter(|(i, _)| i[inner] >= 1024)
            .map(|(i, _)| {
                let mut twin = i.clone();
                twin[inner] -= 1024;
                (i, x[&twin])
            })
            .collect();
        for (i, v) in twins {
            x[&i] = v;
        }
        for kernel in Kernel::ALL {
            let what = format!("{} along axis {axis} of {shape:?}", kernel.name());
            let xl = Lazy::from(x.clone());
            let handles = outputs_along(kernel, &xl, axis, None).expect("outputs");
            let fusion = ovl::fusion_with(handles.as_slice(), &Options::cpu()).expect("fusion");
            assert_eq!(fusion.after.operators.len(), 1, "{what}: kernels");
            let want = match kernel {
                Kernel::LayerNorm | Kernel::RmsNorm => 256,
                Kernel::Softmax | Kernel::LogSumExp => 64,
            };
            let op = &fusion.after.operators[0];
            assert_eq!(block_width(op), Some(want), "{what}: block width");
            assert_eq!(runs_lane_by_lane(op), want == 64, "{what}: lane by lane");
            let (cpu, _, _) = run(kernel, &x, None, axis, &Options::cpu());
            let (interp, _, _) = run(kernel, &x, None, axis, &Options::interpreter());
            // Without `exp` (whose C++ and interpreter forms differ in the last bit), C++ is
            // the interpreter bit for bit.
            if matches!(kernel, Kernel::LayerNorm | Kernel::RmsNorm) {
                let differ = cpu[0]
                    .iter()
                    .zip(interp[0].iter())
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count();
                assert_eq!(
                    differ, 0,
                    "{what}: C++ vs interpreter, elements that differ"
                );
            }
            assert_close(&cpu[0], &interp[0], &format!("{what}: C++ vs interpreter"));
            // The columns past the last full block (1024 on) repeat the first ones: a worker
            // alone computes what its twin in a block (wide, lane by lane) computes, bit for bit.
            let y = &cpu[0];
            let last = y.ndim() - 1;
            for (index, &v) in y.indexed_iter() {
                if index[last] >= 1024 {
                    let mut twin = index.clone();
                    twin[last] -= 1024;
                    assert_eq!(
                        v.to_bits(),
                        y[&twin].to_bits(),
                        "{what}: the worker alone at {index:?} vs its twin in a block"
                    );
                }
            }
        }
    }
}

/// RMS norm in f64 along axis 0 (1030 = 4 * 256 + 6 columns over 9 rows) and along the middle
/// axis of a 3-d tensor, from ops: one kernel, blocks of 256 (16 lanes of 8 bytes per worker
/// still fit `ovl_ir::lockstep::LANES_BYTES`), the C++ result the interpreter's bit for bit and
/// both within 1e-12 of a plain-Rust reference.
#[test]
fn an_f64_rms_norm_along_a_non_last_axis_takes_wide_blocks_and_matches_exactly() {
    use ndarray::Axis;
    for (shape, axis) in [(vec![9usize, 1030usize], 0usize), (vec![3, 4, 1030], 1)] {
        let x = reductions::pseudo_random(&shape, 71).mapv(f64::from);
        let eps = 1e-5f64;
        let rms = |x: &Lazy<f64>| {
            let mean_square = ovl_stdlib::mean_keepdim(ovl_stdlib::mul(x, x), axis);
            ovl_stdlib::div(
                x,
                ovl_stdlib::sqrt(ovl_stdlib::add(mean_square, Lazy::from(ndarray::arr0(eps)))),
            )
        };
        let what = format!("f64 RMS norm along axis {axis} of {shape:?}");
        let y = rms(&Lazy::from(x.clone()));
        let fusion = ovl::fusion_with([&y], &Options::cpu()).expect("fusion");
        assert_eq!(fusion.after.operators.len(), 1, "{what}: kernels");
        assert_eq!(
            block_width(&fusion.after.operators[0]),
            Some(256),
            "{what}: block width"
        );
        let cpu = ovl::evaluate_with(&rms(&Lazy::from(x.clone())), &Options::cpu())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let interp = ovl::evaluate_with(&rms(&Lazy::from(x.clone())), &Options::interpreter())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let differ = cpu
            .iter()
            .zip(interp.iter())
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(
            differ, 0,
            "{what}: C++ vs interpreter, elements that differ"
        );
        let mean_square = x.mapv(|v| v * v).mean_axis(Axis(axis)).expect("mean");
        let want = &x
            / &mean_square
                .insert_axis(Axis(axis))
                .mapv(|m| (m + eps).sqrt());
        let err = cpu
            .iter()
            .zip(want.iter())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f64, f64::max);
        assert!(
            err < 1e-12,
            "{what}: max abs error {err:e} against the reference"
        );
    }
}

#[test]
fn reductions_along_axis_0_and_the_middle_axis_match_the_interpreter_and_the_reference() {
    for (shape, axis) in cases() {
        let x = reductions::pseudo_random(&shape, 21);
        for kernel in Kernel::ALL {
            let out_shape: Vec<usize> = if kernel.keeps_shape() {
                shape.clone()
            } else {
                reductions::without(&shape, axis)
            };
            let dy = reductions::pseudo_random(&out_shape, 22);
            let (y_ref, dx_ref) = reference_along(kernel, &x, &dy, axis);
            let what = format!("{} along axis {axis} of {shape:?}", kernel.name());
            let (interp, _, _) = run(kernel, &x, Some(&dy), axis, &Options::interpreter());
            let (cpu, _, _) = run(kernel, &x, Some(&dy), axis, &Options::cpu());
            let (fwd, _, _) = run(kernel, &x, None, axis, &Options::cpu());
            assert_close(&interp[0], &y_ref, &format!("{what}: interpreter y"));
            assert_close(&interp[1], &dx_ref, &format!("{what}: interpreter dx"));
            assert_close(
                &cpu[0],
                &interp[0],
                &format!("{what}: C++ y vs interpreter"),
            );
            assert_close(
                &cpu[1],
                &interp[1],
                &format!("{what}: C++ dx vs interpreter"),
            );
            assert_close(&fwd[0], &interp[0], &format!("{what}: C++ forward alone"));
            assert_close(&cpu[0], &y_ref, &format!("{what}: C++ y"));
            assert_close(&cpu[1], &dx_ref, &format!("{what}: C++ dx"));
        }
    }
}

#[test]
fn fused_kernels_along_a_non_last_axis_are_one_each_and_blocked() {
    for (shape, axis) in cases() {
        let x = reductions::pseudo_random(&shape, 31);
        for kernel in Kernel::ALL {
            let out_shape: Vec<usize> = if kernel.keeps_shape() {
                shape.clone()
            } else {
                reductions::without(&shape, axis)
            };
            let dy = reductions::pseudo_random(&out_shape, 32);
            for (dy, pass) in [(None, "forward"), (Some(&dy), "forward + backward")] {
                let what = format!("{} {pass} along axis {axis} of {shape:?}", kernel.name());
                let (_, count, blocked) = run(kernel, &x, dy, axis, &Options::cpu());
                assert_eq!(count, 1, "{what}: kernels");
                assert_eq!(blocked, [true], "{what}: blocked program");
            }
        }
    }
}

/// The fused operators of `kernel` along `axis` of a tensor of `shape` as fused for the GPU
/// (`Options::cuda_validate`), forward or forward + backward, that reduce.
fn reducing_gpu_operators(
    kernel: Kernel,
    shape: &[usize],
    axis: usize,
    backward: bool,
    seed: u64,
) -> Vec<ovl_core::ir::ExpressionDag> {
    let x = Lazy::from(reductions::pseudo_random(shape, seed));
    let out_shape: Vec<usize> = if kernel.keeps_shape() {
        shape.to_vec()
    } else {
        reductions::without(shape, axis)
    };
    let dy = Lazy::from(reductions::pseudo_random(&out_shape, seed + 1));
    let handles = outputs_along(kernel, &x, axis, backward.then_some(&dy)).expect("outputs");
    ovl::fusion_with(handles.as_slice(), &Options::cuda_validate())
        .expect("fusion")
        .after
        .operators
        .into_iter()
        .filter(|op| {
            op.expressions
                .iter()
                .any(|e| e.code == ovl_core::ir::Op::Accumulate as i32)
        })
        .collect()
}

/// On the GPU each kernel's reductions down columns run cooperatively
/// (`ovl_ir::cooperative::Layout::Columns`: a block of neighbouring columns times row-threads),
/// forward and backward, at the GPU benchmark's sizes along axis 0 and along a middle axis;
/// with more than 2^16 columns, one thread per column.
#[test]
fn every_kernel_reduces_its_columns_cooperatively_on_the_gpu() {
    use ovl_core::cooperative::{plan, Layout};
    // (shape, axis, (width, workers per block)).
    for (shape, axis, layout) in [
        (vec![8192usize, 1024usize], 0usize, Some((128u32, 8u32))),
        (vec![1024, 4096], 0, Some((32, 32))),
        (vec![4, 300, 64], 1, Some((32, 8))),
        (vec![64, 1 << 17], 0, None),
    ] {
        for kernel in Kernel::ALL {
            for backward in [false, true] {
                let what = format!(
                    "{} along {axis} of {shape:?} backward {backward}",
                    kernel.name()
                );
                let ops = reducing_gpu_operators(kernel, &shape, axis, backward, 41);
                assert!(!ops.is_empty(), "{what}: no reduction");
                for op in ops {
                    let got = plan(&op).map(|p| {
                        assert_eq!(p.layout, Layout::Columns, "{what}");
                        (p.width, p.workers_per_block)
                    });
                    assert_eq!(got, layout, "{what}: operator {}", op.name);
                }
            }
        }
    }
}

/// The fused column kernels as the GPU runs them (from stdlib operators, forward and backward,
/// along axis 0 and a middle axis), pinned as golden files: each operator that cooperates, its
/// IR as protobuf bytes in hex, which `ovl-codegen/tests/codegen/columns.rs` runs under the
/// CUDA emulation against the interpreter in the CUDA order. `OVL_BLESS=1` rewrites them.
#[test]
fn the_fused_column_kernels_are_pinned_for_the_cuda_emulation() {
    let dir = "ovl-codegen/tests/golden/column_kernels";
    let mut names = Vec::new();
    for (shape, axis) in [(vec![70usize, 37usize], 0usize), (vec![2, 45, 12], 1)] {
        for kernel in Kernel::ALL {
            for backward in [false, true] {
                let ops = reducing_gpu_operators(kernel, &shape, axis, backward, 7);
                let pass = if backward { "backward" } else { "forward" };
                for (k, op) in ops.iter().enumerate() {
                    if ovl_core::cooperative::plan(op).is_none() {
                        continue;
                    }
                    let hex: String = ovl::ir_tools::to_bytes(op)
                        .chunks(48)
                        .map(|line| ovl_core::hash::hex(line) + "\n")
                        .collect();
                    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
                    let name = format!(
                        "{}_{pass}_{}_axis{axis}_{k}.hex",
                        kernel.name(),
                        dims.join("x")
                    );
                    ovl_testkit::golden::assert_golden(format!("{dir}/{name}"), &hex);
                    names.push(name);
                }
            }
        }
    }
    assert!(names.len() >= 16, "{names:?}");
    ovl_testkit::golden::assert_only_files(dir, &names);
}

/// `sum(x, 0)` through `Options::cuda_validate()` (the interpreter in the CUDA order) is the
/// documented column order, computed here on its own: per column, 32 lanes (300 rows, 37
/// columns: `ovl_ir::cooperative::column_layout`), row `t` into lane `t % 32`, the lanes folded
/// pairwise, then 0 + the fold; the interpreter's own order (16 lanes) differs somewhere.
#[test]
fn a_column_sum_on_the_gpu_path_reduces_in_the_column_order() {
    fn lanes_sum(column: &[f32], width: usize) -> f32 {
        let mut lanes = vec![0.0f32; width];
        for (t, &v) in column.iter().enumerate() {
            lanes[t % width] += v;
        }
        while lanes.len() > 1 {
            lanes = lanes.chunks(2).map(|p| p[0] + p[1]).collect();
        }
        0.0 + lanes[0]
    }
    let (rows, cols) = (300usize, 37usize);
    let x = reductions::pseudo_random(&[rows, cols], 51);
    let sum = |o: &Options| -> ArrayD<f32> {
        ovl::evaluate_with(&ovl_stdlib::sum(Lazy::from(x.clone()), 0), o)
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let gpu = match ovl::cuda::nvrtc_status() {
        Ok(_) => sum(&Options::cuda_validate()),
        Err(e) => {
            eprintln!("reductions_axes: the CUDA column order check DID NOT RUN (no NVRTC): {e}");
            return;
        }
    };
    let interp = sum(&Options::interpreter());
    let mut differ = 0;
    for c in 0..cols {
        let column: Vec<f32> = (0..rows).map(|r| x[[r, c]]).collect();
        assert_eq!(
            gpu[[c]].to_bits(),
            lanes_sum(&column, 32).to_bits(),
            "column {c}"
        );
        assert_eq!(
            interp[[c]].to_bits(),
            lanes_sum(&column, 16).to_bits(),
            "column {c}"
        );
        differ += usize::from(gpu[[c]] != interp[[c]]);
    }
    assert!(differ > 0, "the data does not tell the orders apart");
}

/// Evaluates `kernel` along `axis` of `x` (forward alone, or with the gradient for `dy`) under
/// `options` at opt_level `level`.
fn evaluate_at(
    kernel: Kernel,
    x: &ArrayD<f32>,
    dy: Option<&ArrayD<f32>>,
    axis: usize,
    options: Options,
    level: u8,
) -> Vec<ArrayD<f32>> {
    let options = options.with_opt_level(level);
    let xl = Lazy::from(x.clone());
    let dyl = dy.map(|d| Lazy::from(d.clone()));
    let handles = outputs_along(kernel, &xl, axis, dyl.as_ref()).expect("outputs");
    let refs: Vec<&Lazy<f32>> = handles.iter().collect();
    let mut dests: Vec<ArrayD<f32>> = handles.iter().map(|h| ArrayD::zeros(h.shape())).collect();
    ovl::evaluate_into_all(&refs, &mut dests, &options)
        .unwrap_or_else(|e| panic!("{} along {axis} at level {level}: {e}", kernel.name()));
    dests
}

/// The number of elements of `a` and `b` whose bits differ.
fn bits_differ(a: &ArrayD<f32>, b: &ArrayD<f32>) -> usize {
    assert_eq!(a.shape(), b.shape());
    a.iter()
        .zip(b.iter())
        .filter(|(p, q)| p.to_bits() != q.to_bits())
        .count()
}

/// Along axis 0 with rows a page apart (1030 f32 columns) and at least 64 rows (65 and 67:
/// odd), and along the middle axis of a 3-d tensor, the elementwise pass of softmax, layer
/// norm and RMS norm runs on the CPU as a kernel of its own in memory order
/// (`ovl_fuse`'s `column_pass`): two kernels, the statistics still blocked, the pass over the
/// output's shape not; logsumexp has no such pass. The interpreter runs the split graph bit
/// for bit as it runs the unfused one, and the C++ result is the interpreter's (bit for bit
/// without `exp`); with the gradient every kernel splits, logsumexp's too.
#[test]
fn passes_down_long_strided_columns_run_as_kernels_of_their_own_bit_for_bit() {
    for (shape, axis) in [(vec![65usize, 1030usize], 0usize), (vec![2, 67, 1030], 1)] {
        let x = reductions::pseudo_random(&shape, 81);
        for kernel in Kernel::ALL {
            let what = format!("{} along axis {axis} of {shape:?}", kernel.name());
            let xl = Lazy::from(x.clone());
            let handles = outputs_along(kernel, &xl, axis, None).expect("outputs");
            let fusion = ovl::fusion_with(handles.as_slice(), &Options::cpu()).expect("fusion");
            let split = kernel.keeps_shape();
            let report = &fusion.report;
            assert_eq!(
                report.split_passes.len(),
                usize::from(split),
                "{what}: {report}"
            );
            assert_eq!(
                report.kernels_after,
                1 + usize::from(split),
                "{what}: {report}"
            );
            let ops = &fusion.after.operators;
            assert!(
                block_width(&ops[0]).is_some(),
                "{what}: the statistics are blocked"
            );
            if split {
                let pass = &ops[1];
                let want: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
                assert_eq!(pass.workgroup_shape, want, "{what}: the pass's workgroup");
                assert_eq!(block_width(pass), None, "{what}: the pass is not blocked");
                assert_eq!(report.split_passes[0].axis, axis, "{what}");
            }
            let out_shape: Vec<usize> = if kernel.keeps_shape() {
                shape.clone()
            } else {
                reductions::without(&shape, axis)
            };
            let dy = reductions::pseudo_random(&out_shape, 82);
            let (y_ref, dx_ref) = reference_along(kernel, &x, &dy, axis);
            // With the gradient, each kernel (logsumexp's too: `dy * exp(x - lse)`) is a
            // statistics kernel and a pass that writes `y` and `dx`.
            let dyl = Lazy::from(dy.clone());
            let handles = outputs_along(kernel, &xl, axis, Some(&dyl)).expect("outputs");
            let fusion = ovl::fusion_with(handles.as_slice(), &Options::cpu()).expect("fusion");
            let report = &fusion.report;
            assert_eq!(report.split_passes.len(), 1, "{what} + gradient: {report}");
            assert_eq!(report.kernels_after, 2, "{what} + gradient: {report}");
            for dy in [None, Some(&dy)] {
                let what = format!("{what} (gradient: {})", dy.is_some());
                let unfused = evaluate_at(kernel, &x, dy, axis, Options::interpreter(), 0);
                let interp = evaluate_at(kernel, &x, dy, axis, Options::interpreter(), 3);
                let cpu = evaluate_at(kernel, &x, dy, axis, Options::cpu(), 3);
                for (k, name) in ["y", "dx"].iter().enumerate().take(interp.len()) {
                    assert_eq!(
                        bits_differ(&interp[k], &unfused[k]),
                        0,
                        "{what}: {name}, interpreter fused vs unfused"
                    );
                    if matches!(kernel, Kernel::LayerNorm | Kernel::RmsNorm) {
                        assert_eq!(
                            bits_differ(&cpu[k], &interp[k]),
                            0,
                            "{what}: {name}, C++ vs interpreter"
                        );
                    }
                    assert_close(&cpu[k], &interp[k], &format!("{what}: {name} C++"));
                }
                assert_close(&cpu[0], &y_ref, &format!("{what}: C++ y"));
                if dy.is_some() {
                    assert_close(&cpu[1], &dx_ref, &format!("{what}: C++ dx"));
                }
            }
        }
    }
}

/// No split where the pass is short, its rows share pages, or it runs along the last axis
/// (row kernels), nor for a GPU (whose cooperative column layout writes neighbouring columns
/// together): one kernel each, as before.
#[test]
fn short_close_or_last_axis_passes_and_gpu_kernels_stay_whole() {
    let cpu = Options::cpu();
    let gpu = Options::cuda_validate();
    for (shape, axis, options) in [
        (vec![7usize, 1064usize], 0usize, &cpu),
        (vec![2, 40, 1032], 1, &cpu),
        (vec![100, 200], 0, &cpu),
        (vec![5000, 72], 0, &cpu),
        (vec![65, 1030], 1, &cpu),
        (vec![65, 1030], 0, &gpu),
        (vec![2, 67, 1030], 1, &gpu),
    ] {
        let x = reductions::pseudo_random(&shape, 91);
        for kernel in Kernel::ALL {
            let what = format!("{} along axis {axis} of {shape:?}", kernel.name());
            let xl = Lazy::from(x.clone());
            let handles = outputs_along(kernel, &xl, axis, None).expect("outputs");
            let fusion = ovl::fusion_with(handles.as_slice(), options).expect("fusion");
            assert!(
                fusion.report.split_passes.is_empty(),
                "{what}: {}",
                fusion.report
            );
            assert_eq!(fusion.report.kernels_after, 1, "{what}: {}", fusion.report);
        }
    }
}

/// RMS norm in f64 along axis 0 of [65, 1030] (rows 8240 bytes apart): split as in f32, the C++
/// result the interpreter's bit for bit, and the interpreter's the unfused graph's.
#[test]
fn an_f64_pass_down_columns_splits_and_matches_exactly() {
    let shape = [65usize, 1030usize];
    let x = reductions::pseudo_random(&shape, 93).mapv(f64::from);
    let eps = 1e-5f64;
    let rms = |x: &Lazy<f64>| {
        let mean_square = ovl_stdlib::mean_keepdim(ovl_stdlib::mul(x, x), 0);
        ovl_stdlib::div(
            x,
            ovl_stdlib::sqrt(ovl_stdlib::add(mean_square, Lazy::from(ndarray::arr0(eps)))),
        )
    };
    let y = rms(&Lazy::from(x.clone()));
    let fusion = ovl::fusion_with([&y], &Options::cpu()).expect("fusion");
    assert_eq!(fusion.report.split_passes.len(), 1, "{}", fusion.report);
    assert_eq!(fusion.report.kernels_after, 2, "{}", fusion.report);
    let at = |o: Options| {
        ovl::evaluate_with(&rms(&Lazy::from(x.clone())), &o).unwrap_or_else(|e| panic!("{e}"))
    };
    let cpu = at(Options::cpu());
    let interp = at(Options::interpreter());
    let unfused = at(Options::interpreter().with_opt_level(0));
    let differ = |a: &ArrayD<f64>, b: &ArrayD<f64>| {
        a.iter()
            .zip(b.iter())
            .filter(|(p, q)| p.to_bits() != q.to_bits())
            .count()
    };
    assert_eq!(differ(&cpu, &interp), 0, "C++ vs interpreter");
    assert_eq!(differ(&interp, &unfused), 0, "interpreter fused vs unfused");
}
