//! Splitting a column kernel's elementwise pass off into a contiguous kernel (on the CPU).
//!
//! Fusion by looping (`looped`) makes softmax, layer norm or RMS norm along axis 0 one kernel
//! whose worker owns a column: loops down the column compute its statistics, and a last loop
//! `for k in 0..rows { y[k, c] = f(x[k, c], statistics) }` writes the result. The CPU runs
//! such a kernel as blocked workers (`ovl_ir::lockstep`): every pass walks a block of
//! neighbouring columns row by row, and with rows of 4 KiB or more each row of a pass is a new
//! page of memory. For the loops that only read (the statistics) that costs little, but the
//! pass that reads and writes the whole tensor ran at about half the speed of a contiguous
//! pass over the same bytes (measured on the development machine, AMD EPYC with AVX-512, a
//! `[4096, 1024]` f32 `y = x / s[c]` on 2 threads: 0.73-0.86 ms down blocks of 256 columns,
//! 1.1-1.3 ms down blocks of 64, 0.42-0.60 ms contiguous).
//!
//! So such a pass becomes a kernel of its own (as XLA does for column reductions): the
//! statistics kernel writes each value the pass uses from before it (a `[1, cols]` statistic,
//! at the worker's position) and no longer runs the pass; the pass kernel runs over the
//! whole output's workgroup, one worker per element in row-major order, computes the loop's
//! body with the loop's index replaced by its position along that axis, and reads the
//! statistics back. Every element is computed from the same values by the same operations, so
//! results are bit for bit those of the fused kernel; the reduction loops are untouched.
//!
//! A loop is split off when ([`find`]): the kernel runs as blocked workers and cannot fault
//! (interval analysis: a fault would be reported for another worker once split); the loop is
//! top-level, counted `0..n` by 1, and only computes and writes (no accumulator, variable,
//! local tensor, nested control flow or symbol); every write in it goes to an output written
//! nowhere else, at the worker's position on every axis but one, where it writes at the
//! loop's index (an axis of extent 1 in the workgroup, not the innermost); and the pass is
//! large and strided: at least [`MIN_ROWS`] rows, each at least [`PAGE_BYTES`] apart in the
//! output. Several such loops along the same axis and extent become one pass kernel. The
//! decision depends on the IR alone; only the CPU asks for it (`RowBudget::split_column_passes`:
//! a GPU's cooperative column layout writes a warp's neighbouring columns at once).

use crate::report::SplitPass;
use ovl_ir::ir::{self, Op, TensorKind};
use ovl_ir::lockstep::PositionArithmetic;
use ovl_ir::typed::{Inst, Kernel, ValueId};
use ovl_ir::DType;
use std::collections::{BTreeSet, HashMap};

/// The least rows a pass must have to be split off: one block of workers' worth
/// (`ovl_ir::lockstep::WORKERS`); a shorter pass is over before the page walk matters.
pub const MIN_ROWS: u64 = ovl_ir::lockstep::WORKERS;

/// The least distance between two rows of the pass's output, in bytes, for it to be split off:
/// a page, so that each row of a blocked pass is a new page (closer rows share pages and the
/// blocked pass streams).
pub const PAGE_BYTES: u64 = 4096;

/// The loops of one kernel that run as a separate pass (see the module).
struct Pass {
    /// Each loop's RANGE and END_RANGE expressions, in program order.
    loops: Vec<(usize, usize)>,
    /// The workgroup axis the loops' index stands for.
    axis: usize,
    /// The loops' trip count: that axis's extent in the pass kernel.
    rows: u64,
    /// The outputs the loops write.
    outputs: BTreeSet<u32>,
}

/// Whether the RANGE at `r` (closed at `e`) of `kernel` is a loop the module splits off, and
/// if so its axis, trip count and outputs.
fn pass_loop(kernel: &Kernel, r: usize, e: usize) -> Option<(usize, u64, BTreeSet<u32>)> {
    let (0, rows) = kernel.counted_loop(r)? else {
        return None;
    };
    let rank = kernel.workgroup.len();
    let workgroup: Vec<u64> = kernel
        .workgroup
        .iter()
        .map(|d| d.known())
        .collect::<Option<_>>()?;
    let is_position = |v: ValueId, axis: usize| matches!(kernel.exprs[v as usize].inst, Inst::Position { axis: a } if a as usize == axis);
    let mut axis = None;
    let mut outputs = BTreeSet::new();
    for x in &kernel.exprs[r + 1..e] {
        match &x.inst {
            Inst::Write {
                tensor, indices, ..
            } => {
                if tensor.kind != TensorKind::Output || indices.len() != rank {
                    return None;
                }
                let d = indices.iter().position(|&i| i as usize == r)?;
                let at_position = indices
                    .iter()
                    .enumerate()
                    .all(|(a, &i)| a == d || is_position(i, a));
                if !at_position || *axis.get_or_insert(d) != d {
                    return None;
                }
                let decl = kernel.outputs.get(tensor.index as usize)?;
                let mut want = workgroup.clone();
                want[d] = rows;
                let shape: Option<Vec<u64>> = decl.shape.iter().map(|s| s.known()).collect();
                if shape? != want {
                    return None;
                }
                outputs.insert(tensor.index);
            }
            Inst::Read { tensor, .. } if tensor.kind != TensorKind::Input => return None,
            Inst::Range { .. }
            | Inst::EndRange { .. }
            | Inst::If { .. }
            | Inst::Else { .. }
            | Inst::EndIf { .. }
            | Inst::WhileBegin { .. }
            | Inst::WhileCond { .. }
            | Inst::WhileEnd { .. }
            | Inst::Accumulator { .. }
            | Inst::Accumulate { .. }
            | Inst::Variable { .. }
            | Inst::Assign { .. }
            | Inst::LocalTensor { .. }
            | Inst::Symbol { .. } => return None,
            _ => {}
        }
    }
    let d = axis?;
    (d + 1 < rank && workgroup[d] == 1).then_some((d, rows, outputs))
}

/// The pass to split off `kernel` (see the module), if any.
fn find(dag: &ir::ExpressionDag, kernel: &Kernel) -> Option<Pass> {
    if dag.symbol_count > 0 || !dag.symbolic_workgroup.is_empty() || dag.library_call.is_some() {
        return None;
    }
    ovl_ir::lockstep::width(kernel)?;
    // A fault would be reported for another worker, and stop other elements, once split.
    if ovl_ir::intervals::Intervals::of(kernel)
        .first_possible_fault(dag)
        .is_some()
    {
        return None;
    }
    let mut pass: Option<Pass> = None;
    let mut depth = 0usize;
    for (r, x) in kernel.exprs.iter().enumerate() {
        match x.inst {
            Inst::Range { close, .. } => {
                let e = close as usize;
                if depth == 0 {
                    if let Some((axis, rows, outputs)) = pass_loop(kernel, r, e) {
                        match pass.as_mut() {
                            None => {
                                pass = Some(Pass {
                                    loops: vec![(r, e)],
                                    axis,
                                    rows,
                                    outputs,
                                })
                            }
                            Some(p) if p.axis == axis && p.rows == rows => {
                                p.loops.push((r, e));
                                p.outputs.extend(outputs);
                            }
                            // Loops of two kinds: keep the first kind only.
                            Some(_) => {}
                        }
                    }
                }
                depth += 1;
            }
            Inst::EndRange { .. } => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    let pass = pass?;
    // The outputs of the pass are written by its loops alone.
    let in_pass = |i: usize| pass.loops.iter().any(|&(r, e)| r < i && i < e);
    for (i, x) in kernel.exprs.iter().enumerate() {
        if let Inst::Write { tensor, .. } = &x.inst {
            if tensor.kind == TensorKind::Output
                && pass.outputs.contains(&tensor.index)
                && !in_pass(i)
            {
                return None;
            }
        }
    }
    // Large and strided: enough rows, each a page or more apart in every output.
    let row: u64 = kernel.workgroup[pass.axis + 1..]
        .iter()
        .map(|d| d.known().unwrap_or(0))
        .product();
    let strided = pass.outputs.iter().all(|&o| {
        let size = kernel.outputs[o as usize].dtype.size() as u64;
        row.saturating_mul(size) >= PAGE_BYTES
    });
    (pass.rows >= MIN_ROWS && strided).then_some(pass)
}

/// An integer constant expression.
fn int_const(dtype: i32, v: i64) -> ir::Expression {
    ir::Expression {
        code: Op::Const as i32,
        dtype,
        int_value: v,
        ..Default::default()
    }
}

fn position(axis: usize) -> ir::Expression {
    ir::Expression {
        code: Op::Position as i32,
        dtype: DType::I64.to_ir() as i32,
        axis: axis as u32,
        ..Default::default()
    }
}

/// Where an input of the pass kernel comes from.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum PassInput {
    /// The fused kernel's input of that index.
    Input(u32),
    /// The statistic of that index (an output the statistics kernel adds).
    Statistic(usize),
}

/// The two kernels a split makes.
struct Split {
    /// The statistics kernel: the fused kernel without the pass's loops, its outputs those
    /// the pass does not write (in order), then one per statistic.
    stats: ir::ExpressionDag,
    /// For each output of the fused kernel, the statistics kernel's output (`None`: the pass
    /// writes it).
    stats_output: Vec<Option<u32>>,
    /// The statistics kernel's output of each statistic.
    statistic_output: Vec<u32>,
    /// The pass kernel.
    pass: ir::ExpressionDag,
    /// Where each of its inputs comes from.
    pass_inputs: Vec<PassInput>,
    /// For each output of the fused kernel that the pass writes, the pass kernel's output.
    pass_output: HashMap<u32, u32>,
}

/// The pass kernel as it is built: its expressions, inputs and the statistics it reads.
struct PassBody<'a> {
    dag: &'a ir::ExpressionDag,
    kernel: &'a Kernel,
    positions: PositionArithmetic,
    /// The workgroup axis the loops' index stands for.
    axis: usize,
    /// The pass kernel's expressions so far.
    out: Vec<ir::Expression>,
    /// The statistics: (the loop they are first read in, the value), in order of first use.
    statistics: Vec<(usize, usize)>,
    /// Where each input of the pass kernel comes from.
    inputs: Vec<PassInput>,
    /// For each output of the fused kernel that the pass writes, the pass kernel's output.
    outputs: HashMap<u32, u32>,
    /// The constant 0 (an index) and the position on each axis.
    zero: u32,
    axis_positions: Vec<u32>,
}

impl<'a> PassBody<'a> {
    fn new(dag: &'a ir::ExpressionDag, kernel: &'a Kernel, axis: usize) -> PassBody<'a> {
        let mut body = PassBody {
            dag,
            kernel,
            positions: PositionArithmetic::of(kernel, (kernel.workgroup.len() - 1) as u32),
            axis,
            out: Vec::new(),
            statistics: Vec::new(),
            inputs: Vec::new(),
            outputs: HashMap::new(),
            zero: 0,
            axis_positions: Vec::new(),
        };
        body.zero = body.push(int_const(DType::I64.to_ir() as i32, 0));
        body.axis_positions = (0..dag.workgroup_shape.len())
            .map(|a| body.push(position(a)))
            .collect();
        body
    }

    fn push(&mut self, e: ir::Expression) -> u32 {
        self.out.push(e);
        (self.out.len() - 1) as u32
    }

    fn input(&mut self, p: PassInput) -> u32 {
        match self.inputs.iter().position(|&q| q == p) {
            Some(i) => i as u32,
            None => {
                self.inputs.push(p);
                (self.inputs.len() - 1) as u32
            }
        }
    }

    /// Copies the body of loop `l` of the pass, the RANGE at `r` closed at `e`.
    fn copy_loop(&mut self, l: usize, r: usize, e: usize) -> Option<()> {
        // This loop's values: its own, and those it takes from before it.
        let mut new_id: HashMap<usize, u32> = HashMap::new();
        new_id.insert(r, self.axis_positions[self.axis]);
        for i in r + 1..e {
            let mut x = self.dag.expressions[i].clone();
            for o in &mut x.operands {
                *o = self.import(*o as usize, l, &mut new_id)?;
            }
            match &self.kernel.exprs[i].inst {
                Inst::Read { tensor, .. } => {
                    x.tensor.as_mut()?.index = self.input(PassInput::Input(tensor.index));
                }
                Inst::Write { tensor, .. } => {
                    let next = self.outputs.len() as u32;
                    x.tensor.as_mut()?.index = *self.outputs.entry(tensor.index).or_insert(next);
                }
                _ => {}
            }
            let id = self.push(x);
            new_id.insert(i, id);
        }
        Some(())
    }

    /// The pass kernel's expression for value `v` of the fused kernel, read in loop `l` of
    /// the pass (`new_id`: that loop's values copied so far): its copy when the loop computes
    /// it; a constant or position copied (the pass axis's position, always 0 in the fused
    /// kernel, becomes a constant 0); integer arithmetic on positions copied whole; any other
    /// value a statistic, read back at the worker's position.
    fn import(&mut self, v: usize, l: usize, new_id: &mut HashMap<usize, u32>) -> Option<u32> {
        if let Some(&id) = new_id.get(&v) {
            return Some(id);
        }
        let x = self.kernel.exprs.get(v)?;
        let dtype = self.dag.expressions[v].dtype;
        let id = match x.inst {
            Inst::Position { axis } if axis as usize == self.axis => self.push(int_const(dtype, 0)),
            Inst::Const(_) | Inst::Position { .. } => self.push(self.dag.expressions[v].clone()),
            _ if self.positions.values.contains(&v) => {
                let mut e = self.dag.expressions[v].clone();
                for o in &mut e.operands {
                    *o = self.import(*o as usize, l, new_id)?;
                }
                self.push(e)
            }
            _ => {
                x.dtype?;
                // A value is read back from one statistic, written where the first loop that
                // reads it ran; an accumulator or variable may change between loops: one per
                // loop.
                let changes = matches!(x.inst, Inst::Accumulator { .. } | Inst::Variable { .. });
                let s = match self
                    .statistics
                    .iter()
                    .position(|&(at, w)| w == v && (at == l || !changes))
                {
                    Some(s) => s,
                    None => {
                        self.statistics.push((l, v));
                        self.statistics.len() - 1
                    }
                };
                let index = self.input(PassInput::Statistic(s));
                let operands = (0..self.axis_positions.len())
                    .map(|a| {
                        if a == self.axis {
                            self.zero
                        } else {
                            self.axis_positions[a]
                        }
                    })
                    .collect();
                self.push(ir::Expression {
                    code: Op::Read as i32,
                    dtype,
                    operands,
                    tensor: Some(ir::TensorRef {
                        kind: TensorKind::Input as i32,
                        index,
                    }),
                    ..Default::default()
                })
            }
        };
        new_id.insert(v, id);
        Some(id)
    }
}

/// Builds the two kernels of `pass` from `dag` (see the module); `None` if a value the pass
/// needs cannot be carried over.
fn split(dag: &ir::ExpressionDag, kernel: &Kernel, pass: &Pass) -> Option<Split> {
    let rank = dag.workgroup_shape.len();
    let mut body = PassBody::new(dag, kernel, pass.axis);
    for (l, &(r, e)) in pass.loops.iter().enumerate() {
        body.copy_loop(l, r, e)?;
    }
    let PassBody {
        out,
        statistics,
        inputs: pass_inputs,
        outputs: pass_output,
        ..
    } = body;
    let mut pass_dag = ir::ExpressionDag {
        version: dag.version,
        name: format!("{}_pass", dag.name),
        workgroup_shape: dag.workgroup_shape.clone(),
        source: dag.source.clone(),
        expressions: out,
        ..Default::default()
    };
    pass_dag.workgroup_shape[pass.axis] = pass.rows;
    // Inputs and outputs of the pass kernel.
    let stat_type = |v: usize| -> Option<ir::TensorType> {
        Some(ir::TensorType {
            dtype: kernel.exprs[v].dtype?.to_ir() as i32,
            shape: dag.workgroup_shape.clone(),
            symbolic: Vec::new(),
        })
    };
    for p in &pass_inputs {
        pass_dag.inputs.push(match *p {
            PassInput::Input(i) => dag.inputs.get(i as usize)?.clone(),
            PassInput::Statistic(s) => stat_type(statistics.get(s)?.1)?,
        });
    }
    let mut by_index: Vec<(u32, u32)> = pass_output.iter().map(|(&o, &p)| (p, o)).collect();
    by_index.sort_unstable();
    for &(_, o) in &by_index {
        pass_dag.outputs.push(dag.outputs.get(o as usize)?.clone());
    }

    // The statistics kernel: the outputs the pass does not write, renumbered, then the
    // statistics; each loop of the pass replaced by the writes of its statistics.
    let push = |out: &mut Vec<ir::Expression>, e: ir::Expression| {
        out.push(e);
        (out.len() - 1) as u32
    };
    let mut stats_output = Vec::with_capacity(dag.outputs.len());
    let mut stats_dag = ir::ExpressionDag {
        expressions: Vec::new(),
        outputs: Vec::new(),
        ..dag.clone()
    };
    for (o, t) in dag.outputs.iter().enumerate() {
        if pass.outputs.contains(&(o as u32)) {
            stats_output.push(None);
        } else {
            stats_output.push(Some(stats_dag.outputs.len() as u32));
            stats_dag.outputs.push(t.clone());
        }
    }
    let mut statistic_output = Vec::with_capacity(statistics.len());
    for &(_, v) in &statistics {
        statistic_output.push(stats_dag.outputs.len() as u32);
        stats_dag.outputs.push(stat_type(v)?);
    }
    let mut new_id: Vec<Option<u32>> = vec![None; dag.expressions.len()];
    let mut out = Vec::new();
    let mut i = 0;
    while i < dag.expressions.len() {
        if let Some(l) = pass.loops.iter().position(|&(r, _)| r == i) {
            // The statistics this loop reads, written where it ran.
            let here: Vec<u32> = (0..rank).map(|a| push(&mut out, position(a))).collect();
            for (s, &(loop_of, v)) in statistics.iter().enumerate() {
                if loop_of != l {
                    continue;
                }
                let mut operands = here.clone();
                operands.push(new_id[v]?);
                out.push(ir::Expression {
                    code: Op::Write as i32,
                    operands,
                    tensor: Some(ir::TensorRef {
                        kind: TensorKind::Output as i32,
                        index: statistic_output[s],
                    }),
                    ..Default::default()
                });
            }
            i = pass.loops[l].1 + 1;
            continue;
        }
        let mut x = dag.expressions[i].clone();
        for o in &mut x.operands {
            *o = new_id.get(*o as usize).copied().flatten()?;
        }
        if let Inst::Write { tensor, .. } = &kernel.exprs[i].inst {
            if tensor.kind == TensorKind::Output {
                x.tensor.as_mut()?.index = stats_output.get(tensor.index as usize).copied()??;
            }
        }
        new_id[i] = Some(push(&mut out, x));
        i += 1;
    }
    stats_dag.expressions = out;
    Some(Split {
        stats: stats_dag,
        stats_output,
        statistic_output,
        pass: pass_dag,
        pass_inputs,
        pass_output,
    })
}

/// What [`split_passes`] did to a graph.
pub(crate) struct Splits {
    /// One entry per operator split.
    pub passes: Vec<SplitPass>,
    /// For each operator of the graph before, its first operator after.
    pub first: Vec<usize>,
    /// For each operator of the graph after, the operator before it came from.
    pub origin: Vec<usize>,
}

/// Splits every operator of `dag` with a pass to split off (see the module) into its
/// statistics kernel and its pass kernel, placed right after it; references to the pass's
/// outputs (later operators' inputs, the graph's outputs) move to the pass kernel. Operators
/// whose split does not validate stay whole.
pub(crate) fn split_passes(dag: &mut ir::OperatorDag) -> Splits {
    let mut passes = Vec::new();
    let mut first = Vec::with_capacity(dag.operators.len());
    let mut origin = Vec::with_capacity(dag.operators.len());
    let mut operators = Vec::with_capacity(dag.operators.len());
    let mut operator_inputs: Vec<ir::OperatorInputs> = Vec::with_capacity(dag.operators.len());
    // Where each (old operator, output) lives now.
    let mut moved: HashMap<(u32, u32), (u32, u32)> = HashMap::new();
    let remap = |r: &ir::ValueRef, moved: &HashMap<(u32, u32), (u32, u32)>| -> ir::ValueRef {
        let mut r = *r;
        if let Some(ir::value_ref::Source::OpOutput(o)) = r.source.as_mut() {
            if let Some(&(op, out)) = moved.get(&(o.operator, o.output)) {
                o.operator = op;
                o.output = out;
            }
        }
        r
    };
    let op_output = |operator: usize, output: u32| ir::ValueRef {
        source: Some(ir::value_ref::Source::OpOutput(ir::OperatorOutput {
            operator: operator as u32,
            output,
        })),
    };
    for (k, op) in dag.operators.iter().enumerate() {
        let inputs: Vec<ir::ValueRef> = dag
            .operator_inputs
            .get(k)
            .map(|i| i.inputs.iter().map(|r| remap(r, &moved)).collect())
            .unwrap_or_default();
        first.push(operators.len());
        let kernel = Kernel::from_validated(op);
        let made = find(op, &kernel).and_then(|p| Some((split(op, &kernel, &p)?, p)));
        let made = made.filter(|(s, _)| {
            ovl_ir::validate::validate(&s.stats).is_ok()
                && ovl_ir::validate::validate(&s.pass).is_ok()
        });
        let Some((s, p)) = made else {
            for o in 0..op.outputs.len() as u32 {
                moved.insert((k as u32, o), (operators.len() as u32, o));
            }
            origin.push(k);
            operators.push(op.clone());
            operator_inputs.push(ir::OperatorInputs { inputs });
            continue;
        };
        // The statistics kernel (left out when it has nothing left to write).
        let stats_at = operators.len();
        let keep_stats = !s.stats.outputs.is_empty();
        if keep_stats {
            for (o, n) in s.stats_output.iter().enumerate() {
                if let Some(n) = n {
                    moved.insert((k as u32, o as u32), (stats_at as u32, *n));
                }
            }
            origin.push(k);
            operators.push(s.stats);
            operator_inputs.push(ir::OperatorInputs {
                inputs: inputs.clone(),
            });
        }
        let pass_at = operators.len();
        let pass_inputs = s
            .pass_inputs
            .iter()
            .map(|&p| match p {
                PassInput::Input(i) => inputs[i as usize],
                PassInput::Statistic(j) => op_output(stats_at, s.statistic_output[j]),
            })
            .collect();
        for (&o, &n) in &s.pass_output {
            moved.insert((k as u32, o), (pass_at as u32, n));
        }
        passes.push(SplitPass {
            kernel: op.name.clone(),
            pass: s.pass.name.clone(),
            shape: s.pass.workgroup_shape.clone(),
            axis: p.axis,
            statistics: s.statistic_output.len(),
        });
        origin.push(k);
        operators.push(s.pass);
        operator_inputs.push(ir::OperatorInputs {
            inputs: pass_inputs,
        });
    }
    for r in &mut dag.outputs {
        *r = remap(r, &moved);
    }
    dag.operators = operators;
    dag.operator_inputs = operator_inputs;
    Splits {
        passes,
        first,
        origin,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ovl_core::interp::{interpret_with, InterpOptions};
    use ovl_ir::builder::{Builder, IN, OUT};
    use ovl_ir::ir::value_ref::Source;
    use ovl_ir::ops::Combiner;
    use ovl_ir::HostTensor;

    /// A column RMS-norm-like kernel as looping leaves it: workgroup `[1, cols]`, a loop summing
    /// `x[k, c]²`, `s = sqrt(sum / rows)`, then a loop writing `y[k, c] = x[k, c] / s` (and,
    /// with `second`, another output `z[k, c] = x[k, c] - s` in a loop of its own), and the
    /// sum itself as an output `[1, cols]`. With `shift`, the pass reads `x[k + 1, c]`
    /// instead, which faults in its last iteration.
    fn rms_columns(rows: u64, cols: u64, second: bool, shift: bool) -> ir::OperatorDag {
        let mut b = Builder::new("rms", &[1, cols]);
        b.input(DType::F32, &[rows, cols]);
        b.output(DType::F32, &[rows, cols]);
        b.output(DType::F32, &[1, cols]);
        if second {
            b.output(DType::F32, &[rows, cols]);
        }
        let (p0, c) = (b.position(0), b.position(1));
        let zero = b.f32(0.0);
        let sum = b.accumulator(Combiner::Sum, zero);
        let (start, end, one) = (b.i64(0), b.i64(rows as i64), b.i64(1));
        let k = b.range(start, end, one);
        let x = b.read(IN, 0, &[k, c]);
        let sq = b.op(Op::Mul, &[x, x]);
        b.accumulate(sum, sq);
        b.end_range();
        let n = b.f32(rows as f32);
        let mean = b.op(Op::Div, &[sum, n]);
        let s = b.op(Op::Sqrt, &[mean]);
        let k = b.range(start, end, one);
        let row = if shift { b.op(Op::Add, &[k, one]) } else { k };
        let x = b.read(IN, 0, &[row, c]);
        let y = b.op(Op::Div, &[x, s]);
        b.write(OUT, 0, &[k, c], y);
        b.end_range();
        if second {
            let k = b.range(start, end, one);
            let x = b.read(IN, 0, &[k, c]);
            let z = b.op(Op::Sub, &[x, s]);
            b.write(OUT, 2, &[k, c], z);
            b.end_range();
        }
        b.write(OUT, 1, &[p0, c], sum);
        let op = b.build();
        let out = |output: u32| ir::ValueRef {
            source: Some(Source::OpOutput(ir::OperatorOutput {
                operator: 0,
                output,
            })),
        };
        let outputs = (0..op.outputs.len() as u32).map(out).collect();
        ir::OperatorDag {
            version: ovl_ir::IR_VERSION,
            inputs: vec![op.inputs[0].clone()],
            operator_inputs: vec![ir::OperatorInputs {
                inputs: vec![ir::ValueRef {
                    source: Some(Source::GraphInput(0)),
                }],
            }],
            operators: vec![op],
            outputs,
            symbols: Vec::new(),
        }
    }

    /// Runs `dag` operator by operator on the interpreter.
    fn evaluate(dag: &ir::OperatorDag, x: &HostTensor) -> Vec<HostTensor> {
        let mut results: Vec<Vec<HostTensor>> = Vec::new();
        let fetch = |results: &[Vec<HostTensor>], v: &ir::ValueRef| match v.source.as_ref() {
            Some(Source::GraphInput(_)) => x.clone(),
            Some(Source::OpOutput(o)) => results[o.operator as usize][o.output as usize].clone(),
            None => panic!("no source"),
        };
        for (op, wiring) in dag.operators.iter().zip(&dag.operator_inputs) {
            let ins: Vec<HostTensor> = wiring.inputs.iter().map(|v| fetch(&results, v)).collect();
            let refs: Vec<&HostTensor> = ins.iter().collect();
            let mut outs: Vec<HostTensor> = op
                .outputs
                .iter()
                .map(|t| {
                    let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
                    HostTensor::zeros(DType::from_ir(t.dtype).expect("dtype"), &shape)
                })
                .collect();
            interpret_with(op, &refs, &mut outs, &InterpOptions::default()).expect("runs");
            results.push(outs);
        }
        dag.outputs.iter().map(|v| fetch(&results, v)).collect()
    }

    fn input(rows: u64, cols: u64) -> HostTensor {
        let n = (rows * cols) as usize;
        let v: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 101) as f32) / 50.0 - 1.0)
            .collect();
        HostTensor::from_vec(&[rows as usize, cols as usize], v).expect("x")
    }

    fn bits(t: &HostTensor) -> Vec<u32> {
        t.as_slice::<f32>()
            .expect("f32")
            .iter()
            .map(|v| v.to_bits())
            .collect()
    }

    #[test]
    fn a_long_strided_pass_runs_as_its_own_kernel_bit_for_bit() {
        for second in [false, true] {
            let (rows, cols) = (64, 1030);
            let dag = rms_columns(rows, cols, second, false);
            let mut split = dag.clone();
            let splits = split_passes(&mut split);
            ovl_ir::validate::validate_operator_dag(&split).expect("a valid graph");
            assert_eq!(splits.passes.len(), 1);
            assert_eq!(split.operators.len(), 2);
            assert_eq!(splits.origin, vec![0, 0]);
            assert_eq!(splits.first, vec![0]);
            let pass = &split.operators[1];
            assert_eq!(pass.workgroup_shape, vec![rows, cols]);
            assert_eq!(pass.outputs.len(), if second { 2 } else { 1 });
            // The statistics kernel keeps the sum and adds one statistic, `s`.
            assert_eq!(split.operators[0].outputs.len(), 2);
            assert_eq!(splits.passes[0].statistics, 1);
            assert_eq!(splits.passes[0].axis, 0);
            let x = input(rows, cols);
            let (want, got) = (evaluate(&dag, &x), evaluate(&split, &x));
            assert_eq!(want.len(), got.len());
            for (w, g) in want.iter().zip(&got) {
                assert_eq!(w.shape, g.shape);
                assert_eq!(bits(w), bits(g));
            }
        }
    }

    #[test]
    fn short_close_or_faulting_passes_stay_in_the_kernel() {
        // 63 rows: fewer than MIN_ROWS; 1000 columns: rows 4000 bytes apart; a read that may
        // fall outside `x`.
        for (rows, cols, shift) in [
            (MIN_ROWS - 1, 1030, false),
            (64, 1000, false),
            (64, 1030, true),
        ] {
            let mut dag = rms_columns(rows, cols, false, shift);
            let before = dag.clone();
            assert!(split_passes(&mut dag).passes.is_empty());
            assert_eq!(dag, before);
        }
    }
}
