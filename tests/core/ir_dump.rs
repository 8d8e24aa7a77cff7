//! A user can get an operator's IR: the protobuf bytes, and a readable text dump.

use crate::cumsum;
use ndarray::array;
use ovl::ir;

use cumsum::cumsum_rows;
use ovl::prelude::*;
use prost::Message;

#[test]
fn the_ir_round_trips_through_protobuf_bytes() {
    let x = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
    let graph = ovl::graph(cumsum_rows(&x)).expect("trace");
    assert_eq!(graph.dag.operators.len(), 1);
    let op = &graph.dag.operators[0];
    assert_eq!(op.name, "cumsum_rows");
    assert_eq!(op.workgroup_shape, vec![2]);

    let bytes = ovl::ir_tools::to_bytes(op);
    let decoded = ir::ExpressionDag::decode(bytes.as_slice()).expect("valid protobuf");
    assert_eq!(&decoded, op);
    let dag_bytes = ovl::ir_tools::to_bytes(&graph.dag);
    assert_eq!(
        ir::OperatorDag::decode(dag_bytes.as_slice()).expect("valid protobuf"),
        graph.dag
    );

    // The decoded IR still computes the same thing.
    let y = evaluate_with(&cumsum_rows(&x), &Options::interpreter()).expect("evaluate");
    assert_eq!(y, array![[1.0f32, 3.0, 6.0], [4.0, 9.0, 15.0]].into_dyn());
}

#[test]
fn the_text_dump_shows_the_loop_the_reads_and_the_writes() {
    let x = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
    let graph = ovl::graph(cumsum_rows(&x)).expect("trace");
    let text = ovl::ir_tools::to_text(&graph.dag.operators[0]);
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    assert!(
        lines[0].starts_with("operator `cumsum_rows` (tests/support/cumsum_rows.rs:"),
        "{text}"
    );
    assert!(lines.contains(&"workgroup [2]"), "{text}");
    assert!(lines.contains(&"input0: f32[2, 3]"), "{text}");
    assert!(lines.contains(&"output0: f32[2, 3]"), "{text}");
    assert!(lines.iter().any(|l| l.contains("= range ")), "{text}");
    assert!(
        lines.iter().any(|l| l.starts_with("write output0[")),
        "{text}"
    );
    assert!(lines.iter().any(|l| l.contains("= read input0[")), "{text}");
    assert_eq!(lines.last(), Some(&"end_range"), "{text}");

    let whole = ovl::ir_tools::operator_dag_to_text(&graph.dag);
    assert!(whole.contains("cumsum_rows"), "{whole}");
}
