//! The reductions benchmark's layout cases, ovl side (issue 34): the four kernels (layer norm,
//! softmax, RMS norm, logsumexp) along axis 0 of a C-order `[4096, 1024]` f32 matrix, composed
//! from stdlib ops with keepdim statistics (1 kernel each, blocked column workers), and the
//! stdlib functions along the last axis of a `[1024, 4096]` matrix held in C order and in
//! Fortran order (`x.t().to_owned()` of a C-order `[4096, 1024]`). Each is compiled once
//! (`ovl::compile` on a placeholder) and timed three ways: the user's array made into a `Lazy`
//! at every call (`Lazy::from(&x)`, as a new user writes it), borrowed at every call
//! (`Compiled::run_views` with `FeedView::from(&x)`: read in place in C order, a tiled copy in
//! Fortran order; the result written into the destination in place), and fed once (the kernel
//! alone); and the input made alone (`Lazy::from(&x)`: a copy, or the tiled transpose).
//! Every result is checked against a plain-Rust f64 reference before timing.
//!
//! `cargo bench --bench reductions_layouts -- [--quick] [--out DIR]` writes
//! `DIR/ovl_layouts.json` (default `target/reductions-bench`); `benches/reductions_layouts_jax.py`
//! measures JAX jit on the same cases and `benches/reductions_layouts_report.py` writes the table
//! (`scripts/bench-reductions.sh` runs all three).

mod common;
#[path = "../tests/support/reductions.rs"]
mod reductions;

use common::{machine, time_calls, Args};
use ndarray::{Array2, ArrayD, Ix2};
use ovl::prelude::*;
use ovl::{FeedView, OutputView};
use reductions::{max_abs_error, ops_along, reference, Kernel};
use serde_json::json;

type BoxError = Box<dyn std::error::Error>;

/// How the kernel is applied.
#[derive(Clone, Copy)]
enum Case {
    /// From ops along axis 0 of a C-order `[4096, 1024]`.
    Axis0,
    /// The stdlib function along the last axis of `[1024, 4096]` in C order.
    LastC,
    /// The same, the array held in Fortran order.
    LastFortran,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Axis0 => "axis 0 of C-order [4096, 1024], from ops",
            Case::LastC => "last axis of C-order [1024, 4096], stdlib fn",
            Case::LastFortran => "last axis of Fortran-order [1024, 4096], stdlib fn",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Case::Axis0 => "axis0",
            Case::LastC => "last_c",
            Case::LastFortran => "last_fortran",
        }
    }
}

/// The same values on both sides: `x[i, j]` of the C-order `[4096, 1024]` matrix.
fn base() -> Array2<f32> {
    Array2::from_shape_fn((4096, 1024), |(i, j)| {
        (((i * 131 + j * 71) % 1009) as f32 / 1009.0) * 4.0 - 2.0
    })
}

/// The f64 reference of `kernel` applied as `case` to `x` (the array the case feeds).
fn expected(kernel: Kernel, case: Case, x: &Array2<f32>) -> ArrayD<f64> {
    let rows = match case {
        Case::Axis0 => x.t().as_standard_layout().to_owned(),
        _ => x.as_standard_layout().to_owned(),
    };
    let dy_shape = if kernel.keeps_shape() {
        vec![rows.nrows(), rows.ncols()]
    } else {
        vec![rows.nrows()]
    };
    let dy = ArrayD::<f32>::zeros(ndarray::IxDyn(&dy_shape));
    let (y, _) = reference(kernel, &rows, &dy);
    match (case, kernel.keeps_shape()) {
        (Case::Axis0, true) => y
            .into_dimensionality::<Ix2>()
            .expect("2-d")
            .t()
            .as_standard_layout()
            .to_owned()
            .into_dyn(),
        _ => y,
    }
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse("target/reductions-bench");
    let reps = if args.quick { 10 } else { 30 };
    std::fs::create_dir_all(&args.out_dir)?;
    let c = base();
    let xc = c.t().as_standard_layout().to_owned(); // [1024, 4096], C order
    let xf = c.t().to_owned(); // [1024, 4096], Fortran order
    assert!(xc.is_standard_layout() && !xf.is_standard_layout());
    println!("{}, best of {reps}", machine());
    let mut rows = Vec::new();
    for case in [Case::Axis0, Case::LastC, Case::LastFortran] {
        let x = match case {
            Case::Axis0 => &c,
            Case::LastC => &xc,
            Case::LastFortran => &xf,
        };
        for kernel in Kernel::ALL {
            let px = ovl::placeholder::<f32>("x", x.shape());
            let y = match case {
                Case::Axis0 => ops_along(kernel, &px, 0),
                _ => reductions::forward(kernel, reductions::Way::Stdlib, &px),
            };
            let step = ovl::compile(&vec![px.clone()], &vec![y.clone()], &Options::cpu())?;
            let mut dest = vec![ArrayD::<f32>::zeros(y.shape())];
            step.run_into(&[Lazy::from(x)][..], &mut dest)?;
            let (err, ok) = max_abs_error(&dest[0], &expected(kernel, case, x));
            if !ok {
                return Err(format!(
                    "{} {}: max abs error {err:e} vs the f64 reference",
                    kernel.name(),
                    case.name()
                )
                .into());
            }
            let per_call = time_calls(3, reps, || step.run_into(&[Lazy::from(x)][..], &mut dest))?;
            // Borrowed: the array read where it lies when in C order (a tiled copy per call
            // for Fortran order), the result written into `dest` in place.
            let borrowed = time_calls(3, reps, || {
                step.run_views(&[FeedView::from(x)], &mut [OutputView::from(&mut dest[0])])
            })?;
            let (err_b, ok_b) = max_abs_error(&dest[0], &expected(kernel, case, x));
            if !ok_b {
                return Err(format!(
                    "{} {} (borrowed): max abs error {err_b:e} vs the f64 reference",
                    kernel.name(),
                    case.name()
                )
                .into());
            }
            let fed = [Lazy::from(x)];
            let once = time_calls(3, reps, || step.run_into(&fed[..], &mut dest))?;
            // The input made alone (a copy in C order, the tiled transpose in Fortran order).
            let input = time_calls(3, reps, || {
                std::hint::black_box(Lazy::from(x));
                Ok::<(), BoxError>(())
            })?;
            let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
            println!(
                "{:<10} {:<52} per call {:7.3} ms   borrowed {:7.3} ms   fed once {:7.3} ms   input alone {:7.3} ms   max err {err:.1e}",
                kernel.name(),
                case.name(),
                ms(per_call.best),
                ms(borrowed.best),
                ms(once.best),
                ms(input.best)
            );
            rows.push(json!({
                "kernel": kernel.name(),
                "case": case.key(),
                "case_name": case.name(),
                "per_call_ms": ms(per_call.best),
                "borrowed_ms": ms(borrowed.best),
                "fed_once_ms": ms(once.best),
                "input_ms": ms(input.best),
                "max_abs_error": err,
            }));
        }
    }
    let doc = json!({ "machine": machine(), "repetitions": reps, "rows": rows });
    let path = args.out_dir.join("ovl_layouts.json");
    std::fs::write(&path, serde_json::to_string_pretty(&doc)?)?;
    println!("wrote {}", path.display());
    Ok(())
}
