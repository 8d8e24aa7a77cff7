//! Splicing a producer's expression DAG into its consumer's.
//!
//! The merged operator runs the producer's program, then the consumer's, in one worker. Each
//! read of a handed-over tensor in the consumer becomes the value the producer wrote (a
//! `variable` written directly is first copied with a same-type cast at the write, so later
//! assignments cannot change what the consumer sees). A handed-over tensor that is a requested
//! output or read by another operator stays an output of the merged operator; otherwise its
//! write is dropped. Inputs that both operators read from the same source are shared.

use crate::graph::{label, Node, Src};
use crate::legality::VerticalPlan;
use ovl_ir::ir::{self, TensorKind};
use ovl_ir::typed::{Inst, Kernel};
use ovl_ir::{DType, Literal};
use std::cell::RefCell;
use std::collections::HashMap;

/// The merged operator's tensor lists, filled part by part.
pub(crate) struct Splice {
    pub dag: ir::ExpressionDag,
    pub inputs: Vec<Src>,
}

impl Splice {
    pub fn new(consumer: &Node, names: &[(usize, &str)]) -> Splice {
        let mut name = names.iter().map(|(_, n)| *n).collect::<Vec<_>>().join("+");
        if name.len() > 60 {
            name = format!(
                "{}+{}_more",
                names.first().map_or("", |(_, n)| *n),
                names.len() - 1
            );
        }
        Splice {
            dag: ir::ExpressionDag {
                symbolic_workgroup: Vec::new(),
                symbol_count: 0,
                version: consumer.dag.version,
                name,
                expressions: Vec::new(),
                workgroup_shape: consumer.dag.workgroup_shape.clone(),
                inputs: Vec::new(),
                outputs: Vec::new(),
                locals: Vec::new(),
                source: consumer.dag.source.clone(),
                gradient: None,
                library_call: None,
            },
            inputs: Vec::new(),
        }
    }

    /// Adds the outputs of `node` that `keep` says stay (all when `keep` is `None`); returns
    /// the merged index of each of its outputs (`None`: dropped).
    pub fn outputs_of(&mut self, node: &Node, keep: Option<&[bool]>) -> Vec<Option<u32>> {
        let mut map = vec![None; node.dag.outputs.len()];
        for (o, t) in node.dag.outputs.iter().enumerate() {
            if keep.is_none_or(|k| k[o]) {
                map[o] = Some(self.dag.outputs.len() as u32);
                self.dag.outputs.push(t.clone());
            }
        }
        map
    }

    /// The merged input index of each of `node`'s inputs.
    pub fn inputs_of(&mut self, node: &Node) -> Vec<u32> {
        node.inputs
            .iter()
            .zip(&node.dag.inputs)
            .map(|(&src, t)| self.input(src, t))
            .collect()
    }

    /// The merged node of `first` and `second` (after both were appended), tidied.
    pub fn into_merged(
        mut self,
        (first, second): (&Node, &Node),
        names: &[(usize, &str)],
        map_first: Vec<Option<u32>>,
        map_second: Vec<Option<u32>>,
    ) -> Merged {
        tidy(&mut self.dag);
        let mut members: Vec<usize> = first
            .members
            .iter()
            .chain(&second.members)
            .copied()
            .collect();
        members.sort_unstable();
        Merged {
            node: Node {
                dag: self.dag,
                inputs: self.inputs,
                label: label(names),
                members,
                source_of: second.source_of,
                duplicated: first.duplicated + second.duplicated,
            },
            map_first,
            map_second,
        }
    }

    /// The merged input index for `src` (shared when already present).
    pub fn input(&mut self, src: Src, t: &ir::TensorType) -> u32 {
        if let Some(i) = self
            .inputs
            .iter()
            .zip(&self.dag.inputs)
            .position(|(s, ty)| *s == src && ty == t)
        {
            return i as u32;
        }
        self.inputs.push(src);
        self.dag.inputs.push(t.clone());
        self.inputs.len() as u32 - 1
    }

    /// The merged operator's input for each of `consumer`'s input slots, or `u32::MAX` for a
    /// slot that reads a handed-over producer output (`slot_output[slot]` is `Some`).
    pub fn consumer_inputs(&mut self, consumer: &Node, slot_output: &[Option<u32>]) -> Vec<u32> {
        consumer
            .inputs
            .iter()
            .zip(&consumer.dag.inputs)
            .zip(slot_output)
            .map(|((&src, t), handed)| match handed {
                Some(_) => u32::MAX,
                None => self.input(src, t),
            })
            .collect()
    }

    /// Appends one part's expressions (after its locals); returns the merged index of each
    /// part expression (`u32::MAX` for dropped writes).
    pub fn append(&mut self, part: &Part<'_>) -> Vec<u32> {
        let mut remap = Vec::with_capacity(part.dag.expressions.len());
        let base_locals = self.add_locals(part);
        self.append_until(part, base_locals, &mut remap, part.dag.expressions.len());
        remap
    }

    /// Adds a part's local tensors; returns the merged index of its first.
    pub fn add_locals(&mut self, part: &Part<'_>) -> u32 {
        let base_locals = self.dag.locals.len() as u32;
        self.dag.locals.extend(part.dag.locals.iter().cloned());
        base_locals
    }

    /// Appends a part's expressions from `remap.len()` up to `end` (exclusive), recording
    /// each one's merged index in `remap`: a part can be appended in pieces, with other
    /// expressions in between (see `epilogue`). `base_locals` is what
    /// [`add_locals`](Self::add_locals) returned for it.
    pub fn append_until(
        &mut self,
        part: &Part<'_>,
        base_locals: u32,
        remap: &mut Vec<u32>,
        end: usize,
    ) {
        for i in remap.len()..end {
            let e = &part.dag.expressions[i];
            if let Some(&to) = part.replace.get(&i) {
                remap.push(to);
                continue;
            }
            // The value handed over from this write, copied here when it is a variable.
            if let Some(&copied) = part.snapshot_before.get(&i) {
                let v = remap[copied];
                let dtype = DType::from_ir(self.dag.expressions[v as usize].dtype);
                self.dag
                    .expressions
                    .push(Inst::Cast { value: v }.encode(dtype));
                part.copies
                    .borrow_mut()
                    .push((i, self.dag.expressions.len() as u32 - 1));
            }
            let mut e = e.clone();
            if let Some(t) = &mut e.tensor {
                match TensorKind::try_from(t.kind) {
                    Ok(TensorKind::Input) => t.index = part.input_map[t.index as usize],
                    Ok(TensorKind::Output) => match part.output_map[t.index as usize] {
                        Some(o) => t.index = o,
                        None => {
                            // A write of a dropped output: nothing reads it any more.
                            remap.push(u32::MAX);
                            continue;
                        }
                    },
                    Ok(TensorKind::Local) => t.index += base_locals,
                    _ => {}
                }
            }
            for op in &mut e.operands {
                *op = remap[*op as usize];
            }
            remap.push(self.dag.expressions.len() as u32);
            self.dag.expressions.push(e);
        }
    }
}

/// The expression a WRITE writes (its last operand).
pub(crate) fn written_value(dag: &ir::ExpressionDag, write: usize) -> usize {
    *dag.expressions[write].operands.last().unwrap_or(&0) as usize
}

/// For each of `writes` whose value is a variable or an accumulator, that value: it is copied
/// at the write ([`Part::snapshot_before`]), so that later assignments cannot change what the
/// consumer is handed.
pub(crate) fn snapshots(
    kernel: &Kernel,
    writes: impl IntoIterator<Item = usize>,
) -> HashMap<usize, usize> {
    writes
        .into_iter()
        .filter_map(|w| {
            let Inst::Write { value, .. } = kernel.exprs[w].inst else {
                return None;
            };
            kernel
                .is_mutable(value as usize)
                .then_some((w, value as usize))
        })
        .collect()
}

/// One operator being appended to a [`Splice`].
pub(crate) struct Part<'a> {
    pub dag: &'a ir::ExpressionDag,
    /// Merged input index of each input.
    pub input_map: Vec<u32>,
    /// Merged output index of each output (`None`: its writes are dropped).
    pub output_map: Vec<Option<u32>>,
    /// Expressions not emitted: their uses refer to the given merged expression.
    pub replace: HashMap<usize, u32>,
    /// Before the write `i`, emit a copy of expression `snapshot_before[i]`.
    pub snapshot_before: HashMap<usize, usize>,
    /// The copies made: (the write they were made for, merged index of the copy).
    pub copies: RefCell<Vec<(usize, u32)>>,
}

impl Part<'_> {
    /// The merged expression holding what `write` of this part wrote, once appended with
    /// `remap`: the copy made at the write, or the value itself.
    pub fn handed(&self, write: usize, remap: &[u32]) -> u32 {
        self.copies
            .borrow()
            .iter()
            .find(|(w, _)| *w == write)
            .map(|(_, c)| *c)
            .unwrap_or(remap[written_value(self.dag, write)])
    }
}

pub(crate) fn names_of<'a>(
    a: &'a Node,
    b: &'a Node,
    originals: &'a [String],
) -> Vec<(usize, &'a str)> {
    let mut members: Vec<usize> = a.members.iter().chain(&b.members).copied().collect();
    members.sort_unstable();
    members
        .into_iter()
        .map(|m| (m, originals[m].as_str()))
        .collect()
}

/// The result of a merge: the new node and, for each output of the two old nodes, its index
/// in the new one (`None`: dropped).
pub(crate) struct Merged {
    pub node: Node,
    pub map_first: Vec<Option<u32>>,
    pub map_second: Vec<Option<u32>>,
}

/// Merges `producer` into `consumer` following `plan`. `keep[o]` says whether producer
/// output `o` must stay an output (requested, or read by another operator).
pub(crate) fn merge_vertical(
    producer: &Node,
    consumer: &Node,
    plan: &VerticalPlan,
    keep: &[bool],
    originals: &[String],
) -> Merged {
    let names = names_of(producer, consumer, originals);
    let mut s = Splice::new(consumer, &names);

    // Producer outputs that stay.
    let map_first = s.outputs_of(producer, Some(keep));
    let input_map_p = s.inputs_of(producer);
    let snapshot_before = snapshots(
        &Kernel::from_validated(&producer.dag),
        plan.handoffs.iter().map(|h| h.write),
    );
    let p_part = Part {
        dag: &producer.dag,
        input_map: input_map_p,
        output_map: map_first.clone(),
        replace: Default::default(),
        snapshot_before,
        copies: Default::default(),
    };
    let p_remap = s.append(&p_part);
    // The merged expression holding each handed-over output's value.
    let value_of = |o: u32| -> u32 {
        let h = plan
            .handoffs
            .iter()
            .find(|h| h.output == o)
            .expect("every read slot has a handoff");
        p_part.handed(h.write, &p_remap)
    };

    let map_second = s.outputs_of(consumer, None);
    let input_map_c = s.consumer_inputs(consumer, &plan.slot_output);
    let mut replace = HashMap::new();
    let kc = Kernel::from_validated(&consumer.dag);
    for i in 0..kc.exprs.len() {
        let slot = kc.input_read(i).map(|t| plan.slot_output.get(t as usize));
        if let Some(Some(Some(o))) = slot {
            replace.insert(i, value_of(*o));
        }
    }
    let c_part = Part {
        dag: &consumer.dag,
        input_map: input_map_c,
        output_map: map_second.clone(),
        replace,
        snapshot_before: Default::default(),
        copies: Default::default(),
    };
    s.append(&c_part);
    s.into_merged((producer, consumer), &names, map_first, map_second)
}

/// Whether an expression only computes a value (no effect, no possible fault): it may be
/// shared or dropped. Reads are not: an out-of-bounds read is an error to report.
pub(crate) fn is_pure(inst: &Inst) -> bool {
    ovl_ir::ops::info(inst.op()).is_some_and(|row| row.is_pure())
}

/// What makes two top-level expressions one value that [`tidy`] shares: a position's axis, or
/// a literal's bits, of one dtype.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Shared {
    Position(u32),
    Float(u64),
    Int(i64),
    UInt(u64),
    Bool(bool),
}

impl Shared {
    fn of(inst: &Inst) -> Option<Shared> {
        Some(match *inst {
            Inst::Position { axis } => Shared::Position(axis),
            Inst::Const(Literal::Float(v)) => Shared::Float(v.to_bits()),
            Inst::Const(Literal::Int(v)) => Shared::Int(v),
            Inst::Const(Literal::UInt(v)) => Shared::UInt(v),
            Inst::Const(Literal::Bool(v)) => Shared::Bool(v),
            _ => return None,
        })
    }
}

/// Tidies a merged operator: positions and literals repeated by the merged parts are shared
/// (the first one at the top level serves all later ones), and pure expressions nobody uses
/// are dropped.
///
/// The decisions are made on the typed form (the merged parts were valid, and so is their
/// concatenation); the protobuf form is what is rewritten.
pub(crate) fn tidy(dag: &mut ir::ExpressionDag) {
    let kernel = Kernel::from_validated(dag);
    let depths = ovl_ir::analysis::nesting_depths(dag);
    let n = dag.expressions.len();
    let mut canon: Vec<u32> = (0..n as u32).collect();
    let mut first: HashMap<(Option<DType>, Shared), u32> = HashMap::new();
    for i in 0..n {
        let e = &mut dag.expressions[i];
        for op in &mut e.operands {
            *op = canon[*op as usize];
        }
        let x = &kernel.exprs[i];
        let Some(key) = Shared::of(&x.inst).map(|s| (x.dtype, s)) else {
            continue;
        };
        match first.get(&key) {
            Some(&f) => canon[i] = f,
            None if depths[i] == 0 => {
                first.insert(key, i as u32);
            }
            None => {}
        }
    }
    let mut live = vec![false; n];
    let mut used = vec![false; n];
    for i in (0..n).rev() {
        let e = &dag.expressions[i];
        live[i] = canon[i] == i as u32 && (!is_pure(&kernel.exprs[i].inst) || used[i]);
        if live[i] {
            for &op in &e.operands {
                used[op as usize] = true;
            }
        }
    }
    let mut new_index = vec![u32::MAX; n];
    let mut kept = Vec::with_capacity(n);
    for (i, mut e) in std::mem::take(&mut dag.expressions).into_iter().enumerate() {
        if !live[i] {
            continue;
        }
        for op in &mut e.operands {
            *op = new_index[*op as usize];
        }
        new_index[i] = kept.len() as u32;
        kept.push(e);
    }
    dag.expressions = kept;
}
