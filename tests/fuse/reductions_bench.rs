//! The kernels of the reductions benchmark (`benches/reductions.rs`), each written three ways
//! (`tests/support/reductions.rs`), forward and forward + backward, give the values of a
//! plain-Rust f64 reference on the interpreter and the C++ backend, evaluated per call and
//! compiled once on placeholders; and the benchmark's tolerance check rejects a wrong value.

use crate::reduction_kernels as reductions;

use ndarray::{ArrayD, Ix2};
use ovl::prelude::*;
use reductions::{max_abs_error, outputs, reference, Kernel, Way};

fn targets() -> Vec<(&'static str, Options)> {
    vec![
        ("interpreter", Options::interpreter()),
        ("cpu", Options::cpu()),
    ]
}

/// Evaluates `kernel` written `way` on `x` (with `dy` for forward + backward) per call.
fn run(
    kernel: Kernel,
    way: Way,
    x: &ArrayD<f32>,
    dy: Option<&ArrayD<f32>>,
    options: &Options,
) -> Vec<ArrayD<f32>> {
    let xl = Lazy::from(x.clone());
    let dyl = dy.map(|d| Lazy::from(d.clone()));
    let handles = outputs(kernel, way, &xl, dyl.as_ref()).expect("outputs");
    let refs: Vec<&Lazy<f32>> = handles.iter().collect();
    let mut dests: Vec<ArrayD<f32>> = handles.iter().map(|h| ArrayD::zeros(h.shape())).collect();
    ovl::evaluate_into_all(&refs, &mut dests, options)
        .unwrap_or_else(|e| panic!("{} {}: {e}", kernel.name(), way.name()));
    dests
}

/// The same, recorded once on placeholders and compiled.
fn run_compiled(
    kernel: Kernel,
    way: Way,
    x: &ArrayD<f32>,
    dy: &ArrayD<f32>,
    options: &Options,
) -> Vec<ArrayD<f32>> {
    let px = ovl::placeholder::<f32>("x", x.shape());
    let pdy = ovl::placeholder::<f32>("dy", dy.shape());
    let handles = outputs(kernel, way, &px, Some(&pdy)).expect("outputs");
    let step = ovl::compile((&px, &pdy), handles.as_slice(), options)
        .unwrap_or_else(|e| panic!("{} {}: {e}", kernel.name(), way.name()));
    let mut dests: Vec<ArrayD<f32>> = handles.iter().map(|h| ArrayD::zeros(h.shape())).collect();
    step.run_into(
        (&Lazy::from(x.clone()), &Lazy::from(dy.clone())),
        &mut dests,
    )
    .unwrap_or_else(|e| panic!("{} {} compiled: {e}", kernel.name(), way.name()));
    dests
}

fn assert_close(got: &ArrayD<f32>, want: &ArrayD<f64>, what: &str) {
    let (err, ok) = max_abs_error(got, want);
    assert!(ok, "{what}: max abs error {err:e}");
}

#[test]
fn every_way_matches_the_f64_reference_forward_and_backward() {
    // 37 columns: two full blocks of the accumulators' 16 lanes and a partial one.
    let (rows, cols) = (5, 37);
    let x = reductions::pseudo_random(&[rows, cols], 11);
    let x2 = x.clone().into_dimensionality::<Ix2>().unwrap();
    for kernel in Kernel::ALL {
        let dy = if kernel.keeps_shape() {
            reductions::pseudo_random(&[rows, cols], 12)
        } else {
            reductions::pseudo_random(&[rows], 13)
        };
        let (y_ref, dx_ref) = reference(kernel, &x2, &dy);
        for way in Way::ALL {
            for (target, options) in targets() {
                let what = format!("{} {} on {target}", kernel.name(), way.name());
                let fwd = run(kernel, way, &x, None, &options);
                assert_eq!(fwd.len(), 1, "{what}");
                assert_close(&fwd[0], &y_ref, &format!("{what}, forward"));
                let both = run(kernel, way, &x, Some(&dy), &options);
                assert_close(&both[0], &y_ref, &format!("{what}, y of forward+backward"));
                assert_close(&both[1], &dx_ref, &format!("{what}, dx"));
            }
            let what = format!("{} {} compiled once", kernel.name(), way.name());
            let both = run_compiled(kernel, way, &x, &dy, &Options::cpu());
            assert_close(&both[0], &y_ref, &format!("{what}, y"));
            assert_close(&both[1], &dx_ref, &format!("{what}, dx"));
        }
    }
}

#[test]
fn every_kernel_from_stdlib_ops_is_one_kernel_forward_and_backward() {
    // The statistics' consumers run as loops inside the reductions' workers (issue 14's goal:
    // one kernel forward).
    let x = Lazy::from(reductions::pseudo_random(&[16, 300], 5));
    for kernel in Kernel::ALL {
        let dy_shape: &[usize] = if kernel.keeps_shape() {
            &[16, 300]
        } else {
            &[16]
        };
        let dy = Lazy::from(reductions::pseudo_random(dy_shape, 6));
        for backward in [false, true] {
            let handles = outputs(kernel, Way::Ops, &x, backward.then_some(&dy)).expect("outputs");
            let fusion = ovl::fusion(handles.as_slice(), 3).expect("fusion");
            assert_eq!(
                fusion.report.kernels_after,
                1,
                "{} (backward: {backward}):\n{}",
                kernel.name(),
                fusion.report
            );
        }
    }
}

#[test]
fn the_reference_is_the_textbook_formula() {
    // Independent of the reference's code: a 1 x 4 row worked by hand.
    let x = ndarray::array![[1.0f32, 2.0, 3.0, 4.0]];
    let dy = ndarray::array![[1.0f32, 0.0, 0.0, 0.0]].into_dyn();
    let (y, _) = reference(Kernel::Softmax, &x, &dy);
    let e: Vec<f64> = (1..=4).map(|v| (v as f64).exp()).collect();
    let s: f64 = e.iter().sum();
    for j in 0..4 {
        assert!((y[[0, j]] - e[j] / s).abs() < 1e-12);
    }
    let (y, _) = reference(Kernel::LayerNorm, &x, &dy);
    // mean 2.5, population variance 1.25.
    let inv = 1.0 / (1.25f64 + reductions::EPS as f64).sqrt();
    assert!((y[[0, 0]] - (-1.5 * inv)).abs() < 1e-12);
    let dy_row = ndarray::array![2.0f32].into_dyn();
    let (lse, dx) = reference(Kernel::LogSumExp, &x, &dy_row);
    assert!((lse[[0]] - s.ln()).abs() < 1e-12);
    assert!((dx[[0, 3]] - 2.0 * e[3] / s).abs() < 1e-12);
}

#[test]
fn the_check_rejects_a_wrong_value_a_nan_and_a_wrong_shape() {
    let want = ndarray::Array2::<f64>::from_elem((2, 3), 0.5).into_dyn();
    let mut got = ndarray::Array2::<f32>::from_elem((2, 3), 0.5).into_dyn();
    assert!(max_abs_error(&got, &want).1);
    got[[1, 2]] = 0.5 + 1e-3;
    let (err, ok) = max_abs_error(&got, &want);
    assert!(!ok && (err - 1e-3).abs() < 1e-6, "{err}");
    got[[1, 2]] = f32::NAN;
    assert!(!max_abs_error(&got, &want).1);
    let other = ndarray::Array2::<f32>::from_elem((3, 2), 0.5).into_dyn();
    assert!(!max_abs_error(&other, &want).1);
}

/// On the GPU each kernel's reductions along rows run cooperatively (`ovl_ir::cooperative`: a
/// warp or a block per row, by row length), forward and backward, at the benchmark's sizes;
/// the `CudaValidate` values (the interpreter in the CUDA order) match the f64 reference.
#[test]
fn every_kernel_reduces_its_rows_cooperatively_on_the_gpu() {
    for (rows, cols, width) in [
        (1024usize, 4096usize, 512u32),
        (8192, 1024, 128),
        (4, 300, 64),
    ] {
        let x = ArrayD::<f32>::zeros(ndarray::IxDyn(&[rows, cols]));
        for kernel in Kernel::ALL {
            for way in Way::ALL {
                for backward in [false, true] {
                    let xl = Lazy::from(x.clone());
                    let dshape = if kernel.keeps_shape() {
                        vec![rows, cols]
                    } else {
                        vec![rows]
                    };
                    let dyl = Lazy::from(ArrayD::<f32>::zeros(ndarray::IxDyn(&dshape)));
                    let handles = outputs(kernel, way, &xl, backward.then_some(&dyl)).unwrap();
                    let fused =
                        ovl::fusion_with(handles.as_slice(), &Options::cuda_validate()).unwrap();
                    let what = format!(
                        "{} {} {rows}x{cols} backward {backward}",
                        kernel.name(),
                        way.name()
                    );
                    let reducing: Vec<_> = fused
                        .after
                        .operators
                        .iter()
                        .filter(|op| {
                            op.expressions
                                .iter()
                                .any(|e| e.code == ovl_core::ir::Op::Accumulate as i32)
                        })
                        .collect();
                    assert!(!reducing.is_empty(), "{what}: no reduction");
                    for op in reducing {
                        let plan = ovl_core::cooperative::plan(op);
                        assert_eq!(
                            plan.map(|p| p.width),
                            Some(width),
                            "{what}: operator {}",
                            op.name
                        );
                    }
                }
            }
        }
    }
}

/// The benchmark's fused kernels as the GPU runs them (stdlib, forward and backward, a warp
/// and a block per row), pinned as golden files: each operator that cooperates, its IR as
/// protobuf bytes in hex, which `ovl-codegen/tests/codegen/cooperative.rs` runs under the CUDA
/// emulation against the interpreter in the CUDA order. `OVL_BLESS=1` rewrites them.
#[test]
fn the_fused_row_kernels_are_pinned_for_the_cuda_emulation() {
    let dir = "ovl-codegen/tests/golden/row_kernels";
    let mut names = Vec::new();
    for (rows, cols) in [(9usize, 40usize), (3, 300)] {
        let xl = Lazy::from(reductions::pseudo_random(&[rows, cols], 7));
        for kernel in Kernel::ALL {
            let dshape: &[usize] = if kernel.keeps_shape() {
                &[rows, cols]
            } else {
                &[rows]
            };
            let dyl = Lazy::from(reductions::pseudo_random(dshape, 8));
            for backward in [false, true] {
                let handles =
                    outputs(kernel, Way::Stdlib, &xl, backward.then_some(&dyl)).expect("outputs");
                let fused = ovl::fusion_with(handles.as_slice(), &Options::cuda_validate())
                    .expect("fusion")
                    .after;
                let pass = if backward { "backward" } else { "forward" };
                for (k, op) in fused.operators.iter().enumerate() {
                    if ovl_core::cooperative::plan(op).is_none() {
                        continue;
                    }
                    let hex: String = ovl::ir_tools::to_bytes(op)
                        .chunks(48)
                        .map(|line| ovl_core::hash::hex(line) + "\n")
                        .collect();
                    let name = format!("{}_{pass}_{rows}x{cols}_{k}.hex", kernel.name());
                    ovl_testkit::golden::assert_golden(format!("{dir}/{name}"), &hex);
                    names.push(name);
                }
            }
        }
    }
    assert!(names.len() >= 16, "{names:?}");
    ovl_testkit::golden::assert_only_files(dir, &names);
}
