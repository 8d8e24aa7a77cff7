use super::*;
use crate::builder::{Builder, IN, LOC, OUT};
use crate::dtype::{DType, Literal};
use crate::host::Scalar;
use crate::ir::Op;

/// Zero-filled outputs of the declared types.
fn zero_outputs(dag: &ir::ExpressionDag) -> Vec<HostTensor> {
    dag.outputs
        .iter()
        .map(|t| {
            let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
            HostTensor::zeros(DType::from_ir(t.dtype).unwrap(), &shape)
        })
        .collect()
}

fn run_with(
    dag: &ir::ExpressionDag,
    inputs: &[HostTensor],
    threads: Option<usize>,
) -> (Result<(), InterpError>, Vec<HostTensor>) {
    let mut outputs = zero_outputs(dag);
    let refs: Vec<&HostTensor> = inputs.iter().collect();
    let r = interpret_with(
        dag,
        &refs,
        &mut outputs,
        &InterpOptions {
            threads,
            ..Default::default()
        },
    );
    (r, outputs)
}

fn run_ok(dag: &ir::ExpressionDag, inputs: &[HostTensor]) -> Vec<HostTensor> {
    let (r, out) = run_with(dag, inputs, None);
    r.unwrap();
    // The single-threaded run agrees.
    let (r1, out1) = run_with(dag, inputs, Some(1));
    r1.unwrap();
    // Compared through Debug so that NaN equals NaN.
    assert_eq!(format!("{out:?}"), format!("{out1:?}"));
    out
}

fn t<T: Scalar>(shape: &[usize], v: Vec<T>) -> HostTensor {
    HostTensor::from_vec(shape, v).unwrap()
}

fn vals<T: Scalar>(h: &HostTensor) -> Vec<T> {
    h.as_slice::<T>().unwrap().to_vec()
}

/// Evaluates `op(args...)` on constants of `T` in a one-worker operator and returns the result.
fn scalar_op<T: Scalar, R: Scalar>(op: Op, args: &[T]) -> R {
    let mut b = Builder::new("scalar", &[1]);
    let ids: Vec<u32> = args
        .iter()
        .map(|a| b.constant(T::DTYPE, a.to_literal()))
        .collect();
    let r = b.op(op, &ids);
    b.output(R::DTYPE, &[]);
    b.write(OUT, 0, &[], r);
    let out = run_ok(&b.build(), &[]);
    vals::<R>(&out[0])[0]
}

fn cast_to<T: Scalar, R: Scalar>(x: T) -> R {
    let mut b = Builder::new("cast", &[1]);
    let c = b.constant(T::DTYPE, x.to_literal());
    let r = b.cast(c, R::DTYPE);
    b.output(R::DTYPE, &[1]);
    let z = b.i64(0);
    b.write(OUT, 0, &[z], r);
    let out = run_ok(&b.build(), &[]);
    vals::<R>(&out[0])[0]
}

fn bits_eq(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits()
}

// ---------------------------------------------------------------- programs

#[test]
fn elementwise_add_2d() {
    let mut b = Builder::new("add", &[3, 4]);
    b.input(DType::F32, &[3, 4]);
    b.input(DType::F32, &[3, 4]);
    b.output(DType::F32, &[3, 4]);
    let i = b.position(0);
    let j = b.position(1);
    let x = b.read(IN, 0, &[i, j]);
    let y = b.read(IN, 1, &[i, j]);
    let s = b.op(Op::Add, &[x, y]);
    b.write(OUT, 0, &[i, j], s);
    let dag = b.build();
    let x: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let y: Vec<f32> = (0..12).map(|v| 0.5 * v as f32).collect();
    let out = run_ok(&dag, &[t(&[3, 4], x.clone()), t(&[3, 4], y.clone())]);
    let expected: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
    assert_eq!(vals::<f32>(&out[0]), expected);
}

#[test]
fn many_threads_agree_with_one() {
    let (rows, cols) = (257u64, 129u64);
    let mut b = Builder::new("affine", &[rows, cols]);
    b.input(DType::I64, &[rows, cols]);
    b.output(DType::I64, &[rows, cols]);
    b.output(DType::Bool, &[rows, cols]);
    let i = b.position(0);
    let j = b.position(1);
    let x = b.read(IN, 0, &[i, j]);
    let k = b.i64(3);
    let y = b.op(Op::Mul, &[x, k]);
    let z = b.op(Op::Sub, &[y, j]);
    b.write(OUT, 0, &[i, j], z);
    let two = b.i64(2);
    let m = b.op(Op::Mod, &[x, two]);
    let zero = b.i64(0);
    let even = b.op(Op::Eq, &[m, zero]);
    b.write(OUT, 1, &[i, j], even);
    let dag = b.build();
    let n = (rows * cols) as usize;
    let x: Vec<i64> = (0..n as i64).map(|v| v * 7 - 1000).collect();
    let input = [t(&[rows as usize, cols as usize], x.clone())];
    let (r1, one) = run_with(&dag, &input, Some(1));
    let (r4, four) = run_with(&dag, &input, Some(4));
    let (r7, seven) = run_with(&dag, &input, Some(7));
    r1.unwrap();
    r4.unwrap();
    r7.unwrap();
    assert_eq!(one, four);
    assert_eq!(one, seven);
    let got = vals::<i64>(&one[0]);
    for (k, v) in x.iter().enumerate() {
        assert_eq!(got[k], v * 3 - (k as i64 % cols as i64));
        assert_eq!(vals::<bool>(&one[1])[k], v % 2 == 0);
    }
}

/// Running sum along each row, one worker per row.
fn cumsum(rows: u64, cols: u64) -> ir::ExpressionDag {
    let mut b = Builder::new("cumsum_rows", &[rows]);
    b.input(DType::F32, &[rows, cols]);
    b.output(DType::F32, &[rows, cols]);
    let row = b.position(0);
    let zero = b.f32(0.0);
    let acc = b.var(zero);
    let (s, e, st) = (b.i64(0), b.i64(cols as i64), b.i64(1));
    let j = b.range(s, e, st);
    let x = b.read(IN, 0, &[row, j]);
    let sum = b.op(Op::Add, &[acc, x]);
    b.assign(acc, sum);
    b.write(OUT, 0, &[row, j], acc);
    b.end_range();
    b.build()
}

#[test]
fn cumsum_with_range_and_variable() {
    let dag = cumsum(3, 5);
    let x: Vec<f32> = (0..15).map(|v| v as f32 - 4.0).collect();
    let out = run_ok(&dag, &[t(&[3, 5], x.clone())]);
    let mut expected = vec![0.0f32; 15];
    for r in 0..3 {
        let mut acc = 0.0f32;
        for c in 0..5 {
            acc += x[r * 5 + c];
            expected[r * 5 + c] = acc;
        }
    }
    assert_eq!(vals::<f32>(&out[0]), expected);
}

#[test]
fn if_else_branches() {
    // y = x < 0 ? -x : 2 * x, plus a nested if without else that adds 100 when x == 3.
    let mut b = Builder::new("branches", &[6]);
    b.input(DType::I32, &[6]);
    b.output(DType::I32, &[6]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let zero = b.i32(0);
    let neg = b.op(Op::Lt, &[x, zero]);
    let res = b.var(zero);
    b.if_(neg);
    let nx = b.op(Op::Neg, &[x]);
    b.assign(res, nx);
    b.else_();
    let two = b.i32(2);
    let d = b.op(Op::Mul, &[x, two]);
    b.assign(res, d);
    let three = b.i32(3);
    let is3 = b.op(Op::Eq, &[x, three]);
    b.if_(is3);
    let h = b.i32(100);
    let plus = b.op(Op::Add, &[res, h]);
    b.assign(res, plus);
    b.end_if();
    b.end_if();
    b.write(OUT, 0, &[i], res);
    let out = run_ok(&b.build(), &[t(&[6], vec![-2, -1, 0, 1, 3, 5])]);
    assert_eq!(vals::<i32>(&out[0]), vec![2, 1, 0, 2, 106, 10]);
}

#[test]
fn while_loop_collatz_steps() {
    // steps(n): how many collatz steps from n = position + 1 to 1.
    let mut b = Builder::new("collatz", &[10]);
    b.output(DType::I64, &[10]);
    let p = b.position(0);
    let one = b.i64(1);
    let n0 = b.op(Op::Add, &[p, one]);
    let n = b.var(n0);
    let zero = b.i64(0);
    let steps = b.var(zero);
    b.while_begin();
    let go = b.op(Op::Gt, &[n, one]);
    b.while_cond(go);
    let two = b.i64(2);
    let m = b.op(Op::Mod, &[n, two]);
    let even = b.op(Op::Eq, &[m, zero]);
    b.if_(even);
    let h = b.op(Op::Div, &[n, two]);
    b.assign(n, h);
    b.else_();
    let three = b.i64(3);
    let t3 = b.op(Op::Mul, &[n, three]);
    let t31 = b.op(Op::Add, &[t3, one]);
    b.assign(n, t31);
    b.end_if();
    // A condition value is visible (and current) in the body.
    let s1 = b.op(Op::Add, &[steps, one]);
    let s_cast = b.cast(go, DType::I64);
    let s2 = b.op(Op::Mul, &[s1, s_cast]);
    b.assign(steps, s2);
    b.while_end();
    b.write(OUT, 0, &[p], steps);
    let out = run_ok(&b.build(), &[]);
    let expected: Vec<i64> = (1..=10)
        .map(|mut n: i64| {
            let mut s = 0;
            while n > 1 {
                n = if n % 2 == 0 { n / 2 } else { 3 * n + 1 };
                s += 1;
            }
            s
        })
        .collect();
    assert_eq!(vals::<i64>(&out[0]), expected);
}

#[test]
fn while_that_never_runs() {
    let mut b = Builder::new("w", &[2]);
    b.output(DType::I32, &[2]);
    let p = b.position(0);
    let v = b.i32(5);
    let var = b.var(v);
    b.while_begin();
    let f = b.boolean(false);
    b.while_cond(f);
    let z = b.i32(0);
    b.assign(var, z);
    b.while_end();
    b.write(OUT, 0, &[p], var);
    let out = run_ok(&b.build(), &[]);
    assert_eq!(vals::<i32>(&out[0]), vec![5, 5]);
}

#[test]
fn local_tensor_reverses_rows_and_is_reinitialized_per_worker() {
    // Each worker copies its row into a local (filled with -1 first), reverses it on output,
    // and worker 0 additionally writes 99 into local[0] after the copy: no other worker may
    // see it, because LOCAL_TENSOR re-fills the buffer.
    let (rows, cols) = (3u64, 4u64);
    let mut b = Builder::new("reverse", &[rows]);
    b.input(DType::I16, &[rows, cols]);
    b.output(DType::I16, &[rows, cols]);
    b.output(DType::I16, &[rows]);
    let l = b.local(DType::I16, &[cols + 1], Literal::Int(-1));
    let r = b.position(0);
    let (s, e, st) = (b.i64(0), b.i64(cols as i64), b.i64(1));
    // Read the untouched last element before anything else: the fill value.
    let last = b.i64(cols as i64);
    let fill = b.read(LOC, l, &[last]);
    b.write(OUT, 1, &[r], fill);
    let j = b.range(s, e, st);
    let x = b.read(IN, 0, &[r, j]);
    b.write(LOC, l, &[j], x);
    b.end_range();
    let zero = b.i64(0);
    let is0 = b.op(Op::Eq, &[r, zero]);
    b.if_(is0);
    let k = b.constant(DType::I16, Literal::Int(99));
    b.write(LOC, l, &[last], k);
    b.end_if();
    let j = b.range(s, e, st);
    let cm1 = b.i64(cols as i64 - 1);
    let rj = b.op(Op::Sub, &[cm1, j]);
    let v = b.read(LOC, l, &[rj]);
    b.write(OUT, 0, &[r, j], v);
    b.end_range();
    let x: Vec<i16> = (0..12).collect();
    let out = run_ok(&b.build(), &[t(&[3, 4], x)]);
    assert_eq!(
        vals::<i16>(&out[0]),
        vec![3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8]
    );
    assert_eq!(vals::<i16>(&out[1]), vec![-1, -1, -1]);
}

#[test]
fn local_initialized_in_a_branch_not_taken_reads_zero() {
    let mut b = Builder::new("branch_local", &[3]);
    b.output(DType::F64, &[3]);
    let p = b.position(0);
    let one = b.i64(1);
    let is1 = b.op(Op::Eq, &[p, one]);
    b.if_(is1);
    let l = b.local(DType::F64, &[2], Literal::Float(4.5));
    b.end_if();
    let z = b.i64(0);
    let v = b.read(LOC, l, &[z]);
    b.write(OUT, 0, &[p], v);
    let out = run_with(&b.build(), &[], Some(1));
    out.0.unwrap();
    assert_eq!(vals::<f64>(&out.1[0]), vec![0.0, 4.5, 0.0]);
}

#[test]
fn variable_redeclared_in_a_loop_restarts() {
    // for j in 0..3 { let v = variable(10); v += j; out[j] = v }  ->  10, 11, 12
    let mut b = Builder::new("redeclare", &[1]);
    b.output(DType::I64, &[3]);
    let (s, e, st) = (b.i64(0), b.i64(3), b.i64(1));
    let ten = b.i64(10);
    let j = b.range(s, e, st);
    let v = b.var(ten);
    let w = b.op(Op::Add, &[v, j]);
    b.assign(v, w);
    b.write(OUT, 0, &[j], v);
    b.end_range();
    let out = run_ok(&b.build(), &[]);
    assert_eq!(vals::<i64>(&out[0]), vec![10, 11, 12]);
}

#[test]
fn values_are_computed_at_their_program_point() {
    // v = 1; t = v + 1 (before the loop); loop 3 times { v = v * 2 }; out = [t, v]
    let mut b = Builder::new("ssa", &[1]);
    b.output(DType::I32, &[2]);
    let one = b.i32(1);
    let v = b.var(one);
    let tt = b.op(Op::Add, &[v, one]);
    let (s, e, st) = (b.i64(0), b.i64(3), b.i64(1));
    b.range(s, e, st);
    let two = b.i32(2);
    let d = b.op(Op::Mul, &[v, two]);
    b.assign(v, d);
    b.end_range();
    let (z, o) = (b.i64(0), b.i64(1));
    b.write(OUT, 0, &[z], tt);
    b.write(OUT, 0, &[o], v);
    let out = run_ok(&b.build(), &[]);
    assert_eq!(vals::<i32>(&out[0]), vec![2, 8]);
}

#[test]
fn nested_ranges_matmul() {
    let dag = ovl_ir::fixtures::matmul(3, 4, 2);
    let a: Vec<f64> = (0..12).map(|v| v as f64).collect();
    let bm: Vec<f64> = (0..8).map(|v| 1.0 + v as f64).collect();
    let out = run_ok(&dag, &[t(&[3, 4], a.clone()), t(&[4, 2], bm.clone())]);
    let mut expected = vec![0.0; 6];
    for i in 0..3 {
        for j in 0..2 {
            expected[i * 2 + j] = (0..4).map(|q| a[i * 4 + q] * bm[q * 2 + j]).sum();
        }
    }
    assert_eq!(vals::<f64>(&out[0]), expected);
}

#[test]
fn range_steps_and_bounds() {
    // Sum of i for i in start..end step st, for several (start, end, step) from the input.
    let mut b = Builder::new("ranges", &[4]);
    b.input(DType::I64, &[4, 3]);
    b.output(DType::I64, &[4]);
    b.output(DType::I64, &[4]);
    let p = b.position(0);
    let (c0, c1, c2) = (b.i64(0), b.i64(1), b.i64(2));
    let s = b.read(IN, 0, &[p, c0]);
    let e = b.read(IN, 0, &[p, c1]);
    let st = b.read(IN, 0, &[p, c2]);
    let acc = b.var(c0);
    let count = b.var(c0);
    let i = b.range(s, e, st);
    let a = b.op(Op::Add, &[acc, i]);
    b.assign(acc, a);
    let c = b.op(Op::Add, &[count, c1]);
    b.assign(count, c);
    b.end_range();
    b.write(OUT, 0, &[p], acc);
    b.write(OUT, 1, &[p], count);
    let max = i64::MAX;
    let input = t(&[4, 3], vec![0, 10, 3, 5, 5, 1, 7, 2, 1, max - 3, max, 2]);
    let out = run_ok(&b.build(), &[input]);
    let big = (max - 3).wrapping_add(max - 1);
    assert_eq!(vals::<i64>(&out[0]), vec![18, 0, 0, big]);
    assert_eq!(vals::<i64>(&out[1]), vec![4, 0, 0, 2]);
}

#[test]
fn non_positive_step_is_an_error_and_ends_the_worker() {
    let mut b = Builder::new("bad_step", &[3]);
    b.input(DType::I64, &[3]);
    b.output(DType::I64, &[3]);
    let p = b.position(0);
    let st = b.read(IN, 0, &[p]);
    let (s, e, one) = (b.i64(0), b.i64(4), b.i64(1));
    let count = b.var(s);
    b.range(s, e, st);
    let c = b.op(Op::Add, &[count, one]);
    b.assign(count, c);
    b.end_range();
    b.write(OUT, 0, &[p], count);
    let dag = b.build();
    let (r, out) = run_with(&dag, &[t(&[3], vec![2i64, 0, -1])], Some(1));
    assert_eq!(vals::<i64>(&out[0]), vec![2, 0, 0]);
    match r {
        Err(InterpError::NonPositiveStep(fault)) => {
            let NonPositiveStep {
                operator,
                expression,
                step,
                position,
                ..
            } = *fault;
            assert_eq!(operator, "bad_step");
            assert_eq!(expression, 6);
            assert_eq!(step, 0);
            assert_eq!(position, vec![1]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn rank_zero_tensors() {
    let mut b = Builder::new("scalar_io", &[1]);
    b.input(DType::U64, &[]);
    b.output(DType::U64, &[]);
    let x = b.read(IN, 0, &[]);
    let y = b.op(Op::Add, &[x, x]);
    b.write(OUT, 0, &[], y);
    let out = run_ok(&b.build(), &[t(&[], vec![u64::MAX])]);
    assert_eq!(vals::<u64>(&out[0]), vec![u64::MAX - 1]);
}

#[test]
fn single_thread_runs_workers_in_row_major_order() {
    // Every worker writes its linear index to out[0]: the last worker wins.
    let mut b = Builder::new("last_wins", &[3, 5]);
    b.output(DType::I64, &[1]);
    let i = b.position(0);
    let j = b.position(1);
    let five = b.i64(5);
    let r = b.op(Op::Mul, &[i, five]);
    let lin = b.op(Op::Add, &[r, j]);
    let z = b.i64(0);
    b.write(OUT, 0, &[z], lin);
    let (r, out) = run_with(&b.build(), &[], Some(1));
    r.unwrap();
    assert_eq!(vals::<i64>(&out[0]), vec![14]);
}

#[test]
fn indices_of_any_integer_dtype() {
    let mut b = Builder::new("idx", &[4]);
    b.input(DType::I8, &[4]);
    b.output(DType::I8, &[4]);
    let p = b.position(0);
    let pu8 = b.cast(p, DType::U8);
    let pi16 = b.cast(p, DType::I16);
    let x = b.read(IN, 0, &[pu8]);
    b.write(OUT, 0, &[pi16], x);
    let out = run_ok(&b.build(), &[t(&[4], vec![1i8, -2, 3, -4])]);
    assert_eq!(vals::<i8>(&out[0]), vec![1, -2, 3, -4]);
}

// ---------------------------------------------------------------- errors

#[test]
fn out_of_bounds_read_ends_the_worker_and_reports_the_first_worker() {
    // out[p] = x[p + 2] on 6 workers, x has 6 elements: workers 4 and 5 read outside.
    let mut b = Builder::new("shift", &[2, 3]);
    b.input(DType::F32, &[6]);
    b.output(DType::F32, &[6]);
    let i = b.position(0);
    let j = b.position(1);
    let three = b.i64(3);
    let r = b.op(Op::Mul, &[i, three]);
    let lin = b.op(Op::Add, &[r, j]);
    let two = b.i64(2);
    let src = b.op(Op::Add, &[lin, two]);
    let x = b.read(IN, 0, &[src]);
    b.write(OUT, 0, &[lin], x);
    let dag = b.build();
    let input = [t(&[6], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])];
    for threads in [Some(1), Some(2), Some(6), None] {
        let (res, out) = run_with(&dag, &input, threads);
        assert_eq!(vals::<f32>(&out[0]), vec![3.0, 4.0, 5.0, 6.0, 0.0, 0.0]);
        let err = res.unwrap_err();
        assert_eq!(
            err,
            InterpError::IndexOutOfBounds(Box::new(OutOfBounds {
                operator: "shift".into(),
                defined_at: "src/ops.rs:12".into(),
                expression: 7,
                access: Access::Read,
                tensor: "input 0".into(),
                axis: 0,
                index: 6,
                size: 6,
                position: vec![1, 1],
            }))
        );
        let msg = err.to_string();
        assert!(msg.contains("shift") && msg.contains("input 0") && msg.contains("[1, 1]"));
        assert!(
            msg.contains("index 6 on axis 0") && msg.contains("size 6"),
            "{msg}"
        );
    }
}

#[test]
fn out_of_bounds_write_does_not_happen_negative_and_huge_indices() {
    // Worker p writes 9 to out[p - shift, col[p]].
    fn make(shift: i64) -> ir::ExpressionDag {
        let mut b = Builder::new("oob_write", &[3]);
        b.input(DType::U64, &[3]);
        b.output(DType::U8, &[3, 2]);
        let p = b.position(0);
        let col = b.read(IN, 0, &[p]);
        let k = b.i64(shift);
        let row = b.op(Op::Sub, &[p, k]);
        let v = b.constant(DType::U8, Literal::UInt(9));
        b.write(OUT, 0, &[row, col], v);
        b.build()
    }
    let cols = [t(&[3], vec![0u64, 1, u64::MAX])];
    let (res, out) = run_with(&make(1), &cols, Some(1));
    assert_eq!(vals::<u8>(&out[0]), vec![0, 9, 0, 0, 0, 0]);
    match res.unwrap_err() {
        InterpError::IndexOutOfBounds(e) => {
            assert_eq!(e.access, Access::Write);
            assert_eq!(e.tensor, "output 0");
            assert_eq!((e.axis, e.index, e.size), (0, -1, 3));
            assert_eq!(e.position, vec![0]);
            assert!(
                e.to_string().ends_with("guard the write with an `if`"),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Only worker 2 is outside, on axis 1, with an index beyond i64.
    let (res, out) = run_with(&make(0), &cols, Some(1));
    assert_eq!(vals::<u8>(&out[0]), vec![9, 0, 0, 9, 0, 0]);
    match res.unwrap_err() {
        InterpError::IndexOutOfBounds(e) => {
            assert_eq!((e.axis, e.index), (1, u64::MAX as i128));
            assert_eq!(e.position, vec![2]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_fault_ends_the_worker_and_exits_its_loops() {
    // Per worker p: out0[p] = 1; for a in 0..2 { while x[k] >= 0 { k += 1 } } (k from p);
    // out1[p] = k. Worker 2 finds no negative element at or after 2: its walk reads x[3], a
    // fault that (unless it ends the worker) repeats forever.
    let mut b = Builder::new("walk", &[3]);
    b.input(DType::F32, &[3]);
    b.output(DType::I64, &[3]);
    b.output(DType::I64, &[3]);
    let p = b.position(0);
    let (zero, one, two) = (b.i64(0), b.i64(1), b.i64(2));
    b.write(OUT, 0, &[p], one);
    let k = b.var(p);
    b.range(zero, two, one);
    b.while_begin();
    let x = b.read(IN, 0, &[k]);
    let z = b.f32(0.0);
    let c = b.op(Op::Ge, &[x, z]);
    b.while_cond(c);
    let next = b.op(Op::Add, &[k, one]);
    b.assign(k, next);
    b.while_end();
    b.end_range();
    b.write(OUT, 1, &[p], k);
    let dag = b.build();
    for threads in [Some(1), Some(3)] {
        let (res, out) = run_with(&dag, &[t(&[3], vec![2.0f32, -1.0, 3.0])], threads);
        assert_eq!(vals::<i64>(&out[0]), vec![1, 1, 1]);
        assert_eq!(vals::<i64>(&out[1]), vec![1, 1, 0]);
        match res {
            Err(InterpError::IndexOutOfBounds(e)) => {
                assert_eq!(
                    (e.index, e.size, e.position.as_slice()),
                    (3, 3, &[2u64][..])
                );
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn out_of_bounds_local() {
    let mut b = Builder::new("oob_local", &[1]);
    b.output(DType::I32, &[1]);
    let l = b.local(DType::I32, &[2], Literal::Int(4));
    let k = b.i64(2);
    let v = b.read(LOC, l, &[k]);
    let z = b.i64(0);
    b.write(OUT, 0, &[z], v);
    let (res, out) = run_with(&b.build(), &[], None);
    assert_eq!(vals::<i32>(&out[0]), vec![0]);
    match res {
        Err(InterpError::IndexOutOfBounds(e)) => {
            assert_eq!((e.tensor.as_str(), e.index, e.size), ("local 0", 2, 2));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn mismatched_tensors_are_reported() {
    let dag = cumsum(2, 3);
    let good = t(&[2, 3], vec![0f32; 6]);
    let mut outs = zero_outputs(&dag);

    let e = interpret(&dag, &[], &mut outs).unwrap_err();
    assert_eq!(
        e,
        InterpError::TensorCount {
            operator: "cumsum_rows".into(),
            kind: "input",
            expected: 1,
            got: 0
        }
    );
    let bad_dtype = t(&[2, 3], vec![0f64; 6]);
    let e = interpret(&dag, &[&bad_dtype], &mut outs).unwrap_err();
    assert_eq!(
        e.to_string(),
        "operator `cumsum_rows`: input 0 must be f32[2, 3], but the tensor passed is f64[2, 3]"
    );
    let bad_shape = t(&[3, 2], vec![0f32; 6]);
    assert!(matches!(
        interpret(&dag, &[&bad_shape], &mut outs),
        Err(InterpError::TensorType { .. })
    ));
    let inconsistent = HostTensor {
        shape: vec![2, 3],
        data: TensorData::F32(vec![0.0; 5]),
    };
    let e = interpret(&dag, &[&inconsistent], &mut outs).unwrap_err();
    assert!(e.to_string().contains("holding 5 elements"), "{e}");
    let mut no_outs: Vec<HostTensor> = vec![];
    assert!(matches!(
        interpret(&dag, &[&good], &mut no_outs),
        Err(InterpError::TensorCount { kind: "output", .. })
    ));
    let mut wrong_out = vec![HostTensor::zeros(DType::F32, &[6])];
    let e = interpret(&dag, &[&good], &mut wrong_out).unwrap_err();
    assert!(e.to_string().contains("output 0 must be f32[2, 3]"), "{e}");
    interpret(&dag, &[&good], &mut outs).unwrap();
}

#[test]
fn invalid_ir_is_rejected_not_run() {
    let mut dag = cumsum(2, 3);
    dag.version = 99;
    let good = t(&[2, 3], vec![0f32; 6]);
    let mut outs = zero_outputs(&dag);
    let e = interpret(&dag, &[&good], &mut outs).unwrap_err();
    assert!(matches!(
        e,
        InterpError::Invalid(ValidationError::Version { found: 99, .. })
    ));
    let mut dag = cumsum(2, 3);
    dag.expressions[2].operands[0] = 50;
    assert!(matches!(
        interpret(&dag, &[&good], &mut outs),
        Err(InterpError::Invalid(ValidationError::Expression {
            index: 2,
            ..
        }))
    ));
}

// ---------------------------------------------------------------- integer semantics

#[test]
fn integer_arithmetic_wraps() {
    assert_eq!(scalar_op::<i32, i32>(Op::Add, &[i32::MAX, 1]), i32::MIN);
    assert_eq!(scalar_op::<i32, i32>(Op::Sub, &[i32::MIN, 1]), i32::MAX);
    assert_eq!(scalar_op::<u8, u8>(Op::Mul, &[200, 2]), 144);
    assert_eq!(scalar_op::<u8, u8>(Op::Sub, &[0, 1]), 255);
    assert_eq!(scalar_op::<i8, i8>(Op::Mul, &[-128, -1]), -128);
    assert_eq!(scalar_op::<i64, i64>(Op::Mul, &[i64::MAX, 2]), -2);
    assert_eq!(scalar_op::<u64, u64>(Op::Add, &[u64::MAX, 2]), 1);
    assert_eq!(scalar_op::<u16, u16>(Op::Add, &[65535, 1]), 0);
}

#[test]
fn integer_division_and_modulo() {
    assert_eq!(scalar_op::<i32, i32>(Op::Div, &[7, 0]), 0);
    assert_eq!(scalar_op::<i32, i32>(Op::Mod, &[7, 0]), 0);
    assert_eq!(scalar_op::<u32, u32>(Op::Div, &[7, 0]), 0);
    assert_eq!(scalar_op::<u32, u32>(Op::Mod, &[7, 0]), 0);
    assert_eq!(scalar_op::<i32, i32>(Op::Div, &[i32::MIN, -1]), i32::MIN);
    assert_eq!(scalar_op::<i32, i32>(Op::Mod, &[i32::MIN, -1]), 0);
    assert_eq!(scalar_op::<i64, i64>(Op::Div, &[i64::MIN, -1]), i64::MIN);
    assert_eq!(scalar_op::<i64, i64>(Op::Mod, &[i64::MIN, -1]), 0);
    assert_eq!(scalar_op::<i8, i8>(Op::Div, &[i8::MIN, -1]), i8::MIN);
    assert_eq!(scalar_op::<i16, i16>(Op::Mod, &[i16::MIN, -1]), 0);
    // Rounds toward zero; the remainder has the dividend's sign.
    assert_eq!(scalar_op::<i32, i32>(Op::Div, &[-7, 2]), -3);
    assert_eq!(scalar_op::<i32, i32>(Op::Mod, &[-7, 3]), -1);
    assert_eq!(scalar_op::<i32, i32>(Op::Mod, &[7, -3]), 1);
    assert_eq!(scalar_op::<i32, i32>(Op::Div, &[7, -3]), -2);
    assert_eq!(scalar_op::<u8, u8>(Op::Mod, &[250, 7]), 5);
}

#[test]
fn integer_min_max_neg_abs_not() {
    assert_eq!(scalar_op::<i32, i32>(Op::Min, &[-3, 2]), -3);
    assert_eq!(scalar_op::<u64, u64>(Op::Max, &[u64::MAX, 2]), u64::MAX);
    assert_eq!(scalar_op::<i32, i32>(Op::Abs, &[i32::MIN]), i32::MIN);
    assert_eq!(scalar_op::<i8, i8>(Op::Abs, &[-5]), 5);
    assert_eq!(scalar_op::<u8, u8>(Op::Abs, &[200]), 200);
    assert_eq!(scalar_op::<u8, u8>(Op::Neg, &[1]), 255);
    assert_eq!(scalar_op::<u32, u32>(Op::Neg, &[0]), 0);
    assert_eq!(scalar_op::<i64, i64>(Op::Neg, &[i64::MIN]), i64::MIN);
    assert_eq!(scalar_op::<i32, i32>(Op::Not, &[5]), -6);
    assert_eq!(scalar_op::<u8, u8>(Op::Not, &[0x0f]), 0xf0);
    assert!(!scalar_op::<bool, bool>(Op::Not, &[true]));
    assert!(scalar_op::<bool, bool>(Op::Not, &[false]));
}

#[test]
fn comparisons_and_logic() {
    assert!(scalar_op::<i32, bool>(Op::Lt, &[-1, 0]));
    assert!(!scalar_op::<u32, bool>(Op::Lt, &[u32::MAX, 0]));
    assert!(scalar_op::<bool, bool>(Op::Lt, &[false, true]));
    assert!(scalar_op::<bool, bool>(Op::Ge, &[true, true]));
    assert!(scalar_op::<bool, bool>(Op::Ne, &[true, false]));
    assert!(scalar_op::<f64, bool>(Op::Le, &[-0.0, 0.0]));
    assert!(scalar_op::<f64, bool>(Op::Eq, &[-0.0, 0.0]));
    for op in [Op::Lt, Op::Le, Op::Gt, Op::Ge, Op::Eq] {
        assert!(!scalar_op::<f32, bool>(op, &[f32::NAN, 1.0]), "{op:?}");
        assert!(!scalar_op::<f32, bool>(op, &[f32::NAN, f32::NAN]), "{op:?}");
    }
    assert!(scalar_op::<f32, bool>(Op::Ne, &[f32::NAN, f32::NAN]));
    assert!(scalar_op::<bool, bool>(Op::And, &[true, true]));
    assert!(!scalar_op::<bool, bool>(Op::And, &[true, false]));
    assert!(scalar_op::<bool, bool>(Op::Or, &[false, true]));
    assert!(!scalar_op::<bool, bool>(Op::Or, &[false, false]));
}

#[test]
fn select_picks_by_condition() {
    let mut b = Builder::new("select", &[2]);
    b.output(DType::U16, &[2]);
    let p = b.position(0);
    let z = b.i64(0);
    let c = b.op(Op::Eq, &[p, z]);
    let x = b.constant(DType::U16, Literal::UInt(7));
    let y = b.constant(DType::U16, Literal::UInt(9));
    let s = b.op(Op::Select, &[c, x, y]);
    b.write(OUT, 0, &[p], s);
    let out = run_ok(&b.build(), &[]);
    assert_eq!(vals::<u16>(&out[0]), vec![7, 9]);
}

// ---------------------------------------------------------------- casts

#[test]
fn casts_follow_rust_as() {
    assert_eq!(cast_to::<f32, i32>(1e10), i32::MAX);
    assert_eq!(cast_to::<f32, i32>(-1e10), i32::MIN);
    assert_eq!(cast_to::<f32, i32>(f32::NAN), 0);
    assert_eq!(cast_to::<f64, i64>(f64::INFINITY), i64::MAX);
    assert_eq!(cast_to::<f64, u8>(-1.0), 0);
    assert_eq!(cast_to::<f64, u8>(300.7), 255);
    assert_eq!(cast_to::<f32, i8>(-2.9), -2);
    assert_eq!(cast_to::<f64, u64>(f64::NAN), 0);
    assert_eq!(cast_to::<i32, u8>(300), 44);
    assert_eq!(cast_to::<i32, u32>(-1), u32::MAX);
    assert_eq!(cast_to::<u64, i8>(0x1ff), -1);
    assert_eq!(cast_to::<i8, i64>(-5), -5);
    assert_eq!(cast_to::<u8, i8>(200), -56);
    assert_eq!(cast_to::<bool, f32>(true), 1.0);
    assert_eq!(cast_to::<bool, i64>(false), 0);
    assert_eq!(cast_to::<bool, u8>(true), 1);
    assert!(cast_to::<f32, bool>(0.5));
    assert!(cast_to::<f32, bool>(f32::NAN));
    assert!(!cast_to::<f32, bool>(-0.0));
    assert!(cast_to::<i32, bool>(-3));
    assert!(!cast_to::<u64, bool>(0));
    assert_eq!(cast_to::<i64, f32>(16_777_217), 16_777_216.0);
    assert_eq!(cast_to::<f64, f32>(0.1), 0.1f32);
    assert_eq!(cast_to::<f32, f64>(0.1), 0.1f32 as f64);
    assert_eq!(cast_to::<u64, f64>(u64::MAX), u64::MAX as f64);
}

#[test]
fn every_cast_pair_matches_rust() {
    use value::{cast, Value};
    let samples = [
        Value::F32(-3.7),
        Value::F32(f32::NAN),
        Value::F32(1e20),
        Value::F64(-1e300),
        Value::F64(255.5),
        Value::I8(-128),
        Value::I16(-300),
        Value::I32(-70000),
        Value::I64(i64::MIN),
        Value::U8(255),
        Value::U16(65535),
        Value::U32(u32::MAX),
        Value::U64(u64::MAX),
        Value::Bool(true),
        Value::Bool(false),
        Value::F16(half::f16::from_f32(-300.5)),
        Value::BF16(half::bf16::from_f32(3e20)),
    ];
    for v in samples {
        for to in DType::ALL {
            let r = cast(v, to);
            assert_eq!(r.dtype(), to);
            // Through f64/i128 where that is exact: compare with the direct Rust cast.
            macro_rules! direct {
                ($x:expr) => {
                    match to {
                        DType::F32 => Value::F32($x as f32),
                        DType::F64 => Value::F64($x as f64),
                        DType::I8 => Value::I8($x as i8),
                        DType::I16 => Value::I16($x as i16),
                        DType::I32 => Value::I32($x as i32),
                        DType::I64 => Value::I64($x as i64),
                        DType::U8 => Value::U8($x as u8),
                        DType::U16 => Value::U16($x as u16),
                        DType::U32 => Value::U32($x as u32),
                        DType::U64 => Value::U64($x as u64),
                        DType::Bool => Value::Bool($x as f64 != 0.0 || $x as f64 != $x as f64),
                        // To a half type: to f32, rounded once.
                        DType::F16 => Value::F16(half::f16::from_f32($x as f32)),
                        DType::BF16 => Value::BF16(half::bf16::from_f32($x as f32)),
                    }
                };
            }
            #[allow(clippy::unnecessary_cast)]
            let expected = match v {
                Value::F32(x) => direct!(x),
                Value::F64(x) => direct!(x),
                Value::I8(x) => direct!(x),
                Value::I16(x) => direct!(x),
                Value::I32(x) => direct!(x),
                Value::I64(x) => direct!(x),
                Value::U8(x) => direct!(x),
                Value::U16(x) => direct!(x),
                Value::U32(x) => direct!(x),
                Value::U64(x) => direct!(x),
                Value::Bool(b) => direct!(b as u8),
                // From a half type: from its exact f32 value.
                Value::F16(x) => direct!(x.to_f32()),
                Value::BF16(x) => direct!(x.to_f32()),
            };
            let same = match (r, expected) {
                (Value::F32(a), Value::F32(b)) => a.to_bits() == b.to_bits(),
                (Value::F64(a), Value::F64(b)) => a.to_bits() == b.to_bits(),
                (Value::F16(a), Value::F16(b)) => a.to_bits() == b.to_bits(),
                (Value::BF16(a), Value::BF16(b)) => a.to_bits() == b.to_bits(),
                (a, b) => a == b,
            };
            assert!(same, "cast {v:?} to {to}: {r:?} != {expected:?}");
        }
    }
}

// ---------------------------------------------------------------- float semantics

#[test]
fn float_min_max_ignore_nan() {
    assert_eq!(scalar_op::<f32, f32>(Op::Min, &[f32::NAN, 1.0]), 1.0);
    assert_eq!(scalar_op::<f32, f32>(Op::Min, &[1.0, f32::NAN]), 1.0);
    assert_eq!(scalar_op::<f64, f64>(Op::Max, &[f64::NAN, -2.0]), -2.0);
    assert_eq!(scalar_op::<f64, f64>(Op::Max, &[-2.0, f64::NAN]), -2.0);
    assert!(scalar_op::<f32, f32>(Op::Max, &[f32::NAN, f32::NAN]).is_nan());
    assert_eq!(scalar_op::<f32, f32>(Op::Min, &[-1.0, 3.0]), -1.0);
}

#[test]
fn float_mod_is_fmod_and_division_is_ieee() {
    assert_eq!(scalar_op::<f64, f64>(Op::Mod, &[-7.5, 2.0]), -1.5);
    assert_eq!(scalar_op::<f32, f32>(Op::Mod, &[7.5, -2.0]), 1.5);
    assert!(scalar_op::<f32, f32>(Op::Mod, &[1.0, 0.0]).is_nan());
    assert_eq!(
        scalar_op::<f64, f64>(Op::Mod, &[1e300, 3.0]),
        1e300f64 % 3.0
    );
    assert_eq!(scalar_op::<f32, f32>(Op::Div, &[1.0, 0.0]), f32::INFINITY);
    assert_eq!(
        scalar_op::<f32, f32>(Op::Div, &[-1.0, 0.0]),
        f32::NEG_INFINITY
    );
    assert!(scalar_op::<f64, f64>(Op::Div, &[0.0, 0.0]).is_nan());
}

#[test]
fn rounding_functions() {
    assert_eq!(scalar_op::<f32, f32>(Op::Round, &[2.5]), 3.0);
    assert_eq!(scalar_op::<f32, f32>(Op::Round, &[-2.5]), -3.0);
    assert_eq!(scalar_op::<f64, f64>(Op::Round, &[0.5]), 1.0);
    assert_eq!(scalar_op::<f64, f64>(Op::Round, &[1.4999999999999998]), 1.0);
    assert_eq!(scalar_op::<f32, f32>(Op::Floor, &[-0.5]), -1.0);
    assert_eq!(scalar_op::<f32, f32>(Op::Ceil, &[-0.5]), -0.0);
    assert!(scalar_op::<f32, f32>(Op::Ceil, &[-0.5]).is_sign_negative());
    assert_eq!(scalar_op::<f32, f32>(Op::Abs, &[-0.0]).to_bits(), 0);
    assert_eq!(scalar_op::<f64, f64>(Op::Neg, &[1.5]), -1.5);
}

#[test]
fn math_functions_computed_in_the_dtype() {
    let xs32 = [0.3f32, -1.7, 2.0, 1e-7, 10.0];
    for &x in &xs32 {
        let checks: [(Op, f32); 12] = [
            (Op::Exp, x.exp()),
            (Op::Exp2, x.exp2()),
            (Op::Expm1, x.exp_m1()),
            (Op::Sin, x.sin()),
            (Op::Cos, x.cos()),
            (Op::Tan, x.tan()),
            (Op::Atan, x.atan()),
            (Op::Sinh, x.sinh()),
            (Op::Cosh, x.cosh()),
            (Op::Tanh, x.tanh()),
            (Op::Sigmoid, 1.0f32 / (1.0f32 + (-x).exp())),
            (Op::Erf, libm::erff(x)),
        ];
        for (op, want) in checks {
            let got = scalar_op::<f32, f32>(op, &[x]);
            assert!(bits_eq(got, want), "{op:?}({x}) = {got}, want {want}");
        }
    }
    for &x in &[0.5f32, 2.0, 1e-7, 100.0] {
        let checks: [(Op, f32); 6] = [
            (Op::Sqrt, x.sqrt()),
            (Op::Rsqrt, 1.0 / x.sqrt()),
            (Op::Log, x.ln()),
            (Op::Log2, x.log2()),
            (Op::Log10, x.log10()),
            (Op::Log1p, x.ln_1p()),
        ];
        for (op, want) in checks {
            let got = scalar_op::<f32, f32>(op, &[x]);
            assert!(bits_eq(got, want), "{op:?}({x}) = {got}, want {want}");
        }
    }
    assert_eq!(scalar_op::<f32, f32>(Op::Asin, &[0.5]), 0.5f32.asin());
    assert_eq!(scalar_op::<f64, f64>(Op::Acos, &[0.5]), 0.5f64.acos());
    assert_eq!(scalar_op::<f64, f64>(Op::Erf, &[0.5]), libm::erf(0.5));
    assert_eq!(
        scalar_op::<f64, f64>(Op::Expm1, &[1e-10]),
        1e-10f64.exp_m1()
    );
    assert_eq!(scalar_op::<f64, f64>(Op::Log1p, &[1e-10]), 1e-10f64.ln_1p());
    assert_eq!(scalar_op::<f32, f32>(Op::Rsqrt, &[4.0]), 0.5);
    assert!(scalar_op::<f32, f32>(Op::Sqrt, &[-1.0]).is_nan());
    assert_eq!(scalar_op::<f64, f64>(Op::Sigmoid, &[0.0]), 0.5);
    assert_eq!(scalar_op::<f32, f32>(Op::Sigmoid, &[-200.0]), 0.0);
    assert_eq!(scalar_op::<f32, f32>(Op::Sigmoid, &[200.0]), 1.0);
    // f32 addition is not done in f64: 2^24 + 1 stays 2^24.
    assert_eq!(
        scalar_op::<f32, f32>(Op::Add, &[16_777_216.0, 1.0]),
        16_777_216.0
    );
}

#[test]
fn pow_atan2_and_fma() {
    assert_eq!(scalar_op::<f32, f32>(Op::Pow, &[2.0, 10.0]), 1024.0);
    assert_eq!(scalar_op::<f64, f64>(Op::Pow, &[2.0, 0.5]), 2f64.powf(0.5));
    // Operand 0 is y.
    let a = scalar_op::<f64, f64>(Op::Atan2, &[1.0, -1.0]);
    assert_eq!(a, 1f64.atan2(-1.0));
    assert!((a - 3.0 * std::f64::consts::FRAC_PI_4).abs() < 1e-15);
    assert_eq!(
        scalar_op::<f32, f32>(Op::Atan2, &[-0.0, -1.0]),
        -std::f32::consts::PI
    );
    // One rounding: (1 + 2^-12)^2 - (1 + 2^-11) = 2^-24 exactly, while the unfused product
    // rounds to 1 + 2^-11 and gives 0.
    let a = 1.0f32 + 2f32.powi(-12);
    let c = -(1.0f32 + 2f32.powi(-11));
    assert_eq!(a * a + c, 0.0);
    assert_eq!(scalar_op::<f32, f32>(Op::Fma, &[a, a, c]), 2f32.powi(-24));
    // MUL then ADD is not contracted.
    let mut b = Builder::new("no_contraction", &[1]);
    let (x, z) = (b.f32(a), b.f32(c));
    let m = b.op(Op::Mul, &[x, x]);
    let s = b.op(Op::Add, &[m, z]);
    b.output(DType::F32, &[]);
    b.write(OUT, 0, &[], s);
    let out = run_ok(&b.build(), &[]);
    assert_eq!(vals::<f32>(&out[0]), vec![0.0]);
}

#[test]
fn float_classification() {
    assert!(scalar_op::<f32, bool>(Op::Isinf, &[f32::NEG_INFINITY]));
    assert!(!scalar_op::<f32, bool>(Op::Isinf, &[f32::NAN]));
    assert!(scalar_op::<f64, bool>(Op::Isnan, &[f64::NAN]));
    assert!(!scalar_op::<f64, bool>(Op::Isnan, &[1.0]));
    assert!(scalar_op::<f64, bool>(Op::Isfinite, &[1e308]));
    assert!(!scalar_op::<f32, bool>(Op::Isfinite, &[f32::INFINITY]));
    assert!(!scalar_op::<f32, bool>(Op::Isfinite, &[f32::NAN]));
}

#[test]
fn f32_literals_round_from_f64() {
    let mut b = Builder::new("lit", &[1]);
    let c = b.constant(DType::F32, Literal::Float(0.1f64));
    b.output(DType::F32, &[]);
    b.write(OUT, 0, &[], c);
    let out = run_ok(&b.build(), &[]);
    assert_eq!(vals::<f32>(&out[0]), vec![0.1f32]);
}

#[test]
fn every_dtype_round_trips_through_input_output_and_local() {
    fn one<T: Scalar>(v: T) {
        let mut b = Builder::new("copy", &[2]);
        b.input(T::DTYPE, &[2]);
        b.output(T::DTYPE, &[2]);
        let l = b.local(T::DTYPE, &[2], T::default().to_literal());
        let p = b.position(0);
        let x = b.read(IN, 0, &[p]);
        b.write(LOC, l, &[p], x);
        let y = b.read(LOC, l, &[p]);
        let e = b.op(Op::Eq, &[x, y]);
        let s = b.op(Op::Select, &[e, y, x]);
        b.write(OUT, 0, &[p], s);
        let out = run_ok(&b.build(), &[t(&[2], vec![v, T::default()])]);
        assert_eq!(vals::<T>(&out[0]), vec![v, T::default()]);
    }
    one(1.5f32);
    one(-2.5f64);
    one(-3i8);
    one(-300i16);
    one(-70000i32);
    one(i64::MIN);
    one(200u8);
    one(60000u16);
    one(u32::MAX);
    one(u64::MAX);
    one(true);
}
