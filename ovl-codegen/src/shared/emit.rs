//! The worker-program emitter shared by the C++ and CUDA backends: the IR of one operator
//! becomes the body one worker runs, in either dialect ([`Dialect`]), so that both backends give
//! every IR construct the same meaning. The frames around it (threads and row loops on the CPU,
//! a grid-stride loop on the GPU) are `crate::cpu::frame` and `crate::cuda::frame`.
//!
//! - Expression `%k` of the IR is the C++ local `vk`, emitted in program order: values are
//!   `const` typed locals, VARIABLEs mutable locals, RANGE loop indices the `for` variables.
//!   Control flow becomes structured C++ (`if`/`else`, `for`, `while (true) { cond; if (!c)
//!   break; body }`). Elementwise operations are spelled as the op table
//!   ([`ovl_ir::ops`]) says.
//! - Known sizes and strides are compile-time constants; a dimension sized at run time
//!   ([`super::sizes`]) is spelled from the kernel's symbol parameters `ovl_S<k>`. An index is
//!   checked only where the interval analysis ([`super::bounds`]) cannot prove it inside its
//!   dimension (for a dimension sized at run time: see [`super::bounds::SymBound`]); a failed
//!   check records
//!   the fault in the status struct and ends the worker: `goto ovl_stop`, a label after the
//!   worker program's block ([`Emitter::worker_program`]), so that staged loops exit (a
//!   non-positive RANGE step does the same).

use super::bounds::{Interval, SymBound};
use super::literal::{ctype, cuda_literal, int_literal_value, literal};
use super::sizes::{self, Size};
use crate::error::{defined_at, CodegenError};
use ovl_ir::ir::{self, Op, TensorKind};
use ovl_ir::names::kind_word;
use ovl_ir::ops::{self, Category, Combiner, OpInfo, ResultRule, REDUCE_LANES};
use ovl_ir::DType;
use std::fmt::Write as _;

/// The largest local tensor, in bytes per worker, the C++ backend accepts: as much as all
/// locals of a worker together (they live on the worker thread's stack). Operators written
/// with the DSL keep to 64 KiB per local, which every backend accepts; row reuse
/// (`ovl_fuse::RowBudget::CPU`) may add larger row buffers to kernels for the CPU.
pub const MAX_LOCAL_BYTES: u64 = MAX_LOCALS_TOTAL_BYTES;
/// The largest local tensor, in bytes per worker, the CUDA backend accepts: a GPU reserves
/// local memory for every thread that can be resident at once.
pub const MAX_CUDA_LOCAL_BYTES: u64 = 64 * 1024;
/// The largest total of all local tensors of one worker, in bytes.
pub const MAX_LOCALS_TOTAL_BYTES: u64 = 256 * 1024;

/// The language the body of an operator is emitted in. The worker program (one statement per
/// IR expression) is the same C++ for both; they differ in the prelude that defines the `ovl::`
/// helpers, in how the current worker is named, in literals the CUDA compiler has no builtin
/// for, and in index arithmetic (32-bit on the GPU where a tensor is small enough).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// C++17 for the host compiler (see [`crate::cpu::abi`]).
    Cpp,
    /// CUDA C++17 for NVRTC (see [`crate::cuda`]).
    Cuda,
}

/// Geometry of one tensor the program touches.
pub(crate) struct TensorInfo {
    pub kind: TensorKind,
    pub index: u32,
    pub dtype: DType,
    /// The shape as traced (a dimension sized at run time holds an example: use `sizes`).
    pub shape: Vec<u64>,
    /// Each dimension's size.
    pub sizes: Vec<Size>,
    /// Strides of a tensor whose sizes are all known (else unused: see `TensorInfo::stride`).
    strides: Vec<u64>,
    /// The element count when every size is known, else `None`.
    pub elements: Option<u64>,
    /// The C++ name: `in0`, `out1`, `loc2`.
    pub name: String,
}

impl TensorInfo {
    /// The stride of `axis` of a tensor sized at run time, as a C++ `int64_t` expression
    /// (`None`: 1): the known sizes inside it folded into one literal, times the symbolic ones.
    fn stride(&self, axis: usize) -> Option<String> {
        let mut known = 1u64;
        let mut factors = Vec::new();
        for s in &self.sizes[axis + 1..] {
            match s.known() {
                Some(n) => known = known.saturating_mul(n).min(i64::MAX as u64),
                None => factors.push(s.cpp()),
            }
        }
        if known != 1 || factors.is_empty() {
            factors.push(format!("{known}LL"));
        }
        match factors.as_slice() {
            [one] if one == "1LL" => None,
            _ => Some(factors.join(" * ")),
        }
    }
}

/// What emitting one expression gives: its value dtype (None for a statement) and the interval
/// of an integer value when known.
type Emitted = Result<(Option<DType>, Option<Interval>), CodegenError>;

/// The index operands that need a bounds check: (axis, C++ variable, the dimension's size as a
/// C++ `uint64_t` expression).
type Unproven = Vec<(usize, String, String)>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frame {
    If {
        else_seen: bool,
    },
    /// A RANGE loop closed by this many braces; a reduction loop folds its accumulators'
    /// lanes after the first `inner` of them, and its block loop starts at `block` in the body.
    Range {
        braces: usize,
        opener: usize,
        inner: usize,
        block: Option<usize>,
    },
    WhileCond,
    WhileBody,
}

/// The state of one emission; after [`emit`], `body` holds the worker program. A backend's
/// frame (`crate::cpu::frame`, `crate::cuda::frame`) wraps it into a translation unit.
pub(crate) struct Emitter<'a> {
    pub dag: &'a ir::ExpressionDag,
    pub key: &'a str,
    dialect: Dialect,
    pub inputs: Vec<TensorInfo>,
    pub outputs: Vec<TensorInfo>,
    pub locals: Vec<TensorInfo>,
    /// The workgroup as traced (a dimension sized at run time holds an example: use `sizes`).
    pub workgroup: Vec<u64>,
    /// Each workgroup dimension's size.
    pub sizes: Vec<Size>,
    /// The number of workers when every workgroup size is known (else `None`).
    pub workers: Option<u64>,
    /// The number of symbol values the kernel takes (`ovl_S0`, `ovl_S1`, ...).
    pub symbol_count: u32,
    /// Value dtype of each expression (None: a statement).
    types: Vec<Option<DType>>,
    ops: Vec<Op>,
    /// Interval of each integer value.
    intervals: Vec<Option<Interval>>,
    /// A bound of each integer value by a symbol value, when known.
    sym_bounds: Vec<Option<SymBound>>,
    /// The value of each integer CONST.
    consts: Vec<Option<i128>>,
    frames: Vec<Frame>,
    /// The innermost loop around each expression (`ovl_ir::analysis::innermost_loops`).
    loops: Vec<Option<usize>>,
    /// Each reduction loop's accumulators (`ovl_ir::analysis::reduction_loops`).
    reductions: std::collections::BTreeMap<usize, Vec<usize>>,
    /// Where the block loop of the reduction loop being opened starts in `body`.
    block_mark: Option<usize>,
    /// The worker program; the frames place it with [`Emitter::worker_program`].
    body: String,
    indent: usize,
    /// Whether the body jumps to `ovl_stop` (it has a fault check).
    stops: std::cell::Cell<bool>,
    /// In the second pass that emits the blocked program: its layout (see `blocked`).
    blocked: Option<blocked::Blocked>,
    /// The loop of the blocked program being emitted.
    blocked_range_open: Option<usize>,
    /// The program of [`blocked::BLOCK`] workers in lockstep, for a C++ kernel that gains
    /// from it (see `blocked`); the frame runs it over each row's full blocks and the worker
    /// program over the rest.
    pub blocked_program: Option<String>,
}

mod blocked;
pub(crate) use blocked::BLOCK as BLOCKED_WORKERS;

/// The statement that ends the current worker after a fault was recorded (see
/// [`Emitter::worker_program`]).
const STOP: &str = "goto ovl_stop;";

/// Checks the operator's tensors and emits the worker program of every expression into
/// [`Emitter::body`], in `dialect`.
pub(crate) fn emit<'a>(
    dag: &'a ir::ExpressionDag,
    key: &'a str,
    dialect: Dialect,
) -> Result<Emitter<'a>, CodegenError> {
    let mut e = Emitter::new(dag, key, dialect)?;
    for k in 0..dag.expressions.len() {
        let (ty, iv) = e.expression(k)?;
        e.types.push(ty);
        e.intervals.push(iv);
    }
    if let Some(f) = e.frames.last() {
        return Err(e.err(
            None,
            format!("control flow is not closed at the end ({f:?})"),
        ));
    }
    // Workers in lockstep, where the operator has the shape for it and cannot fault.
    let innermost = e.sizes.last().and_then(|s| match s {
        Size::Known(n) => Some(*n),
        Size::Symbolic { .. } => None,
    });
    if dialect == Dialect::Cpp && !e.stops.get() {
        if let Some(plan) = blocked::plan(dag, innermost) {
            let mut b = Emitter::new(dag, key, dialect)?;
            b.blocked = Some(plan);
            for k in 0..dag.expressions.len() {
                let (ty, iv) = b.expression(k)?;
                b.types.push(ty);
                b.intervals.push(iv);
            }
            b.close_segment();
            let layout = b
                .blocked
                .as_ref()
                .map(|p| p.prelude.clone())
                .unwrap_or_default();
            let arrays = b.blocked_arrays();
            let pad = "  ".repeat(3);
            e.blocked_program = Some(format!(
                "{}{}{}",
                indent_text(&arrays, &pad),
                indent_text(&layout, &pad),
                b.body
            ));
        }
    }
    Ok(e)
}

/// `text` with `pad` before every line.
fn indent_text(text: &str, pad: &str) -> String {
    text.lines().map(|l| format!("{pad}{l}\n")).collect()
}

/// A rough cost of one worker, used to decide whether to run on several threads: each
/// expression counts once per run of the blocks around it, a loop with constant bounds
/// (`ovl_ir::analysis::counted_range`) by its trip count, a loop `0..s` over the value of a
/// symbol (a size given at run time) by that value, any other loop (a `while`, bounds computed
/// by the worker) as 64 iterations. A softmax worker over a row of 65536 costs about a million,
/// so 64 such workers run on every core.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct WorkerCost {
    /// `coefficient × Π value of symbol s`, summed.
    terms: Vec<(u64, Vec<u32>)>,
}

impl WorkerCost {
    /// The cost when the symbols have `values` (a missing value counts as 64).
    pub(crate) fn at(&self, values: &[u64]) -> u64 {
        let value = |s: &u32| values.get(*s as usize).copied().unwrap_or(UNKNOWN_TRIPS);
        self.terms
            .iter()
            .map(|(c, syms)| syms.iter().map(value).fold(*c, u64::saturating_mul))
            .fold(0u64, u64::saturating_add)
            .max(1)
    }
}

/// How often a loop whose trip count is not known runs, for [`worker_cost`].
const UNKNOWN_TRIPS: u64 = 64;

/// The [`WorkerCost`] of `dag`.
pub(crate) fn worker_cost(dag: &ir::ExpressionDag) -> WorkerCost {
    /// A loop's iterations: a count, or the value of a symbol.
    #[derive(Clone, Copy)]
    enum Trips {
        Known(u64),
        Symbol(u32),
    }
    let is = |id: u32, op: Op| {
        dag.expressions
            .get(id as usize)
            .is_some_and(|e| e.code == op as i32)
    };
    let int = |id: u32| dag.expressions.get(id as usize).map(|e| e.int_value);
    let mut open: Vec<Trips> = Vec::new();
    let mut terms: std::collections::BTreeMap<Vec<u32>, u64> = Default::default();
    for (i, e) in dag.expressions.iter().enumerate() {
        match Op::try_from(e.code) {
            Ok(Op::Range) => open.push(match ovl_ir::analysis::counted_range(dag, i) {
                Some((a, b)) => Trips::Known(b - a),
                None => match e.operands[..] {
                    [start, end, step]
                        if is(start, Op::Const)
                            && int(start) == Some(0)
                            && is(step, Op::Const)
                            && int(step) == Some(1)
                            && is(end, Op::Symbol) =>
                    {
                        Trips::Symbol(dag.expressions[end as usize].axis)
                    }
                    _ => Trips::Known(UNKNOWN_TRIPS),
                },
            }),
            Ok(Op::WhileBegin) => open.push(Trips::Known(UNKNOWN_TRIPS)),
            Ok(Op::EndRange | Op::WhileEnd) => {
                open.pop();
            }
            _ => {}
        }
        let mut coefficient = 1u64;
        let mut symbols = Vec::new();
        for t in &open {
            match *t {
                Trips::Known(n) => coefficient = coefficient.saturating_mul(n),
                Trips::Symbol(s) => symbols.push(s),
            }
        }
        symbols.sort_unstable();
        let c = terms.entry(symbols).or_default();
        *c = c.saturating_add(coefficient);
    }
    WorkerCost {
        terms: terms.into_iter().map(|(s, c)| (c, s)).collect(),
    }
}

impl<'a> Emitter<'a> {
    fn err(&self, expression: Option<usize>, message: impl Into<String>) -> CodegenError {
        CodegenError::Unsupported {
            operator: self.dag.name.clone(),
            defined_at: defined_at(self.dag),
            expression,
            message: message.into(),
        }
    }

    fn new(
        dag: &'a ir::ExpressionDag,
        key: &'a str,
        dialect: Dialect,
    ) -> Result<Emitter<'a>, CodegenError> {
        let mut e = Emitter {
            dag,
            key,
            dialect,
            inputs: Vec::new(),
            outputs: Vec::new(),
            locals: Vec::new(),
            workgroup: dag.workgroup_shape.clone(),
            sizes: sizes::sizes(&dag.workgroup_shape, &dag.symbolic_workgroup),
            workers: None,
            symbol_count: dag.symbol_count,
            types: Vec::with_capacity(dag.expressions.len()),
            ops: Vec::with_capacity(dag.expressions.len()),
            intervals: Vec::with_capacity(dag.expressions.len()),
            sym_bounds: vec![None; dag.expressions.len()],
            consts: Vec::with_capacity(dag.expressions.len()),
            frames: Vec::new(),
            loops: ovl_ir::analysis::innermost_loops(dag),
            reductions: ovl_ir::analysis::reduction_loops(dag),
            block_mark: None,
            body: String::new(),
            indent: 3,
            stops: std::cell::Cell::new(false),
            blocked: None,
            blocked_range_open: None,
            blocked_program: None,
        };
        if e.workgroup.is_empty() {
            return Err(e.err(None, "the workgroup shape is empty"));
        }
        e.check_symbolic(&dag.symbolic_workgroup, e.workgroup.len(), "the workgroup")?;
        if e.sizes.contains(&Size::Known(0)) {
            return Err(e.err(None, "a workgroup dimension is 0"));
        }
        if !sizes::any_symbolic(&e.sizes) {
            e.workers = Some(
                e.workgroup
                    .iter()
                    .try_fold(1u64, |n, &d| n.checked_mul(d))
                    .filter(|&n| n <= i64::MAX as u64)
                    .ok_or_else(|| e.err(None, "the workgroup has more than 2^63 workers"))?,
            );
        }
        e.inputs = e.tensors(TensorKind::Input, &dag.inputs, "in")?;
        e.outputs = e.tensors(TensorKind::Output, &dag.outputs, "out")?;
        e.locals = e.tensors(TensorKind::Local, &dag.locals, "loc")?;
        let mut total = 0u64;
        let limit = match dialect {
            Dialect::Cpp => MAX_LOCAL_BYTES,
            Dialect::Cuda => MAX_CUDA_LOCAL_BYTES,
        };
        for l in &e.locals {
            let Some(elements) = l.elements else {
                return Err(e.err(
                    None,
                    format!(
                        "local {} has a dimension sized at run time; a local tensor lives on \
                         each worker's stack and needs sizes known when the operator is compiled",
                        l.index
                    ),
                ));
            };
            let bytes = elements.saturating_mul(l.dtype.size() as u64);
            total = total.saturating_add(bytes);
            if bytes > limit || total > MAX_LOCALS_TOTAL_BYTES {
                return Err(CodegenError::LocalTooLarge {
                    operator: dag.name.clone(),
                    defined_at: defined_at(dag),
                    local: l.index as usize,
                    ty: format!("{}{:?}", l.dtype, l.shape),
                    bytes: if bytes > limit { bytes } else { total },
                    limit,
                    total_limit: MAX_LOCALS_TOTAL_BYTES,
                });
            }
        }
        Ok(e)
    }

    fn tensors(
        &self,
        kind: TensorKind,
        list: &[ir::TensorType],
        prefix: &str,
    ) -> Result<Vec<TensorInfo>, CodegenError> {
        list.iter()
            .enumerate()
            .map(|(i, t)| {
                let word = kind_word(kind);
                let dtype = DType::from_ir(t.dtype).ok_or_else(|| {
                    self.err(
                        None,
                        format!("{word} {i} has an unsupported dtype ({})", t.dtype),
                    )
                })?;
                self.check_symbolic(&t.symbolic, t.shape.len(), &format!("{word} {i}"))?;
                let sizes = sizes::sizes(&t.shape, &t.symbolic);
                // Sized at run time: the runtime checks the element count of every run.
                let elements = if sizes::any_symbolic(&sizes) {
                    None
                } else {
                    Some(
                        t.shape
                            .iter()
                            .try_fold(1u64, |n, &d| n.checked_mul(d))
                            .filter(|&n| {
                                n.checked_mul(dtype.size() as u64)
                                    .is_some_and(|b| b <= i64::MAX as u64)
                            })
                            .ok_or_else(|| {
                                self.err(
                                    None,
                                    format!("{word} {i} {:?} has too many elements", t.shape),
                                )
                            })?,
                    )
                };
                let mut strides = vec![1u64; t.shape.len()];
                for a in (0..t.shape.len().saturating_sub(1)).rev() {
                    // Saturating: only a tensor with a zero dimension (never indexed in
                    // bounds) could exceed i64::MAX.
                    strides[a] = strides[a + 1]
                        .saturating_mul(t.shape[a + 1])
                        .min(i64::MAX as u64);
                }
                Ok(TensorInfo {
                    kind,
                    index: i as u32,
                    dtype,
                    shape: t.shape.clone(),
                    sizes,
                    strides,
                    elements,
                    name: format!("{prefix}{i}"),
                })
            })
            .collect()
    }

    /// Checks the symbolic dimensions of a shape of rank `rank` (`what`: for messages): each
    /// names a dimension of the shape once, a symbol below `symbol_count`, a scale >= 1.
    fn check_symbolic(
        &self,
        symbolic: &[ir::SymbolicDim],
        rank: usize,
        what: &str,
    ) -> Result<(), CodegenError> {
        let mut seen = vec![false; rank];
        for s in symbolic {
            let d = s.dim as usize;
            let problem = if d >= rank {
                Some(format!("names dimension {d} of a rank-{rank} shape"))
            } else if std::mem::replace(&mut seen[d], true) {
                Some(format!("names dimension {d} twice"))
            } else if s.symbol >= self.dag.symbol_count {
                Some(format!(
                    "uses symbol {} but the operator takes {} symbol value(s)",
                    s.symbol, self.dag.symbol_count
                ))
            } else if s.scale < 1 {
                Some(format!("has scale {} (it must be at least 1)", s.scale))
            } else {
                None
            };
            if let Some(p) = problem {
                return Err(self.err(None, format!("a size of {what} sized at run time {p}")));
            }
        }
        Ok(())
    }

    fn line(&mut self, s: &str) {
        for _ in 0..self.indent {
            self.body.push_str("  ");
        }
        self.body.push_str(s);
        self.body.push('\n');
    }

    /// The C++ expression of the flattened index of the current worker.
    fn worker_expr(&self) -> String {
        match self.dialect {
            Dialect::Cpp => format!("(ovl_wrow + ovl_p{})", self.workgroup.len() - 1),
            Dialect::Cuda => "ovl_w".to_string(),
        }
    }

    /// The literal of an expression in this dialect (CUDA has no builtin for infinities).
    fn literal(&self, d: DType, float_value: f64, int_value: i64, uint_value: u64) -> String {
        match self.dialect {
            Dialect::Cpp => literal(d, float_value, int_value, uint_value),
            Dialect::Cuda => cuda_literal(d, float_value, int_value, uint_value),
        }
    }

    fn tensor(&self, k: usize, r: &Option<ir::TensorRef>) -> Result<&TensorInfo, CodegenError> {
        let r = r
            .as_ref()
            .ok_or_else(|| self.err(Some(k), "the expression names no tensor"))?;
        let list = match TensorKind::try_from(r.kind) {
            Ok(TensorKind::Input) => &self.inputs,
            Ok(TensorKind::Output) => &self.outputs,
            Ok(TensorKind::Local) => &self.locals,
            _ => return Err(self.err(Some(k), format!("unknown tensor kind {}", r.kind))),
        };
        list.get(r.index as usize).ok_or_else(|| {
            self.err(
                Some(k),
                format!(
                    "{} {} does not exist",
                    kind_word(list_kind(r.kind)),
                    r.index
                ),
            )
        })
    }

    /// Operand `j` of expression `k`: an earlier value-producing expression.
    fn operand(&self, k: usize, j: usize) -> Result<(usize, DType), CodegenError> {
        let e = &self.dag.expressions[k];
        let o = *e
            .operands
            .get(j)
            .ok_or_else(|| self.err(Some(k), format!("operand {j} is missing")))?
            as usize;
        if o >= k {
            return Err(self.err(
                Some(k),
                format!("operand {j} (%{o}) is not an earlier expression"),
            ));
        }
        match self.types[o] {
            Some(d) => Ok((o, d)),
            None => Err(self.err(
                Some(k),
                format!("operand {j} (%{o}) is a statement, not a value"),
            )),
        }
    }

    fn operand_count(&self, k: usize, n: usize) -> Result<(), CodegenError> {
        let got = self.dag.expressions[k].operands.len();
        if got != n {
            return Err(self.err(Some(k), format!("expected {n} operand(s), found {got}")));
        }
        Ok(())
    }

    fn declared(&self, k: usize) -> Result<DType, CodegenError> {
        let d = self.dag.expressions[k].dtype;
        DType::from_ir(d).ok_or_else(|| self.err(Some(k), format!("unsupported result dtype {d}")))
    }

    fn check_result(&self, k: usize, d: DType) -> Result<(), CodegenError> {
        let declared = self.dag.expressions[k].dtype;
        if declared != d.to_ir() as i32 {
            return Err(self.err(
                Some(k),
                format!("the declared dtype ({declared}) should be {d}"),
            ));
        }
        Ok(())
    }

    fn interval(&self, o: usize) -> Option<Interval> {
        self.intervals[o].or_else(|| self.types[o].and_then(Interval::of_dtype))
    }

    /// Whether value `o` is provably a valid index of a dimension of size `size`: by its
    /// interval for a known size, by its interval and its symbolic bound for one sized at run
    /// time.
    fn proven_inside(&self, o: usize, size: Size) -> bool {
        let Some(iv) = self.interval(o) else {
            return false;
        };
        match size {
            Size::Known(n) => iv.inside(n),
            Size::Symbolic {
                symbol,
                scale,
                offset,
            } => iv.lo >= 0 && self.sym_bounds[o].is_some_and(|b| b.below(symbol, scale, offset)),
        }
    }

    /// Index operands `0..rank` of a READ/WRITE: (C++ linear index, the unproven axes as
    /// `(axis, variable, size)`).
    fn indices(&self, k: usize, t: &TensorInfo) -> Result<(String, Unproven), CodegenError> {
        let mut terms = Vec::new();
        let mut unproven = Vec::new();
        // On the GPU, 64-bit integer arithmetic costs several instructions: index a tensor whose
        // elements a 32-bit int counts in 32 bits (every index is in range where it is used).
        // A tensor sized at run time is indexed in 64 bits.
        let narrow =
            self.dialect == Dialect::Cuda && t.elements.is_some_and(|n| n <= i32::MAX as u64);
        for axis in 0..t.shape.len() {
            let (o, d) = self.operand(k, axis)?;
            if !d.is_int() {
                return Err(self.err(Some(k), format!("index operand {axis} has dtype {d}")));
            }
            let v = format!("v{o}");
            let size = t.sizes[axis];
            if !self.proven_inside(o, size) {
                unproven.push((axis, v.clone(), size.cpp_unsigned()));
            }
            if t.elements.is_none() {
                let idx = if d == DType::I64 {
                    v
                } else {
                    format!("(int64_t){v}")
                };
                terms.push(match t.stride(axis) {
                    None => idx,
                    Some(stride) => format!("{idx} * {stride}"),
                });
                continue;
            }
            let stride = t.strides[axis];
            if narrow {
                let idx = if d == DType::I32 {
                    v
                } else {
                    format!("(int32_t){v}")
                };
                terms.push(if stride == 1 {
                    idx
                } else {
                    format!("{idx} * {stride}")
                });
                continue;
            }
            let idx = if d == DType::I64 {
                v
            } else {
                format!("(int64_t){v}")
            };
            terms.push(if stride == 1 {
                idx
            } else {
                format!("{idx} * {stride}LL")
            });
        }
        let linear = if terms.is_empty() {
            "0".to_string()
        } else {
            terms.join(" + ")
        };
        Ok((linear, unproven))
    }

    fn bounds_condition(unproven: &[(usize, String, String)]) -> String {
        unproven
            .iter()
            .map(|(_, v, size)| format!("ovl::inb({v}, {size})"))
            .collect::<Vec<_>>()
            .join(" && ")
    }

    /// The statements run when a bounds check fails: record the fault, end the worker.
    fn fault_chain(
        &self,
        k: usize,
        t: &TensorInfo,
        unproven: &[(usize, String, String)],
    ) -> String {
        self.stops.set(true);
        let mut s = String::new();
        let w = self.worker_expr();
        for (i, (axis, v, size)) in unproven.iter().enumerate() {
            let call = format!(
                "ovl::oob(ovl_st, {k}, {}, {}, {axis}, {v}, {size}, {w});",
                t.kind as i32, t.index
            );
            if i + 1 < unproven.len() {
                let _ = write!(s, "if (!ovl::inb({v}, {size})) {call} else ");
            } else {
                s.push_str(&call);
            }
        }
        s.push(' ');
        s.push_str(STOP);
        s
    }

    /// The worker program as the frames place it, once per worker at `indent` levels. When it
    /// can fault, it is a block followed by the label `ovl_stop` that a fault jumps to: a
    /// fault ends the worker, out of any staged loop (proto/ovl.proto); the block keeps every
    /// local of the program out of the label's scope.
    pub(crate) fn worker_program(&self, indent: usize) -> String {
        if !self.stops.get() {
            return self.body.clone();
        }
        let pad = "  ".repeat(indent);
        format!(
            "{pad}{{
{}{pad}}}
{pad}ovl_stop:;
",
            self.body
        )
    }

    /// Emits expression `k`; returns its value dtype (None for statements) and the interval of
    /// an integer value when known.
    fn expression(&mut self, k: usize) -> Emitted {
        let dag = self.dag;
        let e = &dag.expressions[k];
        let op = Op::try_from(e.code)
            .map_err(|_| self.err(Some(k), format!("unknown opcode {}", e.code)))?;
        self.ops.push(op);
        self.consts.push(None);
        if self.blocked.is_some() {
            return self.blocked_expression(k);
        }
        self.scalar_expression(k, op)
    }

    /// Emits expression `k`, of opcode `op`, as one worker runs it.
    fn scalar_expression(&mut self, k: usize, op: Op) -> Emitted {
        let Some(row) = ops::info(op) else {
            return Err(self.err(Some(k), "unspecified opcode"));
        };
        match row.category {
            Category::Unary => return self.unary(k, row),
            Category::Binary | Category::Compare => return self.binary(k, row),
            _ => {}
        }
        match op {
            Op::Const => self.constant(k),
            Op::Position => self.position(k),
            Op::Symbol => self.symbol(k),
            Op::Read => self.read(k),
            Op::Write => self.write(k),
            Op::Variable => self.variable(k),
            Op::Assign => self.assign(k),
            Op::LocalTensor => self.local_tensor(k),
            Op::Cast => self.cast(k),
            Op::Select => self.select(k),
            Op::Fma => self.fma(k, row),
            Op::If => self.if_(k),
            Op::Else => self.else_(k),
            Op::EndIf => self.end_if(k),
            Op::Range => self.range(k),
            Op::EndRange => self.end_range(k),
            Op::WhileBegin => self.while_begin(k),
            Op::WhileCond => self.while_cond(k),
            Op::WhileEnd => self.while_end(k),
            Op::Accumulator => self.accumulator(k),
            Op::Accumulate => self.accumulate(k),
            _ => Err(self.err(Some(k), format!("{} is not emitted here", row.name))),
        }
    }

    /// The literal of a CONST.
    fn constant(&mut self, k: usize) -> Emitted {
        let dag = self.dag;
        let e = &dag.expressions[k];
        self.operand_count(k, 0)?;
        let d = self.declared(k)?;
        let lit = self.literal(d, e.float_value, e.int_value, e.uint_value);
        self.line(&format!("const {} v{k} = {lit};", ctype(d)));
        let value = int_literal_value(d, e.int_value, e.uint_value);
        self.consts[k] = value;
        Ok((Some(d), value.map(Interval::point)))
    }

    /// A component of the worker position.
    fn position(&mut self, k: usize) -> Emitted {
        let dag = self.dag;
        let e = &dag.expressions[k];
        self.operand_count(k, 0)?;
        self.check_result(k, DType::I64)?;
        let axis = e.axis as usize;
        let Some(&size) = self.sizes.get(axis) else {
            return Err(self.err(Some(k), format!("axis {axis} is outside the workgroup")));
        };
        if self.blocked.is_some() && axis + 1 == self.workgroup.len() {
            // The worker of this lane of the block.
            self.line(&format!("const int64_t v{k} = ovl_p{axis} + ovl_j;"));
        } else {
            self.line(&format!("const int64_t v{k} = ovl_p{axis};"));
        }
        let hi = match size {
            Size::Known(n) => n as i128 - 1,
            Size::Symbolic {
                symbol,
                scale,
                offset,
            } => {
                self.sym_bounds[k] = Some(SymBound::new(symbol, scale, offset as i128 - 1));
                // A workgroup has at most i64::MAX workers.
                i64::MAX as i128 - 1
            }
        };
        Ok((Some(DType::I64), Some(Interval::new(0, hi))))
    }

    /// SYMBOL: the value of symbol `axis` the operator runs with (a kernel parameter).
    fn symbol(&mut self, k: usize) -> Emitted {
        self.operand_count(k, 0)?;
        self.check_result(k, DType::I64)?;
        let symbol = self.dag.expressions[k].axis;
        if symbol >= self.symbol_count {
            return Err(self.err(
                Some(k),
                format!(
                    "reads symbol {symbol} but the operator takes {} symbol value(s)",
                    self.symbol_count
                ),
            ));
        }
        self.line(&format!("const int64_t v{k} = ovl_S{symbol};"));
        self.sym_bounds[k] = Some(SymBound::new(symbol, 1, 0));
        Ok((Some(DType::I64), Some(Interval::new(0, i64::MAX as i128))))
    }

    /// A READ of an input or local tensor (bounds-checked where not proven).
    fn read(&mut self, k: usize) -> Emitted {
        let dag = self.dag;
        let e = &dag.expressions[k];
        let t = self.tensor(k, &e.tensor)?;
        if !matches!(t.kind, TensorKind::Input | TensorKind::Local) {
            return Err(self.err(Some(k), "a read must read an input or a local tensor"));
        }
        self.operand_count(k, t.shape.len())?;
        let (linear, unproven) = self.indices(k, t)?;
        let (d, name) = (t.dtype, t.name.clone());
        let ct = ctype(d);
        if unproven.is_empty() {
            self.line(&format!("const {ct} v{k} = {name}[{linear}];"));
        } else {
            let cond = Self::bounds_condition(&unproven);
            let faults = self.fault_chain(k, t, &unproven);
            self.line(&format!("{ct} v{k}{{}};"));
            self.line(&format!("if (OVL_LIKELY({cond})) v{k} = {name}[{linear}];"));
            self.line(&format!("else {{ {faults} }}"));
        }
        Ok((Some(d), Interval::of_dtype(d)))
    }

    /// A WRITE to an output or local tensor (bounds-checked where not proven).
    fn write(&mut self, k: usize) -> Emitted {
        let dag = self.dag;
        let e = &dag.expressions[k];
        let t = self.tensor(k, &e.tensor)?;
        if !matches!(t.kind, TensorKind::Output | TensorKind::Local) {
            return Err(self.err(Some(k), "a write must write an output or a local tensor"));
        }
        let rank = t.shape.len();
        self.operand_count(k, rank + 1)?;
        let (value, vd) = self.operand(k, rank)?;
        if vd != t.dtype {
            return Err(self.err(
                Some(k),
                format!("writes a {vd} value into a {} tensor", t.dtype),
            ));
        }
        let (linear, unproven) = self.indices(k, t)?;
        let name = t.name.clone();
        if unproven.is_empty() {
            self.line(&format!("{name}[{linear}] = v{value};"));
        } else {
            let cond = Self::bounds_condition(&unproven);
            let faults = self.fault_chain(k, t, &unproven);
            self.line(&format!(
                "if (OVL_LIKELY({cond})) {name}[{linear}] = v{value};"
            ));
            self.line(&format!("else {{ {faults} }}"));
        }
        Ok((None, None))
    }

    /// A worker-local VARIABLE.
    fn variable(&mut self, k: usize) -> Emitted {
        self.operand_count(k, 1)?;
        let (init, d) = self.operand(k, 0)?;
        self.check_result(k, d)?;
        self.line(&format!("{} v{k} = v{init};", ctype(d)));
        Ok((Some(d), Interval::of_dtype(d)))
    }

    /// An ASSIGN to a variable.
    fn assign(&mut self, k: usize) -> Emitted {
        self.operand_count(k, 2)?;
        let (var, vd) = self.operand(k, 0)?;
        let (value, d) = self.operand(k, 1)?;
        if self.ops[var] != Op::Variable {
            return Err(self.err(
                Some(k),
                format!("assigns to %{var}, which is not a variable"),
            ));
        }
        if vd != d {
            return Err(self.err(Some(k), format!("assigns a {d} value to a {vd} variable")));
        }
        self.line(&format!("v{var} = v{value};"));
        Ok((None, None))
    }

    /// LOCAL_TENSOR: (re)fills a local tensor.
    fn local_tensor(&mut self, k: usize) -> Emitted {
        let dag = self.dag;
        let e = &dag.expressions[k];
        self.operand_count(k, 0)?;
        let t = self.tensor(k, &e.tensor)?;
        if t.kind != TensorKind::Local {
            return Err(self.err(Some(k), "local_tensor must name a local tensor"));
        }
        let lit = self.literal(t.dtype, e.float_value, e.int_value, e.uint_value);
        // Locals have known sizes (checked in `Emitter::new`).
        let (name, n) = (t.name.clone(), t.elements.unwrap_or(0));
        if n > 0 {
            self.line(&format!("ovl::fill({name}, {n}LL, {lit});"));
        }
        Ok((None, None))
    }

    /// A CAST (saturating float-to-integer, `!= 0` to bool).
    fn cast(&mut self, k: usize) -> Emitted {
        self.operand_count(k, 1)?;
        let (a, from) = self.operand(k, 0)?;
        let to = self.declared(k)?;
        let ct = ctype(to);
        let x = format!("v{a}");
        let expr = if to == DType::Bool {
            if from == DType::Bool {
                x
            } else {
                format!("({x} != 0)")
            }
        } else if from.is_float() && to.is_int() {
            format!("ovl::f2i<{ct}>({x})")
        } else {
            format!("({ct}){x}")
        };
        self.line(&format!("const {ct} v{k} = {expr};"));
        let iv = if to.is_float() {
            None
        } else if from.is_float() {
            Interval::of_dtype(to)
        } else {
            let before = self.interval(a);
            let after = before.and_then(|iv| iv.fit(to));
            if to != DType::Bool && after.is_some() && after == before {
                // The value is unchanged: so is its bound.
                self.sym_bounds[k] = self.sym_bounds[a];
            }
            after
        };
        Ok((Some(to), iv))
    }

    /// SELECT: `c ? a : b` (`ovl::pick(c, a, b)` for floats).
    fn select(&mut self, k: usize) -> Emitted {
        self.operand_count(k, 3)?;
        let (c, cd) = self.operand(k, 0)?;
        let (a, d) = self.operand(k, 1)?;
        let (b, bd) = self.operand(k, 2)?;
        if cd != DType::Bool || d != bd {
            return Err(self.err(
                Some(k),
                "select needs a bool condition and two values of one dtype",
            ));
        }
        self.check_result(k, d)?;
        // Floats through `ovl::pick`, which GCC if-converts (ARCHITECTURE.md, ovl-codegen).
        let value = if d.is_float() {
            format!("ovl::pick(v{c}, v{a}, v{b})")
        } else {
            format!("v{c} ? v{a} : v{b}")
        };
        self.line(&format!("const {} v{k} = {value};", ctype(d)));
        let iv = match (self.interval(a), self.interval(b)) {
            (Some(x), Some(y)) => Some(x.union(y)),
            _ => None,
        };
        Ok((Some(d), iv))
    }

    /// FMA, spelled as the op table says.
    fn fma(&mut self, k: usize, row: &OpInfo) -> Emitted {
        self.operand_count(k, 3)?;
        let (a, d) = self.operand(k, 0)?;
        let (b, bd) = self.operand(k, 1)?;
        let (c, cd) = self.operand(k, 2)?;
        if !d.is_float() || bd != d || cd != d {
            return Err(self.err(Some(k), "fma needs three float operands of one dtype"));
        }
        self.check_result(k, d)?;
        let args = [format!("v{a}"), format!("v{b}"), format!("v{c}")];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let expr = row
            .spelling
            .for_dtype(d)
            .apply(&args)
            .expect("fma takes floats");
        self.line(&format!("const {} v{k} = {expr};", ctype(d)));
        Ok((Some(d), None))
    }

    /// IF: opens a block.
    fn if_(&mut self, k: usize) -> Emitted {
        self.operand_count(k, 1)?;
        let (c, cd) = self.operand(k, 0)?;
        if cd != DType::Bool {
            return Err(self.err(Some(k), "the condition of `if` must be bool"));
        }
        self.line(&format!("if (v{c}) {{"));
        self.indent += 1;
        self.frames.push(Frame::If { else_seen: false });
        Ok((None, None))
    }

    /// ELSE.
    fn else_(&mut self, k: usize) -> Emitted {
        match self.frames.last_mut() {
            Some(Frame::If { else_seen }) if !*else_seen => *else_seen = true,
            _ => return Err(self.err(Some(k), "`else` without an open `if`")),
        }
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
        Ok((None, None))
    }

    /// END_IF.
    fn end_if(&mut self, k: usize) -> Emitted {
        if !matches!(self.frames.last(), Some(Frame::If { .. })) {
            return Err(self.err(Some(k), "`end_if` without an open `if`"));
        }
        self.frames.pop();
        self.indent -= 1;
        self.line("}");
        Ok((None, None))
    }

    /// END_RANGE: closes the loop's braces.
    fn end_range(&mut self, k: usize) -> Emitted {
        let Some(&Frame::Range {
            braces,
            opener,
            inner,
            block,
        }) = self.frames.last()
        else {
            return Err(self.err(Some(k), "`end_range` without an open `range`"));
        };
        self.frames.pop();
        for b in 0..braces {
            if b == inner {
                self.fold_lanes(opener)?;
            }
            self.indent -= 1;
            self.line("}");
            if let (0, Some(mark)) = (b, block) {
                self.full_block_copy(opener, mark);
            }
        }
        Ok((None, None))
    }

    /// Splits a reduction loop's block loop (the text from `mark`: `for (ovl_l < ovl_m) { .. }`)
    /// into the full blocks and the last, partial one: the loop over full blocks gets a copy
    /// whose constant trip count of `REDUCE_LANES` lets the compiler keep the lanes in one
    /// vector register, then the partial block (if any) runs the original:
    /// `for (; ovl_b < ovl_f; ..) { <copy> } if (ovl_b < ovl_n) { ovl_m = ..; <loop> }`. The
    /// partial block is outside the loop so that the full blocks never index the lanes with a
    /// variable, which would keep them in memory (a store-to-load round trip per block, the
    /// bound of a reduction over data in cache). Both copies run the same iterations in the
    /// same order, so the result is unchanged.
    fn full_block_copy(&mut self, range: usize, mark: usize) {
        let block = self.body.split_off(mark);
        let mut full = block.replacen(
            &format!("ovl_l{range} < ovl_m{range};"),
            &format!("ovl_l{range} < {REDUCE_LANES};"),
            1,
        );
        if self.dialect == Dialect::Cpp {
            // Not unrolled, GCC vectorizes this loop as one vector iteration over the lanes
            // whatever the combiner; unrolled first, it vectorizes only a `+` (a max, with its
            // NaN rule, stays scalar).
            let indent: String = full.chars().take_while(|c| *c == ' ').collect();
            full.insert_str(0, &format!("{indent}#pragma GCC unroll 1\n"));
        }
        self.body.push_str(&full);
        // Closes the loop over full blocks; the caller's next brace closes the partial block.
        self.indent -= 1;
        self.line("}");
        self.line(&format!("if (ovl_b{range} < ovl_n{range}) {{"));
        self.indent += 1;
        self.line(&format!(
            "const uint64_t ovl_m{range} = ovl_n{range} - ovl_b{range};"
        ));
        self.body.push_str(&block);
    }

    /// After a reduction loop ran: each accumulator becomes accumulator ⊕ the pairwise fold of
    /// its lanes (`proto/ovl.proto`, "Accumulators").
    fn fold_lanes(&mut self, range: usize) -> Result<(), CodegenError> {
        for acc in self.reductions.get(&range).cloned().unwrap_or_default() {
            let (combiner, d) = self.accumulator_kind(acc)?;
            let lanes = self.pairwise_fold(combiner, d, |l| format!("ovl_lanes{acc}[{l}]"))?;
            let folded = self.combine(combiner, d, &format!("v{acc}"), &lanes)?;
            self.line(&format!("v{acc} = {folded};"));
        }
        Ok(())
    }

    /// The pairwise fold of an accumulator's `REDUCE_LANES` lanes, each spelled by `lane`:
    /// `((l0 ⊕ l1) ⊕ (l2 ⊕ l3)) ⊕ ((l4 ⊕ l5) ⊕ (l6 ⊕ l7))`.
    fn pairwise_fold(
        &self,
        combiner: Combiner,
        d: DType,
        lane: impl Fn(usize) -> String,
    ) -> Result<String, CodegenError> {
        let mut level: Vec<String> = (0..REDUCE_LANES).map(lane).collect();
        while level.len() > 1 {
            level = level
                .chunks(2)
                .map(|p| self.combine(combiner, d, &p[0], &p[1]))
                .collect::<Result<_, _>>()?;
        }
        Ok(level.swap_remove(0))
    }

    /// `x ⊕ y` for a combiner on dtype `d`, spelled as the op table spells its binary op.
    fn combine(
        &self,
        combiner: Combiner,
        d: DType,
        x: &str,
        y: &str,
    ) -> Result<String, CodegenError> {
        let row = ops::info(combiner.op()).expect("combiners are binary ops");
        let x = if x.contains(' ') {
            format!("({x})")
        } else {
            x.to_string()
        };
        let y = if y.contains(' ') {
            format!("({y})")
        } else {
            y.to_string()
        };
        row.spelling
            .for_dtype(d)
            .apply(&[&x, &y])
            .ok_or_else(|| self.err(None, format!("{} does not take {d}", row.name)))
    }

    /// The combiner and dtype of accumulator `acc`.
    fn accumulator_kind(&self, acc: usize) -> Result<(Combiner, DType), CodegenError> {
        let e = &self.dag.expressions[acc];
        let combiner = Combiner::from_code(e.int_value)
            .ok_or_else(|| self.err(Some(acc), format!("unknown combiner {}", e.int_value)))?;
        let d = DType::from_ir(e.dtype)
            .ok_or_else(|| self.err(Some(acc), "an accumulator without a dtype"))?;
        Ok((combiner, d))
    }

    /// An ACCUMULATOR: a mutable local like a VARIABLE (its lanes live with its reduction loop).
    fn accumulator(&mut self, k: usize) -> Emitted {
        self.operand_count(k, 1)?;
        let (init, d) = self.operand(k, 0)?;
        self.check_result(k, d)?;
        self.accumulator_kind(k)?;
        self.line(&format!("{} v{k} = v{init};", ctype(d)));
        Ok((Some(d), Interval::of_dtype(d)))
    }

    /// An ACCUMULATE: combines the value into the lane of the current iteration.
    fn accumulate(&mut self, k: usize) -> Emitted {
        self.operand_count(k, 2)?;
        let (acc, ad) = self.operand(k, 0)?;
        let (value, d) = self.operand(k, 1)?;
        if ad != d || self.ops[acc] != Op::Accumulator {
            return Err(self.err(
                Some(k),
                "accumulates a value into a non-accumulator or of another dtype",
            ));
        }
        let Some(range) = self.loops[k].filter(|r| self.reductions.contains_key(r)) else {
            return Err(self.err(Some(k), "an accumulate outside a reduction loop"));
        };
        let (combiner, _) = self.accumulator_kind(acc)?;
        let lane = format!("ovl_lanes{acc}[ovl_l{range}]");
        let combined = self.combine(combiner, d, &lane, &format!("v{value}"))?;
        self.line(&format!("{lane} = {combined};"));
        Ok((None, None))
    }

    /// WHILE_BEGIN: `while (true) {`.
    fn while_begin(&mut self, k: usize) -> Emitted {
        self.operand_count(k, 0)?;
        self.line("while (true) {");
        self.indent += 1;
        self.frames.push(Frame::WhileCond);
        Ok((None, None))
    }

    /// WHILE_COND: `if (!c) break;`.
    fn while_cond(&mut self, k: usize) -> Emitted {
        self.operand_count(k, 1)?;
        let (c, cd) = self.operand(k, 0)?;
        if cd != DType::Bool || self.frames.last() != Some(&Frame::WhileCond) {
            return Err(self.err(
                Some(k),
                "`while_cond` needs an open `while_begin` and a bool",
            ));
        }
        *self.frames.last_mut().expect("checked") = Frame::WhileBody;
        self.line(&format!("if (!v{c}) break;"));
        Ok((None, None))
    }

    /// WHILE_END.
    fn while_end(&mut self, k: usize) -> Emitted {
        if self.frames.last() != Some(&Frame::WhileBody) {
            return Err(self.err(Some(k), "`while_end` without an open `while_cond`"));
        }
        self.frames.pop();
        self.indent -= 1;
        self.line("}");
        Ok((None, None))
    }

    /// A unary op, spelled as the op table says for the operand's dtype.
    fn unary(&mut self, k: usize, row: &OpInfo) -> Emitted {
        self.operand_count(k, 1)?;
        let (a, d) = self.operand(k, 0)?;
        let x = format!("v{a}");
        let Some(expr) = row.spelling.for_dtype(d).apply(&[&x]) else {
            return Err(self.err(Some(k), format!("{} does not take a {d} operand", row.name)));
        };
        let rd = if row.result == ResultRule::Bool {
            DType::Bool
        } else {
            d
        };
        self.check_result(k, rd)?;
        self.line(&format!("const {} v{k} = {expr};", ctype(rd)));
        let iv = match row.op {
            Op::Neg if d.is_int() => self
                .interval(a)
                .and_then(|iv| Interval::point(0).sub(iv))
                .and_then(|iv| iv.fit(d)),
            _ => None,
        };
        Ok((Some(rd), iv))
    }

    /// A binary or comparison op, spelled as the op table says for the operands' dtype.
    fn binary(&mut self, k: usize, row: &OpInfo) -> Emitted {
        self.operand_count(k, 2)?;
        let (a, d) = self.operand(k, 0)?;
        let (b, bd) = self.operand(k, 1)?;
        if d != bd {
            return Err(self.err(
                Some(k),
                format!("operands of different dtypes ({d} and {bd})"),
            ));
        }
        let (x, y) = (format!("v{a}"), format!("v{b}"));
        let i = d.is_int();
        let Some(expr) = row.spelling.for_dtype(d).apply(&[&x, &y]) else {
            return Err(self.err(Some(k), format!("{} does not take {d} operands", row.name)));
        };
        let rd = if row.result == ResultRule::Bool {
            DType::Bool
        } else {
            d
        };
        self.check_result(k, rd)?;
        self.line(&format!("const {} v{k} = {expr};", ctype(rd)));
        let iv = if i {
            match (self.interval(a), self.interval(b)) {
                (Some(p), Some(q)) => {
                    let raw = match row.op {
                        Op::Add => p.add(q),
                        Op::Sub => p.sub(q),
                        Op::Mul => p.mul(q),
                        Op::Div => p.div(q),
                        Op::Mod => p.rem(q),
                        Op::Min => Some(p.min(q)),
                        Op::Max => Some(p.max(q)),
                        _ => None,
                    };
                    let fitted = raw.and_then(|iv| iv.fit(d));
                    if fitted.is_some() && fitted == raw {
                        // No wrap-around: a symbolic bound carries over.
                        self.sym_bounds[k] = self.binary_bound(row.op, (a, p), (b, q));
                    }
                    fitted
                }
                _ => None,
            }
        } else {
            None
        };
        Ok((Some(rd), iv))
    }

    /// The symbolic bound of `a op b` (operands with intervals `p`, `q`), computed without
    /// wrap-around.
    fn binary_bound(
        &self,
        op: Op,
        (a, p): (usize, Interval),
        (b, q): (usize, Interval),
    ) -> Option<SymBound> {
        let (ba, bb) = (self.sym_bounds[a], self.sym_bounds[b]);
        let constant = |iv: Interval| (iv.lo == iv.hi).then_some(iv.lo);
        match op {
            Op::Add => ba
                .and_then(|x| x.shift(q.hi))
                .or_else(|| bb.and_then(|x| x.shift(p.hi))),
            Op::Sub => ba.and_then(|x| x.shift(-q.lo)),
            Op::Mul => ba
                .zip(constant(q))
                .and_then(|(x, m)| x.times(m))
                .or_else(|| bb.zip(constant(p)).and_then(|(x, m)| x.times(m))),
            Op::Min => ba.or(bb),
            _ => None,
        }
    }

    fn range(&mut self, k: usize) -> Emitted {
        self.operand_count(k, 3)?;
        let (s, sd) = self.operand(k, 0)?;
        let (e, ed) = self.operand(k, 1)?;
        let (st, std) = self.operand(k, 2)?;
        if sd != DType::I64 || ed != DType::I64 || std != DType::I64 {
            return Err(self.err(Some(k), "range bounds and step must be i64"));
        }
        self.check_result(k, DType::I64)?;
        let step = self.consts[st];
        let reduced = self.reductions.get(&k).cloned();
        let braces = if let Some(accs) = reduced {
            self.reduction_range(k, (s, e, st), step, &accs)?
        } else if step == Some(1) {
            self.line("{");
            self.indent += 1;
            self.line(&format!("const int64_t ovl_end{k} = v{e};"));
            self.line(&format!(
                "for (int64_t v{k} = v{s}; v{k} < ovl_end{k}; ++v{k}) {{"
            ));
            self.indent += 1;
            2
        } else {
            self.counted_range_head(k, (s, e, st), step, &[]);
            self.line(&format!(
                "for (uint64_t ovl_i{k} = 0; ovl_i{k} < ovl_n{k}; ++ovl_i{k}) {{"
            ));
            self.indent += 1;
            self.line(&format!(
                "const int64_t v{k} = (int64_t)((uint64_t)ovl_start{k} + ovl_i{k} * (uint64_t)ovl_step{k});"
            ));
            3
        };
        let (inner, block) = match self.block_mark.take() {
            Some(mark) => (2, Some(mark)),
            None => (braces, None),
        };
        self.frames.push(Frame::Range {
            braces,
            opener: k,
            inner,
            block,
        });
        let iv = match (self.interval(s), self.interval(e)) {
            (Some(a), Some(b)) => Some(Interval::new(a.lo, (b.hi - 1).max(a.lo))),
            _ => None,
        };
        // The index stays below the end (a loop whose step is not positive runs no iteration).
        self.sym_bounds[k] = self.sym_bounds[e].and_then(|x| x.shift(-1));
        Ok((Some(DType::I64), iv))
    }

    /// A reduction loop (`proto/ovl.proto`, "Accumulators"): each accumulator's lanes start at the
    /// combiner's identity, and the iterations run in blocks of `REDUCE_LANES`, iteration `l`
    /// of a block combining into lane `l`, so that the inner loop's lanes are independent and
    /// vectorize. Returns the braces opened; the fold goes after the inner two.
    fn reduction_range(
        &mut self,
        k: usize,
        (s, e, st): (usize, usize, usize),
        step: Option<i128>,
        accs: &[usize],
    ) -> Result<usize, CodegenError> {
        let mut lanes = Vec::with_capacity(accs.len());
        for &acc in accs {
            let (combiner, d) = self.accumulator_kind(acc)?;
            let id = vec![self.identity(combiner, d); REDUCE_LANES].join(", ");
            lanes.push(format!(
                "{} ovl_lanes{acc}[{REDUCE_LANES}] = {{{id}}};",
                ctype(d)
            ));
        }
        self.counted_range_head(k, (s, e, st), step, &lanes);
        // The full blocks end at `ovl_f`; `full_block_copy` adds the partial one after them.
        self.line(&format!(
            "const uint64_t ovl_f{k} = ovl_n{k} - ovl_n{k} % {REDUCE_LANES};"
        ));
        self.line(&format!("uint64_t ovl_b{k} = 0;"));
        self.line(&format!(
            "for (; ovl_b{k} < ovl_f{k}; ovl_b{k} += {REDUCE_LANES}) {{"
        ));
        self.indent += 1;
        self.block_mark = Some(self.body.len());
        self.line(&format!(
            "for (uint64_t ovl_l{k} = 0; ovl_l{k} < ovl_m{k}; ++ovl_l{k}) {{"
        ));
        self.indent += 1;
        self.line(&format!(
            "const int64_t v{k} = (int64_t)((uint64_t)ovl_start{k} + (ovl_b{k} + ovl_l{k}) * (uint64_t)ovl_step{k});"
        ));
        Ok(4)
    }

    /// The head of a RANGE loop counted in iterations: opens `{`, names its bounds and step,
    /// emits `declarations`, checks the step (a fault when it is not positive and not known to
    /// be), opens `if (start < end) {` and computes the trip count `ovl_n{k}`. Two braces open.
    fn counted_range_head(
        &mut self,
        k: usize,
        (s, e, st): (usize, usize, usize),
        step: Option<i128>,
        declarations: &[String],
    ) {
        self.line("{");
        self.indent += 1;
        self.line(&format!(
            "const int64_t ovl_start{k} = v{s}, ovl_end{k} = v{e}, ovl_step{k} = v{st};"
        ));
        for d in declarations {
            self.line(d);
        }
        if step.is_none_or(|c| c <= 0) {
            let w = self.worker_expr();
            self.stops.set(true);
            self.line(&format!(
                "if (OVL_UNLIKELY(ovl_step{k} <= 0)) {{ ovl::bad_step(ovl_st, {k}, ovl_step{k}, {w}); {STOP} }}"
            ));
            self.line(&format!("else if (ovl_start{k} < ovl_end{k}) {{"));
        } else {
            self.line(&format!("if (ovl_start{k} < ovl_end{k}) {{"));
        }
        self.indent += 1;
        self.line(&format!(
            "const uint64_t ovl_n{k} = ((uint64_t)ovl_end{k} - (uint64_t)ovl_start{k} - 1) / \
             (uint64_t)ovl_step{k} + 1;"
        ));
    }

    /// The identity of a combiner on dtype `d`, as a literal of the dialect.
    fn identity(&self, combiner: Combiner, d: DType) -> String {
        let (lo_i, hi_i, hi_u): (i64, i64, u64) = match d {
            DType::I8 => (i8::MIN.into(), i8::MAX.into(), 0),
            DType::I16 => (i16::MIN.into(), i16::MAX.into(), 0),
            DType::I32 => (i32::MIN.into(), i32::MAX.into(), 0),
            DType::I64 => (i64::MIN, i64::MAX, 0),
            DType::U8 => (0, 0, u8::MAX.into()),
            DType::U16 => (0, 0, u16::MAX.into()),
            DType::U32 => (0, 0, u32::MAX.into()),
            _ => (0, 0, u64::MAX),
        };
        let (f, i, u) = match combiner {
            Combiner::Sum => (0.0, 0, 0),
            Combiner::Product => (1.0, 1, 1),
            Combiner::Min => (f64::INFINITY, hi_i, hi_u),
            Combiner::Max => (f64::NEG_INFINITY, lo_i, 0),
        };
        self.literal(d, f, i, u)
    }

    /// The kernel parameters that carry the symbol values: `int64_t ovl_S0, ...` (none for an
    /// operator without symbolic sizes).
    pub(crate) fn symbol_params(&self) -> Vec<String> {
        (0..self.symbol_count)
            .map(|k| format!("int64_t ovl_S{k}"))
            .collect()
    }

    /// The number of workers as a C++ `int64_t` expression (a literal when known).
    pub(crate) fn workers_cpp(&self) -> String {
        match self.workers {
            Some(n) => format!("{n}LL"),
            None => self
                .sizes
                .iter()
                .map(|s| s.cpp())
                .collect::<Vec<_>>()
                .join(" * "),
        }
    }

    /// The workgroup for comments: `[s0, 4]`.
    pub(crate) fn workgroup_text(&self) -> String {
        ovl_ir::symbolic::shape_text(&self.dag.workgroup_shape, &self.dag.symbolic_workgroup, &[])
    }

    /// Locals that a worker could read before its first LOCAL_TENSOR ran: they are zeroed at
    /// the start of every worker (as the reference interpreter does).
    pub(crate) fn locals_needing_zero(&self) -> Vec<bool> {
        let mut need = vec![true; self.locals.len()];
        let mut decided = vec![false; self.locals.len()];
        let mut depth = 0usize;
        for e in &self.dag.expressions {
            let op = Op::try_from(e.code).unwrap_or(Op::Unspecified);
            match op {
                Op::If | Op::Range | Op::WhileBegin => depth += 1,
                Op::EndIf | Op::EndRange | Op::WhileEnd => depth = depth.saturating_sub(1),
                Op::LocalTensor | Op::Read | Op::Write => {
                    let Some(r) = &e.tensor else { continue };
                    if r.kind != TensorKind::Local as i32 {
                        continue;
                    }
                    let l = r.index as usize;
                    if l < need.len() && !decided[l] {
                        decided[l] = true;
                        need[l] = !(op == Op::LocalTensor && depth == 0);
                    }
                }
                _ => {}
            }
        }
        need
    }
}

fn list_kind(kind: i32) -> TensorKind {
    TensorKind::try_from(kind).unwrap_or(TensorKind::Unspecified)
}

/// `text` made safe for a `//` or `/* */` comment of generated code: printable ASCII only, no
/// comment terminator.
pub(crate) fn comment_safe(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect::<String>()
        .replace("*/", "*?")
}

#[cfg(test)]
mod tests {
    use super::worker_cost;
    use ovl_ir::fixtures;

    #[test]
    fn a_worker_costs_its_loops_trip_counts() {
        // No loop: one per expression.
        let flat = fixtures::add_2d(4, 4);
        assert_eq!(worker_cost(&flat).at(&[]), flat.expressions.len() as u64);
        // A counted loop: the expressions in it count once per iteration.
        let cost = |cols| worker_cost(&fixtures::cumsum(4, cols, 1)).at(&[]);
        let (c100, c1000, c2000) = (cost(100), cost(1000), cost(2000));
        let per_iteration = (c2000 - c1000) / 1000;
        assert!(per_iteration >= 4, "{c100} {c1000} {c2000}");
        assert_eq!(c2000 - c1000, 1000 * per_iteration);
        assert_eq!(c1000 - c100, 900 * per_iteration);
        // A loop with bounds the worker computes counts as 64 iterations, whatever n.
        let runtime = |n| worker_cost(&fixtures::runtime_range(n)).at(&[]);
        assert_eq!(runtime(10), runtime(100_000));
        assert!(runtime(10) > 64);
        // A loop over a symbol's value counts that value, given when the kernel runs.
        let looped = worker_cost(&fixtures::sym_symbol_loop(5));
        let (a, b, c) = (looped.at(&[10]), looped.at(&[1010]), looped.at(&[2010]));
        assert!(b - a >= 1000, "{a} {b} {c}");
        assert_eq!(c - b, b - a);
        assert_eq!(looped.at(&[]), looped.at(&[64]));
    }
}
