//! The tracing runtime driven by hand-written code shaped like the `#[operator]` expansion.

use ovl_core::ir::{self, Op};
use ovl_core::trace::rt as RT;
use ovl_core::trace::*;
use ovl_core::Lazy;

fn cumsum_rows(x: impl RT::IntoLazy<f32>) -> Lazy<f32> {
    RT::trace_operator::<Tensor<f32>, _>(
        RT::OperatorSite {
            name: "cumsum_rows",
            file: file!(),
            line: line!(),
            column: column!(),
        },
        move |tr: &mut RT::Tracer| -> Tensor<f32> {
            let x: Tensor<f32> = tr.input(x);
            let [rows, cols] = x.dims::<2>();
            let row = position_in([rows])[0];
            let out = output_like(&x);
            let mut acc = variable(0.0f32);
            {
                let r = RT::range(0, cols, 1);
                let j = r.index();
                {
                    acc += RT::read(&x, [RT::ix(row), RT::ix(j)]);
                    RT::write(&out, [RT::ix(row), RT::ix(j)], acc);
                    {
                        let c = RT::cond(RT::lt(acc, 0.0));
                        if c.then_branch() {
                            #[allow(unused_imports)]
                            use RT::{AssignPlain as _, AssignStaged as _};
                            (&mut acc).__ovl_assign(0.0);
                        }
                        c.end();
                    }
                }
                r.end();
            }
            out
        },
    )
}

fn codes(dag: &ir::ExpressionDag) -> Vec<Op> {
    dag.expressions
        .iter()
        .map(|e| Op::try_from(e.code).unwrap())
        .collect()
}

#[test]
fn cumsum_traces_to_a_range_loop() {
    let x = ndarray::Array2::<f32>::zeros((3, 4));
    let y = cumsum_rows(&x);
    assert_eq!(y.shape(), &[3, 4]);
    let node = y.untyped().operator().unwrap();
    assert!(node.error.is_none(), "{:?}", node.error);
    let dag = &node.dag;
    assert_eq!(dag.workgroup_shape, vec![3]);
    let c = codes(dag);
    assert!(c.contains(&Op::Range) && c.contains(&Op::EndRange));
    assert!(c.contains(&Op::If) && c.contains(&Op::EndIf) && c.contains(&Op::Assign));
    assert_eq!(c.iter().filter(|&&o| o == Op::Write).count(), 1);
}

#[test]
fn writing_an_input_is_an_error_naming_the_line() {
    let x = ndarray::Array1::<f32>::zeros(4);
    let y = RT::trace_operator::<Tensor<f32>, _>(
        RT::OperatorSite {
            name: "bad",
            file: file!(),
            line: line!(),
            column: 1,
        },
        move |tr: &mut RT::Tracer| -> Tensor<f32> {
            let x: Tensor<f32> = tr.input(x);
            let i = position_in([4])[0];
            let out = output_like(&x);
            RT::write(&x, [RT::ix(i)], 1.0);
            let line = line!();
            RT::write(&out, [RT::ix(i)], 1.0);
            assert!(line > 0);
            out
        },
    );
    let err = y
        .untyped()
        .operator()
        .unwrap()
        .error
        .clone()
        .expect("an error");
    assert_eq!(err.operator, "bad");
    assert!(err.message.contains("read-only"), "{}", err.message);
    assert!(err.file.ends_with("trace_by_hand.rs"));
    println!("{err}");
}

#[test]
fn staged_while_and_plain_while() {
    let x = ndarray::Array1::<i32>::zeros(8);
    let y = RT::trace_operator::<Tensor<i32>, _>(
        RT::OperatorSite {
            name: "collatz",
            file: file!(),
            line: line!(),
            column: 1,
        },
        move |tr: &mut RT::Tracer| -> Tensor<i32> {
            let x: Tensor<i32> = tr.input(x);
            let i = position_in([8])[0];
            let out = output_like(&x);
            let mut n = variable(RT::read(&x, [RT::ix(i)]));
            let mut steps = variable(0i32);
            let mut k = 0;
            {
                let mut w = RT::WhileLoop::begin();
                loop {
                    if !w.test(RT::lt(k, 3)) {
                        break;
                    }
                    {
                        k += 1;
                    }
                    if w.staged_end() {
                        break;
                    }
                }
            }
            {
                let mut w = RT::WhileLoop::begin();
                loop {
                    if !w.test(RT::gt(n, 1)) {
                        break;
                    }
                    {
                        let c = RT::cond(RT::eq(n % 2, 0));
                        if c.then_branch() {
                            n /= 2;
                        }
                        if c.else_branch() {
                            n.set(n * 3 + 1);
                        }
                        c.end();
                        steps += 1;
                    }
                    if w.staged_end() {
                        break;
                    }
                }
            }
            assert_eq!(k, 3);
            RT::write(&out, [RT::ix(i)], steps);
            out
        },
    );
    let node = y.untyped().operator().unwrap();
    assert!(node.error.is_none(), "{:?}", node.error);
    let c = codes(&node.dag);
    assert_eq!(c.iter().filter(|&&o| o == Op::WhileBegin).count(), 1);
    assert!(c.contains(&Op::WhileCond) && c.contains(&Op::WhileEnd) && c.contains(&Op::Else));
}
