//! A fault ends its worker: programs that walk out of bounds inside staged loops end with the
//! out-of-bounds error instead of looping forever (issue 17), on the interpreter and generated
//! C++, unfused and fused. Each evaluation runs on a watchdog thread, so that a regression fails
//! the test instead of hanging it.

use ndarray::{array, Array1, Array2};
use ovl::prelude::*;
use ovl_codegen::{Access, OutOfBounds, RunError};
use ovl_core::interp::InterpError;
use ovl_testkit::without_hang;

/// The reproducer: the index of the first negative element, found by a walk that
/// leaves the tensor when there is none.
#[operator]
fn first_negative(x: Tensor<f32>) -> Tensor<i64> {
    let _ = position_in([1]);
    let out = output::<i64>([1]);
    let mut j = variable(0i64);
    while x[[j]] >= 0.0 {
        j += 1;
    }
    out[[0]] = j;
    out
}

/// Per row: for a in 0..2, for b in 0..3, walk from 3a + b to the next negative element and
/// add where it stopped (a fault three loops deep when a walk leaves the row).
#[operator]
fn nested_walk(x: Tensor<f32>) -> Tensor<i64> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output::<i64>([rows]);
    let mut sum = variable(0i64);
    for a in 0..2i64 {
        for b in 0..3i64 {
            let mut k = variable(a * 3 + b);
            while x[[r, k]] >= 0.0 {
                k += 1;
            }
            sum += k;
        }
    }
    let _ = cols;
    out[[r]] = sum;
    out
}

/// Per row: the column of its first negative element (the walk leaves the row without one).
#[operator]
fn first_negative_per_row(x: Tensor<f32>) -> Tensor<i64> {
    let [rows, _] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output::<i64>([rows]);
    let mut j = variable(0i64);
    while x[[r, j]] >= 0.0 {
        j += 1;
    }
    out[[r]] = j;
    out
}

/// Elementwise `10 * y + 1`: fuses with its producer (same workgroup, same index).
#[operator]
fn scale(y: Tensor<i64>) -> Tensor<i64> {
    let i = position_in(y.shape())[0];
    let out = output_like(&y);
    out[[i]] = y[[i]] * 10 + 1;
    out
}

fn targets() -> [(&'static str, Options); 2] {
    [
        ("interpreter", Options::interpreter()),
        ("C++", Options::cpu()),
    ]
}

/// The out-of-bounds fault inside an evaluation error, whichever backend reported it.
fn out_of_bounds(e: &ovl::Error) -> &OutOfBounds {
    match e {
        ovl::Error::Interpreter(InterpError::IndexOutOfBounds(b)) => b,
        ovl::Error::Run(RunError::IndexOutOfBounds(b)) => b,
        other => panic!("expected an out-of-bounds error, got {other}"),
    }
}

/// The column of the first negative element of `row` at or after `start`.
fn first_negative_from(row: &[f32], start: usize) -> Option<usize> {
    (start..row.len()).find(|&k| row[k] < 0.0)
}

#[test]
fn the_reproducer_ends_with_its_out_of_bounds_error() {
    for (name, options) in targets() {
        let what = format!("first_negative on the {name}");
        let result = without_hang(&what, move || {
            ovl::evaluate_with(&first_negative(&array![1.0f32, 2.0, 3.0]), &options)
                .map_err(|e| (Box::new(out_of_bounds(&e).clone()), e.to_string()))
        });
        let (e, message) = result.expect_err(&what);
        assert_eq!(
            (e.operator.as_str(), e.access, e.tensor.as_str()),
            ("first_negative", Access::Read, "input 0"),
            "{what}"
        );
        assert_eq!((e.axis, e.index, e.size), (0, 3, 3), "{what}");
        assert_eq!(e.position, vec![0], "{what}");
        assert!(
            message.contains("index out of bounds") && message.contains("index 3"),
            "{what}: {message}"
        );
        // With a negative element, the same operator returns its index.
        let options = targets().into_iter().find(|t| t.0 == name).unwrap().1;
        let got = ovl::evaluate_with(&first_negative(&array![1.0f32, 2.0, -3.0]), &options)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(got, array![2i64].into_dyn(), "{what}");
    }
}

#[test]
fn a_fault_three_loops_deep_ends_with_its_error() {
    let rows = [
        [-1.0f32, 2.0, -3.0, 4.0, 5.0, -6.0, 7.0, -1.0],
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -1.0],
        [-1.0, 2.0, -3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    ];
    let x = Array2::from_shape_vec((4, 8), rows.concat()).unwrap();
    for (name, options) in targets() {
        let what = format!("nested_walk on the {name}");
        let x = x.clone();
        let e = without_hang(&what, move || {
            ovl::evaluate_with(&nested_walk(&x), &options)
                .map_err(|e| Box::new(out_of_bounds(&e).clone()))
        })
        .expect_err(&what);
        // Row 2's walk from 3 is the first to leave its row (row 3 leaves it too).
        assert_eq!(e.operator, "nested_walk", "{what}");
        assert_eq!(
            (e.axis, e.index, e.size, e.position.as_slice()),
            (1, 8, 8, &[2u64][..]),
            "{what}"
        );
    }
    // The rows that stay inside give the sums a plain loop computes.
    let good = Array2::from_shape_vec((2, 8), rows[..2].concat()).unwrap();
    let expected: Array1<i64> = rows[..2]
        .iter()
        .map(|r| {
            (0..2)
                .flat_map(|a| (0..3).map(move |b| 3 * a + b))
                .map(|s| first_negative_from(r, s).unwrap() as i64)
                .sum()
        })
        .collect();
    assert_eq!(expected, array![19i64, 42]);
    for (name, options) in targets() {
        let got = ovl::evaluate_with(&nested_walk(&good), &options)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, expected.clone().into_dyn(), "{name}");
    }
}

#[test]
fn a_fault_inside_a_fused_kernel_ends_with_its_error() {
    let good = array![[1.0f32, -2.0, 3.0], [-1.0, 0.0, 0.0], [0.0, 0.0, -0.5]];
    let expected: Array1<i64> = good
        .rows()
        .into_iter()
        .map(|r| first_negative_from(r.as_slice().unwrap(), 0).unwrap() as i64 * 10 + 1)
        .collect();
    assert_eq!(expected, array![11i64, 1, 21]);
    for (name, options) in targets() {
        // The two operators are one kernel; without a fault it computes what a loop does.
        let y = scale(first_negative_per_row(&good));
        let (got, profile) = ovl::profile(&y, &options, 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(profile.kernel_count(), 1, "{name}: {profile}");
        assert_eq!(got, expected.clone().into_dyn(), "{name}");

        // Row 1 has no negative element: its walk faults inside the fused kernel.
        let what = format!("the fused kernel on the {name}");
        let e = without_hang(&what, move || {
            let bad = array![[1.0f32, -2.0, 3.0], [1.0, 0.0, 0.0], [0.0, 0.0, -0.5]];
            let y = scale(first_negative_per_row(&bad));
            assert_eq!(
                ovl::fusion(&y, options.opt_level)
                    .unwrap()
                    .report
                    .kernels_after,
                1
            );
            ovl::evaluate_with(&y, &options).map_err(|e| Box::new(out_of_bounds(&e).clone()))
        })
        .expect_err(&what);
        assert!(
            e.operator.contains("first_negative_per_row"),
            "{what}: {}",
            e.operator
        );
        assert_eq!(
            (e.access, e.axis, e.index, e.size, e.position.as_slice()),
            (Access::Read, 1, 3, 3, &[1u64][..]),
            "{what}"
        );
    }
}
