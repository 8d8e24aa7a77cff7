//! Stacking products (a pre-pass over library calls, before the search): GEMM calls that read
//! the same second operand `B` (the same tensor) and none of which depends on another's result
//! become one call over their first operands stacked along the rows, and each original result
//! a slice of the stacked one. An LSTM layer's input products `x_t W` (T calls with `W`
//! shared, none reading another's result) become one `[T B, I] x [I, 4H]` product, as cuDNN
//! computes them; the recurrent `h_t U` are refused (each `h_t` depends on the last step's
//! product), and so are, in a backward, the `dh = dz Uᵀ`, while the `dx_t = dz_t Wᵀ` stack.
//!
//! What is made, for `s` products `A_i op(B)` with `A_i` shaped alike `[.., m, k]` (or
//! `[.., k, m]` read transposed): a copy operator over `A_i`'s shape writing each `A_i` at its
//! place in the stacked operand (`[.., s m, k]`, or `[.., k, s m]`: the copy is fusion's to
//! merge with the operators that write the `A_i`, which the search does like any other pair);
//! the product over it; one operator over the products' result shape (`[.., m, n]`) with an
//! output per original product (output `i` reads rows `i m ..` of the stacked result), which
//! takes the products' places: the cut, an IR construct (`ovl_ir::unstack::UnstackRows`) that
//! the search and the runner recognize by asking the IR, not by its name. One operator, not a slice each: a slice's offset would be
//! substituted into its readers, and T steps that were the same kernel would become T kernels
//! differing by a constant, each compiled on its own.
//!
//! When the copy pays: stacking copies `s |A|` elements and saves reading the shared operand
//! `s - 1` times (a product over few rows reads all of `B` for each call); a group is stacked
//! when `(s - 1) |B| >= s |A|` (an LSTM's products: `|B|` is `4H` times `|A| / B`). The rule
//! depends on the graph alone.

use crate::graph::{Node, Src, Work};
use crate::report::{NotStacked, NotStackedReason, Stacked};
use crate::FuseError;
use ovl_ir::builder::{Builder, IN, OUT};
use ovl_ir::dtype::DType;
use ovl_ir::ir::{self, Op};
use ovl_ir::library::{self, GemmDims};
use ovl_ir::unstack::UnstackRows;
use std::collections::BTreeMap;

/// A product that may be stacked: its node, sizes and operands.
#[derive(Clone)]
struct Candidate {
    node: usize,
    dims: GemmDims,
    a: Src,
    a_type: ir::TensorType,
    b_type: ir::TensorType,
}

/// What stacking did, for the report: each stack with the node of its product (kernel indices
/// are known only after the search) and the products left alone.
#[derive(Default)]
pub(crate) struct Stacking {
    /// The report entry (kernel indices unset) and the stacked product's node.
    pub stacks: Vec<(Stacked, usize)>,
    pub refused: Vec<NotStacked>,
}

/// The products (GEMM calls of one product each, concrete sizes) grouped by what must be equal
/// for a stack: the shared operand and the types and forms of both operands.
fn candidates(work: &Work) -> Result<BTreeMap<String, (Src, Vec<Candidate>)>, FuseError> {
    let mut groups: BTreeMap<String, (Src, Vec<Candidate>)> = BTreeMap::new();
    for n in work.topological_order()? {
        let node = work.node(n);
        let Some(ir::library_call::Call::Gemm(_)) = library::call(&node.dag) else {
            continue;
        };
        let Ok(dims) = library::gemm_dims(&node.dag) else {
            continue;
        };
        let symbolic = node
            .dag
            .inputs
            .iter()
            .chain(&node.dag.outputs)
            .any(|t| !t.symbolic.is_empty());
        if dims.terms != 1 || symbolic || node.inputs.len() != 2 {
            continue;
        }
        let (a_type, b_type) = (node.dag.inputs[0].clone(), node.dag.inputs[1].clone());
        let key = format!(
            "{:?} {:?} {:?} {} {}",
            node.inputs[1], a_type, b_type, dims.transpose_a, dims.transpose_b
        );
        groups
            .entry(key)
            .or_insert_with(|| (node.inputs[1], Vec::new()))
            .1
            .push(Candidate {
                node: n,
                dims,
                a: node.inputs[0],
                a_type,
                b_type,
            });
    }
    Ok(groups)
}

/// Stacks every group of products that share their second operand and do not depend on each
/// other (see the module's documentation); `originals` gains the names of the operators made.
pub(crate) fn stack_products(
    work: &mut Work,
    originals: &mut Vec<String>,
) -> Result<Stacking, FuseError> {
    let mut out = Stacking::default();
    for (_, (shared_src, mut pending)) in candidates(work)? {
        if pending.len() < 2 {
            continue;
        }
        let shared = work.describe(shared_src);
        // The other product each one last could not join, and whether it depends on it.
        let mut conflict: BTreeMap<usize, (usize, bool)> = BTreeMap::new();
        // Paths between the products, found again only after a stack changed the graph.
        let mut paths: Option<Paths> = None;
        while !pending.is_empty() {
            if paths.is_none() {
                let nodes: Vec<usize> = pending.iter().map(|c| c.node).collect();
                paths = Some(Paths::new(work, &nodes)?);
            }
            let found = paths.as_ref().expect("made above");
            let reaches = |a: usize, b: usize| found.reaches(a, b);
            let mut group: Vec<Candidate> = Vec::new();
            let mut rest = Vec::new();
            for c in pending {
                match group
                    .iter()
                    .find(|g| reaches(g.node, c.node) || reaches(c.node, g.node))
                {
                    None => group.push(c),
                    Some(g) => {
                        let on_other = reaches(g.node, c.node);
                        conflict.insert(c.node, (g.node, on_other));
                        conflict.entry(g.node).or_insert((c.node, !on_other));
                        rest.push(c);
                    }
                }
            }
            pending = rest;
            if group.len() < 2 {
                for g in &group {
                    if let Some(&(other, on_other)) = conflict.get(&g.node) {
                        out.refused.push(NotStacked {
                            product: work.node(g.node).label.clone(),
                            shared: shared.clone(),
                            reason: NotStackedReason::Depends {
                                other: work.node(other).label.clone(),
                                on_other,
                            },
                        });
                    }
                }
                continue;
            }
            let s = group.len() as u64;
            let elements = |t: &ir::TensorType| t.shape.iter().product::<u64>();
            let (copied, saved) = (
                s * elements(&group[0].a_type),
                (s - 1) * elements(&group[0].b_type),
            );
            if saved < copied {
                for g in &group {
                    out.refused.push(NotStacked {
                        product: work.node(g.node).label.clone(),
                        shared: shared.clone(),
                        reason: NotStackedReason::CopyCostsMore { copied, saved },
                    });
                }
                continue;
            }
            out.stacks
                .push(stack(work, originals, &group, shared_src, &shared)?);
            paths = None;
        }
    }
    Ok(out)
}

/// Which of some nodes (the products of one group) each node leads to, as bits over those
/// nodes only: memory in the graph's size times the group's, not the graph's size squared.
struct Paths {
    /// The bit of each of the nodes.
    bit: BTreeMap<usize, usize>,
    /// For each node of the graph, the nodes among them reachable by a path of length >= 1.
    below: Vec<Vec<u64>>,
}

impl Paths {
    fn new(work: &Work, nodes: &[usize]) -> Result<Paths, FuseError> {
        let bit: BTreeMap<usize, usize> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        let words = nodes.len().div_ceil(64);
        let mut below = vec![Vec::new(); work.nodes.len()];
        for n in work.topological_order()?.into_iter().rev() {
            let mut bits = vec![0u64; words];
            for c in work.consumers(n) {
                if let Some(&i) = bit.get(&c) {
                    bits[i / 64] |= 1 << (i % 64);
                }
                for (b, d) in bits.iter_mut().zip(&below[c]) {
                    *b |= d;
                }
            }
            below[n] = bits;
        }
        Ok(Paths { bit, below })
    }

    /// Whether a path leads from `a` to `b` (`b` one of the nodes).
    fn reaches(&self, a: usize, b: usize) -> bool {
        self.bit.get(&b).is_some_and(|&i| {
            self.below[a]
                .get(i / 64)
                .is_some_and(|w| w >> (i % 64) & 1 == 1)
        })
    }
}

/// The axis of the first operand along which the products' rows lie.
fn row_axis(c: &Candidate) -> usize {
    let r = c.a_type.shape.len();
    if c.dims.transpose_a {
        r - 1
    } else {
        r - 2
    }
}

/// Replaces the products of `group` by one over their stacked first operands and a slice of
/// its result for each.
fn stack(
    work: &mut Work,
    originals: &mut Vec<String>,
    group: &[Candidate],
    shared_src: Src,
    shared: &str,
) -> Result<(Stacked, usize), FuseError> {
    let first = work.node(group[0].node).clone();
    let dtype = DType::from_ir(group[0].a_type.dtype)
        .ok_or_else(|| FuseError::Internal("a GEMM of an unknown dtype".into()))?;
    let s = group.len() as u64;
    let piece = group[0].a_type.shape.clone();
    let axis = row_axis(&group[0]);
    let mut stacked = piece.clone();
    stacked[axis] *= s;
    let source = first.dag.source.clone();
    let labels: Vec<String> = group
        .iter()
        .map(|g| work.node(g.node).label.clone())
        .collect();
    let invalid = |what: &str, e: String| {
        FuseError::Internal(format!(
            "the stacked {what} of {} is invalid: {e}",
            labels[0]
        ))
    };

    // The copy: worker `p` of a piece writes element `p` of every piece at its place.
    let mut b = Builder::new("stack_rows", &piece);
    for _ in group {
        b.input(dtype, &piece);
    }
    b.output(dtype, &stacked);
    let pos: Vec<u32> = (0..piece.len() as u32).map(|d| b.position(d)).collect();
    for i in 0..group.len() as u32 {
        let v = b.read(IN, i, &pos);
        let mut at = pos.clone();
        let offset = b.i64((i as u64 * piece[axis]) as i64);
        at[axis] = b.op(Op::Add, &[pos[axis], offset]);
        b.write(OUT, 0, &at, v);
    }
    let mut copy = b.build();
    copy.source = source.clone();
    ovl_ir::validate::validate(&copy).map_err(|e| invalid("copy", e.to_string()))?;

    let d = &group[0].dims;
    let mut product = library::gemm_operator(
        &first.dag.name,
        dtype,
        &stacked,
        &group[0].b_type.shape,
        d.transpose_a,
        d.transpose_b,
    )
    .map_err(|e| invalid("product", e.to_string()))?;
    product.source = source.clone();

    let copy_index = work.new_original();
    originals.push("stack_rows".into());
    let copy_node = work.add(Node {
        label: crate::graph::label(&[(copy_index, "stack_rows")]),
        dag: copy,
        inputs: group.iter().map(|g| g.a).collect(),
        members: vec![copy_index],
        source_of: first.source_of,
        duplicated: 0.0,
    });
    let product_index = work.new_original();
    originals.push(first.dag.name.clone());
    let product_label = crate::graph::label(&[(product_index, &first.dag.name)]);
    let product_node = work.add(Node {
        label: product_label.clone(),
        dag: product,
        inputs: vec![
            Src::Op {
                node: copy_node,
                output: 0,
            },
            shared_src,
        ],
        members: vec![product_index],
        source_of: first.source_of,
        duplicated: 0.0,
    });

    // Each product's place: an output of one operator cutting the stacked result into the
    // products' results (one operator, so that the readers of each read their own tensor at
    // their own position, and T identical steps stay T identical kernels after fusion).
    let result = work.node(product_node).dag.outputs[0].clone();
    let c = group[0].node;
    let c = work.node(c).dag.outputs[0].shape.clone();
    let names: Vec<(usize, String)> = group
        .iter()
        .flat_map(|g| work.node(g.node).members.clone())
        .map(|m| (m, originals[m].clone()))
        .collect();
    let mut cut = UnstackRows {
        dtype,
        stacked: result.shape.clone(),
        piece: c,
        count: group.len(),
    }
    .operator();
    cut.source = source.clone();
    if let Some(g) = group
        .iter()
        .find(|g| work.node(g.node).dag.outputs[0] != cut.outputs[0])
    {
        return Err(invalid(
            "slices",
            format!("{} writes another type", work.node(g.node).label),
        ));
    }
    ovl_ir::validate::validate(&cut).map_err(|e| invalid("slices", e.to_string()))?;
    let mut members: Vec<usize> = names.iter().map(|(m, _)| *m).collect();
    members.sort_unstable();
    let refs: Vec<(usize, &str)> = names.iter().map(|(m, n)| (*m, n.as_str())).collect();
    let cut_node = work.add(Node {
        label: crate::graph::label(&refs),
        dag: cut,
        inputs: vec![Src::Op {
            node: product_node,
            output: 0,
        }],
        members,
        source_of: first.source_of,
        duplicated: 0.0,
    });
    for (i, g) in group.iter().enumerate() {
        work.replace_by_output(g.node, cut_node, i as u32);
    }
    Ok((
        Stacked {
            products: labels,
            shared: shared.into(),
            call: library::describe(&work.node(product_node).dag),
            stacked_shape: stacked,
            kernel: 0,
            operand_kernel: 0,
        },
        product_node,
    ))
}
