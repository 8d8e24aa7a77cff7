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
//!   checked only where the interval analysis ([`ovl_ir::intervals`]) cannot prove it inside its
//!   dimension, as the read sees it (for a dimension sized at run time: see
//!   [`ovl_ir::intervals::SymBound`]); a failed
//!   check records
//!   the fault in the status struct and ends the worker: `goto ovl_stop`, a label after the
//!   worker program's block ([`Emitter::worker_program`]), so that staged loops exit (a
//!   non-positive RANGE step does the same).

use super::literal::{ctype, cuda_literal, literal, vtype};
use super::sizes::{self, Size};
use crate::error::{defined_at, CodegenError};
use ovl_ir::intervals::Intervals;
use ovl_ir::ir::{self, TensorKind};
use ovl_ir::names::kind_word;
use ovl_ir::typed::{Inst, Kernel, TensorId, ValueId};
use ovl_ir::{DType, Literal};
use std::sync::Arc;

use ovl_ir::limits::{CPU_LOCALS_BYTES, CUDA_LOCAL_BYTES};

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

/// What emitting one expression gives: its value dtype (None for a statement), as validation
/// proved it.
type Emitted = Result<Option<DType>, CodegenError>;

/// The index operands that need a bounds check: (axis, C++ variable, the dimension's size as a
/// C++ `uint64_t` expression).
type Unproven = Vec<(usize, String, String)>;

/// An open RANGE loop, as its END_RANGE closes it (the blocks of `if` and `while` close with
/// one brace each: they need no frame, and validation proved every block well nested).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frame {
    /// A RANGE loop closed by this many braces; a reduction loop folds its accumulators'
    /// lanes after the first `inner` of them, and its block loop starts at `block` in the body.
    Range {
        braces: usize,
        opener: usize,
        inner: usize,
        block: Option<usize>,
    },
}

/// The state of one emission; after [`emit`], `body` holds the worker program. A backend's
/// frame (`crate::cpu::frame`, `crate::cuda::frame`) wraps it into a translation unit.
pub(crate) struct Emitter<'a> {
    pub dag: &'a ir::ExpressionDag,
    /// The operator, decoded once ([`ovl_ir::typed`]): what the handlers match on.
    kernel: Arc<Kernel>,
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
    /// The integer ranges and symbolic bounds of the operator's values (`ovl_ir::intervals`).
    intervals: Intervals,
    /// The RANGE loops open where the emission is.
    frames: Vec<Frame>,
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
    /// Workers per block of [`Emitter::blocked_program`].
    pub blocked_width: u64,
    /// The block's copies of the locals the frame allocates on the heap for a run (see
    /// `blocked`): (C++ element type, the local's name, elements).
    pub blocked_heap: Vec<(&'static str, String, u64)>,
    /// On the GPU, how a group of threads runs each worker (`ovl_ir::cooperative`), or `None`
    /// for one thread per worker.
    pub coop: Option<ovl_ir::cooperative::Cooperative>,
    /// The split loop being emitted (see `cooperative`).
    split_open: Option<usize>,
    /// The `__shared__` arrays the cooperative folds use, declared by the frame.
    pub shared: Vec<String>,
    /// In a pass that emits one lane of the lane program: the lane and the vector accesses.
    lanes: Option<lanes::Lane>,
    /// On the GPU, the lane program, for an operator that has one (see `lanes`): the frame
    /// runs it where the vector accesses are aligned.
    pub lane_program: Option<LaneProgram>,
}

/// The lane program of an operator (see `lanes`): its vector accesses and one body per lane.
pub(crate) struct LaneProgram {
    pub plan: lanes::Plan,
    pub lanes: Vec<String>,
}

mod access;
mod blocked;
mod control;
mod cooperative;
pub(crate) mod lanes;
mod reduce;
mod values;
pub use blocked::BLOCK as BLOCKED_WORKERS;

/// The statement that ends the current worker after a fault was recorded (see
/// [`Emitter::worker_program`]).
const STOP: &str = "goto ovl_stop;";

/// Validates the operator (the emitter relies on what validation proves and checks it no
/// more), checks its tensors against the backend's limits and emits the worker program of
/// every expression into [`Emitter::body`], in `dialect`.
pub(crate) fn emit<'a>(
    dag: &'a ir::ExpressionDag,
    key: &'a str,
    dialect: Dialect,
) -> Result<Emitter<'a>, CodegenError> {
    let kernel = Arc::new(Kernel::decode(dag)?);
    let intervals = Intervals::of(&kernel);
    let mut e = Emitter::new(dag, &kernel, key, dialect, intervals.clone())?;
    if dialect == Dialect::Cuda {
        e.coop = ovl_ir::cooperative::plan(dag);
    }
    for k in 0..dag.expressions.len() {
        e.expression(k)?;
    }
    // On the GPU, workers in vector lanes, where the operator has the shape for it, cannot
    // fault and is not so large that NVRTC's time on the program written four times over
    // outweighs what vector accesses save.
    if dialect == Dialect::Cuda
        && e.coop.is_none()
        && !e.stops.get()
        && dag.expressions.len() <= lanes::MAX_EXPRESSIONS
    {
        if let Some(plan) = lanes::plan(dag, &kernel) {
            let mut bodies = Vec::new();
            for lane in 0..lanes::WIDTH {
                let mut l = Emitter::new(dag, &kernel, key, dialect, intervals.clone())?;
                l.lanes = Some(lanes::Lane {
                    lane,
                    plan: plan.clone(),
                });
                l.indent = 4;
                for k in 0..dag.expressions.len() {
                    l.expression(k)?;
                }
                bodies.push(l.body);
            }
            e.lane_program = Some(LaneProgram {
                plan,
                lanes: bodies,
            });
        }
    }
    // Workers in lockstep, where the operator has the shape for it and cannot fault.
    if dialect == Dialect::Cpp && !e.stops.get() {
        if let Some(plan) = blocked::plan(&kernel) {
            let mut b = Emitter::new(dag, &kernel, key, dialect, intervals)?;
            b.blocked = Some(plan);
            for k in 0..dag.expressions.len() {
                b.expression(k)?;
            }
            b.close_segment();
            let layout = b
                .blocked
                .as_ref()
                .map(|p| p.prelude.clone())
                .unwrap_or_default();
            let arrays = b.blocked_arrays();
            e.blocked_width = b.blocked.as_ref().map_or(BLOCKED_WORKERS, |p| p.width);
            e.blocked_heap = b.blocked_heap();
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
        kernel: &Arc<Kernel>,
        key: &'a str,
        dialect: Dialect,
        intervals: Intervals,
    ) -> Result<Emitter<'a>, CodegenError> {
        let mut e = Emitter {
            dag,
            kernel: Arc::clone(kernel),
            key,
            dialect,
            inputs: Vec::new(),
            outputs: Vec::new(),
            locals: Vec::new(),
            workgroup: dag.workgroup_shape.clone(),
            sizes: sizes::sizes(&dag.workgroup_shape, &dag.symbolic_workgroup),
            workers: None,
            symbol_count: dag.symbol_count,
            intervals,
            frames: Vec::new(),
            reductions: ovl_ir::analysis::reduction_loops(dag),
            block_mark: None,
            body: String::new(),
            indent: 3,
            stops: std::cell::Cell::new(false),
            blocked: None,
            blocked_range_open: None,
            blocked_program: None,
            blocked_width: BLOCKED_WORKERS,
            blocked_heap: Vec::new(),
            coop: None,
            split_open: None,
            shared: Vec::new(),
            lanes: None,
            lane_program: None,
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
        e.inputs = e.tensors(TensorKind::Input, &dag.inputs)?;
        e.outputs = e.tensors(TensorKind::Output, &dag.outputs)?;
        e.locals = e.tensors(TensorKind::Local, &dag.locals)?;
        let mut total = 0u64;
        let limit = match dialect {
            Dialect::Cpp => CPU_LOCALS_BYTES,
            Dialect::Cuda => CUDA_LOCAL_BYTES,
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
            if bytes > limit || total > CPU_LOCALS_BYTES {
                return Err(CodegenError::LocalTooLarge {
                    operator: dag.name.clone(),
                    defined_at: defined_at(dag),
                    local: l.index as usize,
                    ty: format!("{}{:?}", l.dtype, l.shape),
                    bytes: if bytes > limit { bytes } else { total },
                    limit,
                    total_limit: CPU_LOCALS_BYTES,
                });
            }
        }
        Ok(e)
    }

    fn tensors(
        &self,
        kind: TensorKind,
        list: &[ir::TensorType],
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
                    name: tensor_name(kind, i),
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

    /// A typed literal of dtype `d` in this dialect.
    fn typed_literal(&self, d: DType, lit: Literal) -> String {
        let (f, i, u) = literal_parts(lit);
        self.literal(d, f, i, u)
    }

    /// Value `v` (an operand: validation proved it an earlier value) and its dtype.
    fn value(&self, v: ValueId) -> (usize, DType) {
        let v = v as usize;
        (v, self.dtype(v))
    }

    /// The dtype of value `v` (validation proved it one; an `i64` for a statement, never read).
    fn dtype(&self, v: usize) -> DType {
        self.kernel.exprs[v].dtype.unwrap_or(DType::I64)
    }

    /// The value of `v` if it is an integer or bool CONST.
    fn const_int(&self, v: usize) -> Option<i128> {
        let x = &self.kernel.exprs[v];
        match (&x.inst, x.dtype) {
            (&Inst::Const(lit), Some(d)) => {
                let (_, i, u) = literal_parts(lit);
                d.int_literal(i, u)
            }
            _ => None,
        }
    }

    /// The geometry of a tensor of the operator.
    fn tensor_info(&self, t: TensorId) -> &TensorInfo {
        let list = match t.kind {
            TensorKind::Input => &self.inputs,
            TensorKind::Output => &self.outputs,
            _ => &self.locals,
        };
        &list[t.index as usize]
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

    /// Emits expression `k`; returns its value dtype (None for statements).
    fn expression(&mut self, k: usize) -> Emitted {
        if self.blocked.is_some() {
            return self.blocked_expression(k);
        }
        self.scalar_expression(k)
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
        for x in &self.kernel.exprs {
            let (t, fill) = match &x.inst {
                Inst::LocalTensor { tensor, .. } => (tensor, true),
                Inst::Read { tensor, .. } | Inst::Write { tensor, .. } => (tensor, false),
                _ => continue,
            };
            if t.kind != TensorKind::Local {
                continue;
            }
            let l = t.index as usize;
            if l < need.len() && !decided[l] {
                decided[l] = true;
                // Filled at the top level, outside every block.
                need[l] = !(fill && x.block.is_none());
            }
        }
        need
    }
}

/// The C++ name of tensor `index` of a kind in generated code: `in0`, `out1`, `loc2`.
pub(crate) fn tensor_name(kind: TensorKind, index: usize) -> String {
    let prefix = match kind {
        TensorKind::Input => "in",
        TensorKind::Output => "out",
        _ => "loc",
    };
    format!("{prefix}{index}")
}

/// A literal's `(float_value, int_value, uint_value)`, as the IR stores it.
fn literal_parts(lit: Literal) -> (f64, i64, u64) {
    match lit {
        Literal::Float(f) => (f, 0, 0),
        Literal::Int(i) => (0.0, i, 0),
        Literal::UInt(u) => (0.0, 0, u),
        Literal::Bool(b) => (0.0, i64::from(b), 0),
    }
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
