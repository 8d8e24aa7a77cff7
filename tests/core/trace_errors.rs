//! Trace-time misuse: each mistake is reported by `evaluate` as an error that names the
//! operator and the user's source line, never as a panic.

use ndarray::Array1;
use ovl::prelude::*;

fn x4() -> Array1<f32> {
    Array1::from(vec![1.0, 2.0, 3.0, 4.0])
}

/// The line of this file marked `// error: {operator}` at its end, or preceded by a line
/// `// the next line is wrong: {operator}` (where rustfmt would move a trailing comment).
fn marked_line(operator: &str) -> usize {
    let marker = format!("// error: {operator}");
    let above = format!("// the next line is wrong: {operator}");
    let lines: Vec<&str> = include_str!("trace_errors.rs").lines().collect();
    let found: Vec<usize> = (0..lines.len())
        .filter(|&i| {
            lines[i].trim_end().ends_with(&marker) || (i > 0 && lines[i - 1].trim() == above)
        })
        .map(|i| i + 1)
        .collect();
    assert_eq!(found.len(), 1, "exactly one line must be marked `{marker}`");
    found[0]
}

/// Evaluates, expects a trace error, and checks it names `operator` and points into this file
/// at the line [`marked_line`] finds.
fn expect_error(result: Result<ndarray::ArrayD<f32>, ovl::Error>, operator: &str, words: &[&str]) {
    let line = marked_line(operator);
    let err = match result {
        Ok(v) => panic!("expected an error from `{operator}`, got {v}"),
        Err(e) => e,
    };
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("`{operator}`")),
        "operator not named: {msg}"
    );
    assert!(
        msg.contains(&format!("trace_errors.rs:{line}:")),
        "line {line} not named: {msg}"
    );
    for w in words {
        assert!(msg.contains(w), "`{w}` missing from: {msg}");
    }
    match err {
        ovl::Error::Trace(_) => {}
        other => panic!("expected a trace error, got {other:?}"),
    }
}

#[operator]
fn writes_input(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    x[[i]] = 1.0; // error: writes_input
    out[[i]] = 1.0;
    out
}

#[test]
fn writing_an_input() {
    expect_error(
        evaluate(&writes_input(x4())),
        "writes_input",
        &["read-only"],
    );
}

#[operator]
fn reads_output(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]];
    out[[i]] = out[[i]] * 2.0; // error: reads_output
    out
}

#[test]
fn reading_an_output() {
    expect_error(
        evaluate(&reads_output(x4())),
        "reads_output",
        &["write-only"],
    );
}

#[operator]
fn two_workgroups(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let _j = position_in([2]); // error: two_workgroups
    let out = output_like(&x);
    out[[i]] = 0.0;
    out
}

#[test]
fn a_second_position_in() {
    expect_error(
        evaluate(&two_workgroups(x4())),
        "two_workgroups",
        &["second time"],
    );
}

#[operator]
fn constant_out_of_bounds(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[4]]; // error: constant_out_of_bounds
    out
}

#[test]
fn a_constant_index_out_of_bounds() {
    expect_error(
        evaluate(&constant_out_of_bounds(x4())),
        "constant_out_of_bounds",
        &["out of bounds", "axis 0"],
    );
}

#[operator]
fn wrong_rank_index(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i, 0]]; // error: wrong_rank_index
    out
}

#[test]
fn indexing_with_the_wrong_number_of_indices() {
    expect_error(
        evaluate(&wrong_rank_index(x4())),
        "wrong_rank_index",
        &["rank 1", "2 indices"],
    );
}

#[operator]
fn literal_too_big(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let small = variable(0u8);
    out[[i]] = (small + 300).cast::<f32>(); // error: literal_too_big
    out
}

#[test]
fn a_literal_that_does_not_fit() {
    expect_error(
        evaluate(&literal_too_big(x4())),
        "literal_too_big",
        &["300", "u8"],
    );
}

#[operator]
fn rebinding_in_branch(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let mut m = x[[i]];
    if m < 0.0 {
        m = 0.0; // error: rebinding_in_branch
    }
    out[[i]] = m;
    out
}

#[test]
fn rebinding_a_staged_value_inside_a_staged_if() {
    expect_error(
        evaluate(&rebinding_in_branch(x4())),
        "rebinding_in_branch",
        &["variable"],
    );
}

#[operator]
fn value_escapes_loop(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let mut last = Vec::new();
    for k in 0..3 {
        last.push(x[[i]] * k as f32);
    }
    out[[i]] = last[0]; // error: value_escapes_loop
    out
}

#[test]
fn a_value_escaping_its_loop() {
    expect_error(
        evaluate(&value_escapes_loop(x4())),
        "value_escapes_loop",
        &["after that block"],
    );
}

#[operator]
fn no_workgroup(x: Tensor<f32>) -> Tensor<f32> {
    output_like(&x)
}

#[test]
fn a_missing_position_in() {
    let err = evaluate(&no_workgroup(x4())).expect_err("no workgroup");
    assert!(err.to_string().contains("position_in"), "{err}");
    assert!(err.to_string().contains("`no_workgroup`"), "{err}");
}

#[operator]
fn unreturned_output(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let _forgotten = output_like(&x);
    out[[i]] = 1.0;
    out
}

#[test]
fn an_output_that_is_not_returned() {
    let err = evaluate(&unreturned_output(x4())).expect_err("unreturned");
    assert!(err.to_string().contains("not returned"), "{err}");
}

#[operator]
fn break_in_staged_while(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let mut v = variable(x[[i]]);
    while v < 10.0 {
        v += 1.0;
        if true {
            break; // error: break_in_staged_while
        }
    }
    out[[i]] = v;
    out
}

#[test]
fn break_inside_a_staged_while() {
    expect_error(
        evaluate(&break_in_staged_while(x4())),
        "break_in_staged_while",
        &["break"],
    );
}

#[operator]
fn zero_step(x: Tensor<f32>, step: usize) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    // the next line is wrong: zero_step
    for _k in (0..4).step_by(step) {
        out[[i]] = 1.0;
    }
    out
}

#[test]
fn a_zero_loop_step() {
    expect_error(evaluate(&zero_step(x4(), 0)), "zero_step", &["step"]);
}

/// An error in one operator surfaces when a later operator that uses it is evaluated.
#[test]
fn errors_propagate_through_the_graph() {
    let bad = writes_input(x4());
    let err = evaluate(&reads_output_free(&bad)).expect_err("propagated");
    assert!(err.to_string().contains("`writes_input`"), "{err}");
}

#[operator]
fn reads_output_free(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]];
    out
}

#[operator]
fn break_out_of_staged_if(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let mut count = variable(0.0f32);
    #[unroll]
    for k in 0..3usize {
        // the next line is wrong: break_out_of_staged_if
        if x[[i]] > k as f32 {
            break;
        }
        count += 1.0;
    }
    out[[i]] = count;
    out
}

#[test]
fn break_out_of_a_staged_if_in_a_trace_time_loop() {
    expect_error(
        evaluate(&break_out_of_staged_if(x4())),
        "break_out_of_staged_if",
        &["`break`", "staged `if`", "flag"],
    );
}
