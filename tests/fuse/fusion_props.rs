//! Property test of the merger: random operator DAGs built from a menu (elementwise,
//! split/concat, transpose, stencil, loop-carrying, broadcasts, reversed reads, row
//! reductions with accumulators read back by every element of their row, softmax-like rows
//! that fuse into one worker per row reusing `exp` across its loops) give bit-identical
//! results on the interpreter and generated C++, unfused and fused (with `exp`, whose f32
//! versions differ by up to an ulp between the two, each backend against itself), and fusion
//! never adds kernels.

use ndarray::Array2;
use ovl::prelude::*;
use proptest::prelude::*;

const N: usize = 4;

#[operator]
fn ew_add(x: Tensor<f32>, y: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = x[[p[0], p[1]]] + y[[p[0], p[1]]];
    out
}

#[operator]
fn ew_affine(x: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = x[[p[0], p[1]]] * 0.5 - 1.25;
    out
}

#[operator]
fn ew_exp(x: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = exp(x[[p[0], p[1]]] * 0.5);
    out
}

/// `x / s` with a `[rows, 1]` row statistic broadcast along the rows.
#[operator]
fn div_col(x: Tensor<f32>, s: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = x[[p[0], p[1]]] / s[[p[0], 0i64]];
    out
}

#[operator]
fn ew_max(x: Tensor<f32>, y: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = max(x[[p[0], p[1]]], y[[p[0], p[1]]]);
    out
}

/// Top and bottom halves of a matrix.
#[operator]
fn split_halves(x: Tensor<f32>) -> (Tensor<f32>, Tensor<f32>) {
    let [r, c] = x.dims::<2>();
    let h = r / 2;
    let p = position_in([h, c]);
    let top = output([h, c]);
    let bottom = output([h, c]);
    top[[p[0], p[1]]] = x[[p[0], p[1]]];
    bottom[[p[0], p[1]]] = x[[p[0] + h, p[1]]];
    (top, bottom)
}

/// Stacks two matrices vertically.
#[operator]
fn concat_halves(a: Tensor<f32>, b: Tensor<f32>) -> Tensor<f32> {
    let [h, c] = a.dims::<2>();
    let p = position_in([h, c]);
    let out = output([2 * h, c]);
    out[[p[0], p[1]]] = a[[p[0], p[1]]];
    out[[p[0] + h, p[1]]] = b[[p[0], p[1]]];
    out
}

#[operator]
fn transpose(x: Tensor<f32>) -> Tensor<f32> {
    let [r, c] = x.dims::<2>();
    let p = position_in([r, c]);
    let out = output([c, r]);
    out[[p[1], p[0]]] = x[[p[0], p[1]]];
    out
}

/// Each element plus its left neighbour (the first column copies).
#[operator]
fn stencil_left(x: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    if p[1] > 0 {
        out[[p[0], p[1]]] = x[[p[0], p[1]]] + x[[p[0], p[1] - 1]];
    } else {
        out[[p[0], p[1]]] = x[[p[0], p[1]]];
    }
    out
}

/// Running sum along each row (a loop-carried value).
#[operator]
fn cumsum_rows(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output_like(&x);
    let mut acc = variable(0.0f32);
    for j in 0..cols {
        acc += x[[r, j]];
        out[[r, j]] = acc;
    }
    out
}

/// The sum of each row as a `[rows, 1]` column (an accumulator).
#[operator]
fn row_sum(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows, 1]);
    let mut s = sum_of(0.0f32);
    for k in 0..cols {
        s += x[[r, k]];
    }
    out[[r, 0i64]] = s;
    out
}

/// The maximum of each row as a `[rows]` vector (an accumulator).
#[operator]
fn row_max(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows]);
    let mut m = max_of(x[[r, 0i64]]);
    for k in 1..cols {
        m.update(x[[r, k]]);
    }
    out[[r]] = m;
    out
}

/// `x - s` with a `[rows, 1]` row statistic broadcast along the rows.
#[operator]
fn sub_col(x: Tensor<f32>, s: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = x[[p[0], p[1]]] - s[[p[0], 0i64]];
    out
}

/// `x * v` with a `[rows]` vector broadcast along the columns (a transposed broadcast).
#[operator]
fn mul_row_vec(x: Tensor<f32>, v: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = x[[p[0], p[1]]] * v[[p[1]]];
    out
}

/// Each element plus row 0 of its column (every worker of a column reads one element).
#[operator]
fn add_first_row(x: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = x[[p[0], p[1]]] + x[[0i64, p[1]]];
    out
}

/// The rows in reverse order (a reversed read).
#[operator]
fn flip_rows(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, _] = x.dims::<2>();
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = x[[(rows as i64 - 1) - p[0], p[1]]];
    out
}

/// Each element scaled by its row's sum of squares: an accumulator, then a loop writing the row
/// (reads of `x` inside two staged loops).
#[operator]
fn row_scaled(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output_like(&x);
    let mut total = sum_of(0.0f32);
    for k in 0..cols {
        total += x[[r, k]] * x[[r, k]];
    }
    let t = total.get();
    for k in 0..cols {
        out[[r, k]] = x[[r, k]] * t;
    }
    out
}

/// One step of the random graph: a menu entry and two operand choices (taken modulo the
/// number of values built so far).
#[derive(Clone, Debug)]
struct Step {
    kind: u8,
    a: usize,
    b: usize,
}

fn build(steps: &[Step], extra: usize) -> Vec<Lazy<f32>> {
    let x = Array2::from_shape_fn((N, N), |(i, j)| ((i * 7 + j * 3) % 11) as f32 * 0.25 - 1.0);
    let y = Array2::from_shape_fn((N, N), |(i, j)| ((i * 5 + j * 2) % 9) as f32 * 0.5 - 2.0);
    let mut pool: Vec<Lazy<f32>> = vec![x.into(), y.into()];
    for s in steps {
        let a = pool[s.a % pool.len()].clone();
        let b = pool[s.b % pool.len()].clone();
        let v = match s.kind % 17 {
            0 => ew_add(&a, &b),
            1 => ew_affine(&a),
            2 => ew_max(&a, &b),
            3 => {
                let (top, bottom) = split_halves(&a);
                concat_halves(ew_affine(&bottom), &top)
            }
            4 => transpose(&a),
            5 => stencil_left(&a),
            6 => cumsum_rows(&a),
            7 => &a * &b - 0.5f32,
            8 => -&a,
            9 => sub_col(&a, row_sum(&b)),
            10 => mul_row_vec(&a, row_max(&b)),
            11 => add_first_row(&a),
            12 => flip_rows(&a),
            13 => row_scaled(&a),
            // Softmax's shape: a row statistic of a computed value divides that value (fused
            // into one worker per row that reuses the value across its loops).
            15 => {
                let e = ew_exp(&a);
                div_col(&e, row_sum(&e))
            }
            16 => div_col(ew_affine(&a), row_sum(ew_exp(&b))),
            _ => sub_col(&a, row_sum(&a)),
        };
        pool.push(v);
    }
    let last = pool.len() - 1;
    let mut outputs = vec![pool[last].clone()];
    let other = 2 + extra % (pool.len() - 2);
    if other != last {
        outputs.push(pool[other].clone());
    }
    outputs
}

fn same_bits(a: &ndarray::ArrayD<f32>, b: &ndarray::ArrayD<f32>) -> bool {
    a.shape() == b.shape()
        && a.iter()
            .zip(b.iter())
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

fn step() -> impl Strategy<Value = Step> {
    (0u8..17, 0usize..16, 0usize..16).prop_map(|(kind, a, b)| Step { kind, a, b })
}

proptest! {
    #![proptest_config(ProptestConfig {
        // OVL_PROP_CASES=500 for a longer run; the default keeps CI (2 cores) quick.
        cases: std::env::var("OVL_PROP_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn fused_equals_unfused_equals_interpreter(
        steps in proptest::collection::vec(step(), 2..8),
        extra in 0usize..16,
    ) {
        let outputs = build(&steps, extra);
        let outputs = outputs.as_slice();
        let reference = ovl::evaluate_with(outputs, &Options::interpreter().with_opt_level(0))
            .map_err(|e| TestCaseError::fail(format!("interpreter: {e}")))?;
        // f32 `exp` is the C library's in the interpreter and ovl's vectorizable one in C++
        // (within 1 ulp of each other, README): with it, C++ is compared with C++ unfused.
        let uses_exp = steps.iter().any(|s| s.kind % 17 >= 15);
        let cpp_reference = ovl::evaluate_with(outputs, &Options::cpu().with_opt_level(0))
            .map_err(|e| TestCaseError::fail(format!("C++ unfused: {e}")))?;
        let fusion = ovl::fusion(outputs, 3).map_err(|e| TestCaseError::fail(e.to_string()))?;
        // Refusals kept across the search's steps change nothing: re-planning every pair after
        // every merge makes the same graph.
        let replanned = ovl_fuse::fuse_replanning_every_step(
            &fusion.before,
            3.into(),
            ovl_fuse::RowReuse::Apply(ovl_fuse::RowBudget::CPU),
        )
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(replanned.after == fusion.after, "{}\n{}", replanned.report, fusion.report);
        prop_assert!(
            fusion.report.kernels_after <= fusion.report.kernels_before,
            "{}", fusion.report
        );
        prop_assert!(!fusion
            .report
            .refusals
            .iter()
            .any(|r| matches!(r.reason, ovl::Reason::InvalidMerge { .. })), "{}", fusion.report);
        let mut counts = Vec::new();
        for (name, options) in [
            ("interpreter fused", Options::interpreter()),
            ("C++ unfused", Options::cpu().with_opt_level(0)),
            ("C++ fused", Options::cpu()),
        ] {
            let (got, profile) = ovl::profile(outputs, &options, 1)
                .map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
            let reference = if uses_exp && name.starts_with("C++") {
                &cpp_reference
            } else {
                &reference
            };
            for (k, (g, r)) in got.iter().zip(reference).enumerate() {
                prop_assert!(same_bits(g, r), "{} output {}: {:?} vs {:?}\n{}", name, k, g, r, fusion.report);
            }
            counts.push(profile.kernel_count());
        }
        prop_assert_eq!(counts[1], fusion.report.kernels_before);
        prop_assert_eq!(counts[2], fusion.report.kernels_after);
        prop_assert!(counts[2] <= counts[1]);
        if std::env::var_os("OVL_PROP_VERBOSE").is_some() {
            eprintln!("{} -> {} kernels", counts[1], counts[2]);
        }
    }
}
