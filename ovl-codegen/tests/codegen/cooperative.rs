//! Cooperative rows (`ovl_ir::cooperative`): row kernels whose workers the GPU runs as a group
//! of threads. Their generated CUDA, run under the host emulation with each block's threads at
//! once (barriers and warp shuffles for real), must equal the reference interpreter computing in
//! the CUDA backend's reduction order bit for bit, at row lengths around every group width,
//! with NaNs, infinities, signed zeros and ties; that order must be the one `proto/ovl.proto`
//! documents (checked against a computation of its own here), and it must differ from the
//! one-thread order where rounding shows it. An operator that may fault keeps one thread per
//! worker, and its first faulting worker is still the one reported.

use crate::common::{self, bits, zero_outputs, Builder, IN, OUT};
use crate::cuda_emulated::{build, emulate_launch, same_as_cpp};
use ovl_core::interp::{interpret_with, InterpOptions};
use ovl_ir::cooperative::{self, ReductionOrder};
use ovl_ir::fixtures::{int_rows, norm_rows, softmax_rows};
use ovl_ir::ir::ExpressionDag;
use ovl_ir::ops::Combiner;
use ovl_ir::{DType, HostTensor};

/// The interpreter's outputs in `order` (one thread: row-major).
pub(crate) fn interpreted(
    dag: &ExpressionDag,
    inputs: &[&HostTensor],
    order: ReductionOrder,
) -> Vec<HostTensor> {
    let mut out = zero_outputs(dag);
    interpret_with(
        dag,
        inputs,
        &mut out,
        &InterpOptions {
            threads: Some(1),
            reduction_order: order,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{}: the interpreter failed: {e}", dag.name));
    out
}

/// The emulated cooperative kernel equals the interpreter in the CUDA order, bit for bit, on
/// grids of 1, 2 and 3 blocks (fewer blocks than rows: the grid-stride loop). Returns the
/// interpreter's outputs.
pub(crate) fn emulated_as_interpreted(
    dag: &ExpressionDag,
    inputs: &[&HostTensor],
) -> Vec<HostTensor> {
    let plan = cooperative::plan(dag).unwrap_or_else(|| panic!("{} does not cooperate", dag.name));
    let expected = interpreted(dag, inputs, ReductionOrder::Cuda);
    let emulated = build(dag);
    for grid in [1, 2, 3] {
        let (got, st) = emulate_launch(&emulated, dag, inputs, &[], grid, plan.block(), true);
        let what = format!(
            "{} {:?} (width {}) on {grid} block(s)",
            dag.name, dag.inputs[0].shape, plan.width
        );
        assert_eq!(st.code, 0, "{what}: a fault {st:?}");
        for (k, (g, e)) in got.iter().zip(&expected).enumerate() {
            let (g, e) = (bits(g), bits(e));
            if let Some(i) = (0..g.len()).find(|&i| g[i] != e[i]) {
                panic!(
                    "{what}: output {k} element {i}: {:#x} emulated vs {:#x} interpreted",
                    g[i], e[i]
                );
            }
        }
    }
    expected
}

/// Row data with the edge values a reduction must get right: NaN (in row 1, where there is
/// one), infinities (row 2), signed zeros and ties (row 0 starts with equal values, then -0.0
/// and 0.0; row 3 is all zeros of both signs, so its maximum is a tie of -0.0 and 0.0), and
/// values whose sums round differently in different orders.
pub(crate) fn rows_f32(rows: usize, cols: usize) -> HostTensor {
    let v: Vec<f32> = (0..rows * cols)
        .map(|i| {
            let (r, c) = (i / cols, i % cols);
            match (r, c) {
                (0, 0) | (0, 1) => 3.5,
                (0, 2) => -0.0,
                (0, 3) => 0.0,
                (1, 5) => f32::NAN,
                (2, 7) => f32::INFINITY,
                (2, 8) => f32::NEG_INFINITY,
                (3, c) if c % 3 == 0 => 0.0,
                (3, _) => -0.0,
                _ => ((i * 7919) % 1013) as f32 * 0.013 - 6.1 + 1e-4 * (c as f32).sqrt(),
            }
        })
        .collect();
    HostTensor::from_vec(&[rows, cols], v).unwrap()
}

#[test]
fn softmax_rows_match_the_interpreter_in_the_cuda_order() {
    // Rows shorter and longer than a warp, odd lengths, each group width (32 .. 1024), and
    // more rows than a warp-group block holds (8).
    for (rows, cols) in [
        (4, 16),
        (9, 31),
        (9, 33),
        (3, 100),
        (3, 257),
        (2, 1000),
        (2, 2100),
        (2, 4500),
        (1, 8193),
    ] {
        let x = rows_f32(rows, cols);
        for buffered in [false, true] {
            let dag = softmax_rows(rows as u64, cols as u64, buffered);
            emulated_as_interpreted(&dag, &[&x]);
        }
    }
}

#[test]
fn norm_rows_match_the_interpreter_in_the_cuda_order() {
    for (rows, cols) in [(9, 100), (4, 77), (2, 600), (2, 3000)] {
        let x = rows_f32(rows, cols);
        let g = HostTensor::from_vec(
            &[cols],
            (0..cols)
                .map(|c| 0.5 + (c % 13) as f32 * 0.1)
                .collect::<Vec<f32>>(),
        )
        .unwrap();
        emulated_as_interpreted(&norm_rows(rows as u64, cols as u64), &[&x, &g]);
    }
}

#[test]
fn integer_and_f64_rows_shuffle_every_width() {
    for (rows, cols) in [(3, 40), (9, 17), (2, 700)] {
        let x: Vec<i32> = (0..rows * cols)
            .map(|i| match i % 11 {
                0 => 0,
                3 => i32::MAX - i as i32,
                5 => i32::MIN + 7 * i as i32,
                _ => (i as i32).wrapping_mul(2654435) % 40_000 - 20_000,
            })
            .collect();
        let x = HostTensor::from_vec(&[rows, cols], x).unwrap();
        emulated_as_interpreted(&int_rows(rows as u64, cols as u64), &[&x]);
    }
}

/// The documented CUDA order, computed here on its own: `width` lanes, iteration `t` into lane
/// `t % width` in order, the lanes folded pairwise, the accumulator (0.0) ⊕ the fold.
pub(crate) fn sum_in_lanes(row: &[f32], width: usize) -> f32 {
    let mut lanes = vec![0.0f32; width];
    for (t, &x) in row.iter().enumerate() {
        lanes[t % width] += x;
    }
    while lanes.len() > 1 {
        lanes = lanes.chunks(2).map(|p| p[0] + p[1]).collect();
    }
    0.0 + lanes[0]
}

#[test]
fn the_cuda_order_is_the_documented_one_and_differs_from_sixteen_lanes() {
    let (rows, cols) = (5usize, 3000usize);
    let x = rows_f32(rows, cols);
    let g = HostTensor::from_vec(&[cols], vec![1.0f32; cols]).unwrap();
    let dag = norm_rows(rows as u64, cols as u64);
    let width = cooperative::plan(&dag).unwrap().width as usize;
    assert_eq!(width, 512);
    let cuda = emulated_as_interpreted(&dag, &[&x, &g]);
    let lanes = interpreted(&dag, &[&x, &g], ReductionOrder::Lanes);
    let data = x.as_slice::<f32>().unwrap();
    let means = cuda[1].as_slice::<f32>().unwrap();
    let means16 = lanes[1].as_slice::<f32>().unwrap();
    let mut differ = 0;
    for r in [0usize, 4] {
        let row = &data[r * cols..(r + 1) * cols];
        assert_eq!(
            means[r].to_bits(),
            (sum_in_lanes(row, width) / cols as f32).to_bits()
        );
        assert_eq!(
            means16[r].to_bits(),
            (sum_in_lanes(row, 16) / cols as f32).to_bits()
        );
        differ += usize::from(means[r] != means16[r]);
    }
    assert!(differ > 0, "the data does not tell the orders apart");
}

#[test]
fn an_operator_that_may_fault_keeps_one_thread_and_reports_its_first_fault() {
    // out[r] = sum_k x[r, idx[r, k]]: rows 1 and 2 index out of bounds; row 1's fault is
    // reported.
    let (rows, cols) = (3u64, 40u64);
    let mut b = Builder::new("gathered_row_sum", &[rows]);
    b.input(DType::F32, &[rows, cols]);
    b.input(DType::I64, &[rows, cols]);
    b.output(DType::F32, &[rows]);
    let r = b.position(0);
    let zero = b.f32(0.0);
    let acc = b.accumulator(Combiner::Sum, zero);
    let (s, e, one) = (b.i64(0), b.i64(cols as i64), b.i64(1));
    let k = b.range(s, e, one);
    let at = b.read(IN, 1, &[r, k]);
    let v = b.read(IN, 0, &[r, at]);
    b.accumulate(acc, v);
    b.end_range();
    b.write(OUT, 0, &[r], acc);
    let dag = b.build();
    assert_eq!(cooperative::plan(&dag), None);
    let x = rows_f32(rows as usize, cols as usize);
    let idx: Vec<i64> = (0..rows * cols)
        .map(|i| match i {
            45 => 40,
            90 => -1,
            _ => (i * 7 % cols) as i64,
        })
        .collect();
    let idx = HostTensor::from_vec(&[rows as usize, cols as usize], idx).unwrap();
    same_as_cpp(&dag, &[&x, &idx]);
    // The interpreter's CUDA order is its one-thread order here.
    let ok: Vec<i64> = (0..rows * cols).map(|i| (i * 7 % cols) as i64).collect();
    let ok = HostTensor::from_vec(&[rows as usize, cols as usize], ok).unwrap();
    let a = interpreted(&dag, &[&x, &ok], ReductionOrder::Cuda);
    let b = interpreted(&dag, &[&x, &ok], ReductionOrder::Lanes);
    assert_eq!(common::bits(&a[0]), common::bits(&b[0]));
}

/// Whether `got` is within `ulps` of `want` element by element (any NaN matching any NaN);
/// non-f32 tensors bit for bit.
pub(crate) fn within(got: &HostTensor, want: &HostTensor, ulps: u32) -> Result<(), String> {
    if let (Some(g), Some(w)) = (got.as_slice::<f32>(), want.as_slice::<f32>()) {
        for (i, (x, y)) in g.iter().zip(w).enumerate() {
            let apart = (x.to_bits() as i64 - y.to_bits() as i64).unsigned_abs();
            let same = (x.is_nan() && y.is_nan())
                || x.to_bits() == y.to_bits()
                || (x.is_finite() && y.is_finite() && apart <= u64::from(ulps));
            if !same {
                return Err(format!("element {i}: {x:e} vs {y:e} (allowed {ulps} ulps)"));
            }
        }
        return Ok(());
    }
    match bits(got) == bits(want) {
        true => Ok(()),
        false => Err("differs".into()),
    }
}

#[test]
fn row_kernels_on_a_gpu_if_there_is_one() {
    // (program, inputs, f32 ulps): exact where the kernel uses only +, *, /, sqrt; softmax's
    // `exp` is the GPU's own (issue 29, item 2), a few ulps from the host's.
    let mut cases: Vec<(ExpressionDag, Vec<HostTensor>, u32)> = Vec::new();
    for (rows, cols) in [(9, 33), (3, 257), (64, 1000), (16, 4096), (2, 8193)] {
        let x = rows_f32(rows, cols);
        let g = HostTensor::from_vec(&[cols], vec![0.75f32; cols]).unwrap();
        cases.push((norm_rows(rows as u64, cols as u64), vec![x.clone(), g], 0));
        for buffered in [false, true] {
            cases.push((
                softmax_rows(rows as u64, cols as u64, buffered),
                vec![x.clone()],
                8,
            ));
        }
    }
    for (rows, cols) in [(3, 40), (9, 17), (5, 700)] {
        let x: Vec<i32> = (0..rows * cols)
            .map(|i| (i as i32).wrapping_mul(2654435) % 40_000)
            .collect();
        let x = HostTensor::from_vec(&[rows, cols], x).unwrap();
        cases.push((int_rows(rows as u64, cols as u64), vec![x], 0));
    }
    on_a_gpu_if_there_is_one("cooperative.rs", "row kernels", &cases);
}

/// Runs each case (program, inputs, f32 ulps) on the GPU, if there is one, with the launch
/// shape `cooperative::plan` gives it, against the interpreter in the CUDA order; prints what
/// ran, or that nothing did (`file`: the test module, `what`: the kernels, plural).
pub(crate) fn on_a_gpu_if_there_is_one(
    file: &str,
    what: &str,
    cases: &[(ExpressionDag, Vec<HostTensor>, u32)],
) {
    use ovl_codegen::cuda::{self, CudaCompileOptions};
    use std::io::Write as _;
    let say = |s: &str| {
        let _ = writeln!(std::io::stderr(), "{s}");
    };
    let gpu = match cuda::gpu_status() {
        Ok(gpu) => gpu,
        Err(e) => {
            say(&format!(
                "{file}: GPU EXECUTION DID NOT RUN (no GPU: {}); the {what} ran under the host \
                 emulation instead",
                e.to_string().lines().next().unwrap_or_default()
            ));
            return;
        }
    };
    let cache = tempfile::tempdir().expect("a temporary directory");
    let options = CudaCompileOptions::default().with_cache_dir(cache.path());
    for (dag, inputs, ulps) in cases {
        let refs: Vec<&HostTensor> = inputs.iter().collect();
        let op = cuda::load(dag, &options).unwrap_or_else(|e| panic!("{}: {e}", dag.name));
        let plan = cooperative::plan(dag).expect("cooperative");
        assert_eq!(op.block_size(), plan.block(), "{}", dag.name);
        let mut got = zero_outputs(dag);
        op.run(&refs, &mut got, &[])
            .unwrap_or_else(|e| panic!("{}: {e}", dag.name));
        let want = interpreted(dag, &refs, ReductionOrder::Cuda);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            if let Err(m) = within(g, w, *ulps) {
                panic!(
                    "{} {:?} output {k} on the GPU: {m}",
                    dag.name, dag.inputs[0].shape
                );
            }
        }
    }
    say(&format!(
        "{file}: {} {what} ran on the GPU {} (sm_{}) and matched the interpreter in the CUDA \
         order",
        cases.len(),
        gpu.name,
        gpu.arch
    ));
}

#[test]
fn row_kernels_compile_for_sm_80_and_sm_90() {
    let mut programs = ovl_ir::fixtures::row_programs();
    // Every width class: a warp (several rows per block) up to a block of 1024.
    for cols in [16u64, 300, 1000, 2100, 4096, 9000] {
        programs.push(("softmax_rows", softmax_rows(4, cols, cols % 2 == 0)));
    }
    compile_for_sm_80_and_sm_90("cooperative.rs", programs, |name, _, ptx| {
        assert!(
            ptx.contains("shfl.sync.down"),
            "{name}: no warp shuffle in\n{ptx}"
        );
    });
}

/// Compiles each program with NVRTC and ptxas for sm_80 and sm_90 and hands `check` its name,
/// the program and the PTX; prints that nothing ran when NVRTC or ptxas is missing (`file`:
/// the test module).
pub(crate) fn compile_for_sm_80_and_sm_90(
    file: &str,
    programs: Vec<(&str, ExpressionDag)>,
    check: impl Fn(&str, &ExpressionDag, &str),
) {
    use ovl_codegen::cuda::{self, CudaCompileOptions};
    use std::io::Write as _;
    if let Err(e) = cuda::nvrtc_status().and_then(|_| cuda::ptxas_path()) {
        let _ = writeln!(
            std::io::stderr(),
            "{file}: CUDA compilation DID NOT RUN: NVRTC or ptxas not found: {}",
            e.to_string().lines().next().unwrap_or_default()
        );
        return;
    }
    let cache = tempfile::tempdir().expect("a temporary directory");
    let options = CudaCompileOptions::default().with_cache_dir(cache.path());
    for (name, dag) in programs {
        for arch in [80, 90] {
            let a = cuda::validate(&dag, arch, &options)
                .unwrap_or_else(|e| panic!("{name} for sm_{arch}: {e}"));
            check(name, &dag, &String::from_utf8_lossy(a.bytes()));
        }
    }
}

#[test]
fn an_accumulator_reduced_by_two_loops_folds_twice() {
    // acc = max over x[r, :] then, in a second loop, max over -x[r, :] into the same
    // accumulator; a sum of both loops' elements into another. Rows of 600 (a block of 128).
    let (rows, cols) = (3u64, 600u64);
    let mut b = Builder::new("two_loop_stats", &[rows]);
    b.input(DType::F32, &[rows, cols]);
    b.output(DType::F32, &[rows]);
    b.output(DType::F32, &[rows]);
    let r = b.position(0);
    let low = b.f32(f32::NEG_INFINITY);
    let top = b.accumulator(Combiner::Max, low);
    let zero = b.f32(0.0);
    let total = b.accumulator(Combiner::Sum, zero);
    let (s, e, one) = (b.i64(0), b.i64(cols as i64), b.i64(1));
    for negate in [false, true] {
        let k = b.range(s, e, one);
        let x = b.read(IN, 0, &[r, k]);
        let v = if negate {
            b.op(ovl_ir::ir::Op::Neg, &[x])
        } else {
            x
        };
        b.accumulate(top, v);
        b.accumulate(total, v);
        b.end_range();
    }
    b.write(OUT, 0, &[r], top);
    b.write(OUT, 1, &[r], total);
    let dag = b.build();
    assert_eq!(cooperative::plan(&dag).map(|p| p.width), Some(128));
    let x = rows_f32(rows as usize, cols as usize);
    emulated_as_interpreted(&dag, &[&x]);
}

#[test]
fn the_benchmarks_fused_row_kernels_match_the_interpreter_in_the_cuda_order() {
    // The stdlib's softmax, layer norm, RMS norm and logsumexp, forward and backward, fused as
    // for the GPU (pinned by `tests/fuse/reductions_bench.rs` at the workspace root), each operator
    // on pseudo-random inputs of its own.
    use prost::Message as _;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/row_kernels");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("an entry").path())
        .collect();
    files.sort();
    assert!(files.len() >= 16, "{files:?}");
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
        let inputs: Vec<HostTensor> = dag
            .inputs
            .iter()
            .enumerate()
            .map(|(k, t)| {
                assert_eq!(t.dtype, DType::F32.to_ir() as i32, "{}", path.display());
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
    }
}
