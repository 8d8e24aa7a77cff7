//! Graphviz pictures of an operator DAG: DOT text, and SVG or PNG through the `dot` program
//! when it is installed.

use crate::error::FuseError;
use ovl_ir::ir::{self, value_ref::Source};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

/// An image format `dot` can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageFormat {
    /// Scalable vector graphics.
    Svg,
    /// Portable network graphics.
    Png,
}

impl ImageFormat {
    fn flag(self) -> &'static str {
        match self {
            ImageFormat::Svg => "svg",
            ImageFormat::Png => "png",
        }
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn type_label(t: &ir::TensorType) -> String {
    let d = ovl_ir::DType::from_ir(t.dtype).map_or("?", |d| d.name());
    format!("{d}{:?}", t.shape)
}

/// A note on the edges from one kernel to another: (producer, consumer, text).
pub(crate) type EdgeNote = (usize, usize, String);

/// Appends the nodes and edges of `dag`, with node ids prefixed by `prefix`; an edge between
/// two kernels named in `notes` gets the note under its type.
fn body(out: &mut String, dag: &ir::OperatorDag, prefix: &str, indent: &str, notes: &[EdgeNote]) {
    let value_id = |v: &ir::ValueRef| match &v.source {
        Some(Source::GraphInput(i)) => Some(format!("{prefix}in{i}")),
        Some(Source::OpOutput(o)) => Some(format!("{prefix}op{}", o.operator)),
        None => None,
    };
    let value_type = |v: &ir::ValueRef| match &v.source {
        Some(Source::GraphInput(i)) => dag.inputs.get(*i as usize).map(type_label),
        Some(Source::OpOutput(o)) => dag
            .operators
            .get(o.operator as usize)
            .and_then(|op| op.outputs.get(o.output as usize))
            .map(|t| format!("out {}: {}", o.output, type_label(t))),
        None => None,
    };
    for (i, t) in dag.inputs.iter().enumerate() {
        let _ = writeln!(
            out,
            "{indent}{prefix}in{i} [shape=ellipse, label=\"input {i}\\n{}\"];",
            escape(&type_label(t))
        );
    }
    for (i, op) in dag.operators.iter().enumerate() {
        if ovl_ir::library::is_library_call(op) {
            // A library call: a plain box, what it calls under its name.
            let _ = writeln!(
                out,
                "{indent}{prefix}op{i} [shape=box, label=\"{}\\nlibrary call: {}\\n{:?}\"];",
                escape(&op.name),
                escape(&ovl_ir::library::describe(op)),
                op.workgroup_shape
            );
            continue;
        }
        let _ = writeln!(
            out,
            "{indent}{prefix}op{i} [shape=box, style=rounded, label=\"{}\\nworkgroup {:?}\"];",
            escape(&op.name),
            op.workgroup_shape
        );
    }
    for (i, wiring) in dag.operator_inputs.iter().enumerate() {
        for v in &wiring.inputs {
            if let (Some(from), Some(t)) = (value_id(v), value_type(v)) {
                let note = match &v.source {
                    Some(Source::OpOutput(o)) => notes
                        .iter()
                        .find(|(p, c, _)| *p == o.operator as usize && *c == i)
                        .map(|(_, _, n)| n.as_str()),
                    _ => None,
                };
                match note {
                    Some(n) => {
                        let _ = writeln!(
                            out,
                            "{indent}{from} -> {prefix}op{i} [label=\"{}\\n{}\", fontsize=9, style=dashed];",
                            escape(&t),
                            escape(n)
                        );
                    }
                    None => {
                        let _ = writeln!(
                            out,
                            "{indent}{from} -> {prefix}op{i} [label=\"{}\", fontsize=9];",
                            escape(&t)
                        );
                    }
                }
            }
        }
    }
    for (k, v) in dag.outputs.iter().enumerate() {
        if let Some(from) = value_id(v) {
            let _ = writeln!(
                out,
                "{indent}{prefix}res{k} [shape=doublecircle, label=\"result {k}\"];"
            );
            let t = value_type(v).unwrap_or_default();
            let _ = writeln!(
                out,
                "{indent}{from} -> {prefix}res{k} [label=\"{}\", fontsize=9];",
                escape(&t)
            );
        }
    }
}

/// The DOT text of an operator DAG: graph inputs as ellipses, operators (kernels) as boxes
/// with their workgroup, requested results as double circles, edges labelled with tensor types.
///
/// ```
/// let dag = ovl_ir::ir::OperatorDag::default();
/// let dot = ovl_fuse::to_dot(&dag, "empty");
/// assert!(dot.starts_with("digraph"));
/// ```
pub fn to_dot(dag: &ir::OperatorDag, title: &str) -> String {
    to_dot_noted(dag, title, &[])
}

/// [`to_dot`] with notes on the edges between kernels (dashed, the note under the type).
pub(crate) fn to_dot_noted(dag: &ir::OperatorDag, title: &str, notes: &[EdgeNote]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph ovl {{");
    let _ = writeln!(
        out,
        "  label=\"{} ({} kernel(s))\"; labelloc=t; rankdir=TB;",
        escape(title),
        dag.operators.len()
    );
    body(&mut out, dag, "", "  ", notes);
    out.push_str("}\n");
    out
}

/// One DOT picture with two clusters: `before` and `after` fusion.
pub fn to_dot_pair(before: &ir::OperatorDag, after: &ir::OperatorDag) -> String {
    to_dot_pair_noted(before, after, &[])
}

/// [`to_dot_pair`] with notes on the edges between the kernels after fusion.
pub(crate) fn to_dot_pair_noted(
    before: &ir::OperatorDag,
    after: &ir::OperatorDag,
    notes: &[EdgeNote],
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph ovl_fusion {{");
    let _ = writeln!(out, "  rankdir=TB; compound=true;");
    for (name, dag, prefix, notes) in [
        ("before", before, "b_", &[][..]),
        ("after", after, "a_", notes),
    ] {
        let _ = writeln!(out, "  subgraph cluster_{name} {{");
        let _ = writeln!(
            out,
            "    label=\"{name} fusion: {} kernel(s)\";",
            dag.operators.len()
        );
        body(&mut out, dag, prefix, "    ", notes);
        let _ = writeln!(out, "  }}");
    }
    out.push_str("}\n");
    out
}

/// Renders DOT text with the Graphviz `dot` program into `path`. Fails with
/// [`FuseError::DotNotFound`] when `dot` is not installed.
pub fn render_dot(dot: &str, format: ImageFormat, path: &Path) -> Result<(), FuseError> {
    let bytes = render_dot_bytes(dot, format)?;
    std::fs::write(path, bytes).map_err(|source| FuseError::Io {
        what: format!("writing {}", path.display()),
        source,
    })
}

/// Renders DOT text with the Graphviz `dot` program and returns the image.
pub fn render_dot_bytes(dot: &str, format: ImageFormat) -> Result<Vec<u8>, FuseError> {
    let mut child = Command::new("dot")
        .arg(format!("-T{}", format.flag()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| FuseError::DotNotFound {
            format: format.flag().into(),
            source,
        })?;
    let io = |what: &str, source| FuseError::Io {
        what: format!("{what} the `dot` process"),
        source,
    };
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(dot.as_bytes())
            .map_err(|e| io("writing to", e))?;
    }
    let out = child.wait_with_output().map_err(|e| io("waiting for", e))?;
    if !out.status.success() {
        return Err(FuseError::DotFailed {
            format: format.flag().into(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(out.stdout)
}
