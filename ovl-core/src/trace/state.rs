//! The thread-local state of the operator being traced: the expressions emitted so far, the
//! tensors declared, the open control-flow regions, and the errors recorded.

use crate::dtype::{DType, Literal};
use crate::error::TraceError;
use crate::ir;
use std::cell::RefCell;
use std::panic::Location;

/// Where the user's operator function is defined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OperatorSite {
    pub name: &'static str,
    pub file: &'static str,
    pub line: u32,
    pub column: u32,
}

/// The kind of a staged control-flow region, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RegionKind {
    Root,
    If,
    Else,
    Range,
    While,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Region {
    pub id: u32,
    pub kind: RegionKind,
}

pub(crate) struct TraceState {
    pub id: u32,
    pub site: OperatorSite,
    pub exprs: Vec<ir::Expression>,
    /// Region in which each expression was created (parallel to `exprs`).
    pub expr_region: Vec<u32>,
    pub regions: Vec<Region>,
    pub next_region: u32,
    pub workgroup: Option<Vec<u64>>,
    pub inputs: Vec<ir::TensorType>,
    pub input_names: Vec<String>,
    pub outputs: Vec<ir::TensorType>,
    pub locals: Vec<ir::TensorType>,
    pub errors: Vec<TraceError>,
    /// Accumulators updated so far, and the staged loop (region) that updates them.
    pub reducing: std::collections::HashMap<u32, u32>,
}

thread_local! {
    static STACK: RefCell<Vec<TraceState>> = const { RefCell::new(Vec::new()) };
    static NEXT_TRACE_ID: std::cell::Cell<u32> = const { std::cell::Cell::new(1) };
}

/// Starts tracing a new operator on this thread.
pub(crate) fn begin(site: OperatorSite) -> u32 {
    let id = NEXT_TRACE_ID.with(|n| {
        let id = n.get();
        n.set(id.wrapping_add(1).max(1));
        id
    });
    STACK.with(|s| {
        s.borrow_mut().push(TraceState {
            id,
            site,
            exprs: Vec::new(),
            expr_region: Vec::new(),
            regions: vec![Region {
                id: 0,
                kind: RegionKind::Root,
            }],
            next_region: 1,
            workgroup: None,
            inputs: Vec::new(),
            input_names: Vec::new(),
            outputs: Vec::new(),
            locals: Vec::new(),
            errors: Vec::new(),
            reducing: Default::default(),
        })
    });
    id
}

/// Ends the innermost trace and returns its state.
pub(crate) fn end(id: u32) -> Option<TraceState> {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        if s.last().map(|t| t.id) == Some(id) {
            s.pop()
        } else {
            None
        }
    })
}

/// Runs `f` on the state of the operator being traced.
///
/// # Panics
/// When called outside an `#[operator]` function: the DSL functions only mean something while
/// an operator is traced.
#[track_caller]
pub(crate) fn with<R>(f: impl FnOnce(&mut TraceState) -> R) -> R {
    let caller = Location::caller();
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        match s.last_mut() {
            Some(state) => f(state),
            None => panic!(
                "{}:{}: an ovl DSL function (staged value, tensor access, position_in, output, ...) \
                 was used outside an #[operator] or #[helper] function being traced",
                caller.file(),
                caller.line()
            ),
        }
    })
}

impl TraceState {
    /// Records a user error at `location` (the first few are kept).
    pub fn error(&mut self, location: &Location<'_>, message: impl Into<String>) {
        if self.errors.len() < 16 {
            self.errors.push(TraceError {
                operator: self.site.name.to_string(),
                operator_file: self.site.file.to_string(),
                operator_line: self.site.line,
                file: location.file().to_string(),
                line: location.line(),
                column: location.column(),
                message: message.into(),
            });
        }
    }

    fn current_region(&self) -> u32 {
        self.regions.last().map(|r| r.id).unwrap_or(0)
    }

    /// Appends an expression and returns its index.
    pub fn push(&mut self, expr: ir::Expression) -> u32 {
        let id = self.exprs.len() as u32;
        self.exprs.push(expr);
        self.expr_region.push(self.current_region());
        id
    }

    /// Appends an expression with the given opcode, dtype and operands.
    pub fn push_op(&mut self, code: ir::Op, dtype: Option<DType>, operands: Vec<u32>) -> u32 {
        self.push(ir::Expression {
            code: code as i32,
            dtype: dtype.map(|d| d.to_ir() as i32).unwrap_or(0),
            operands,
            ..Default::default()
        })
    }

    /// Appends a literal constant.
    pub fn push_const(&mut self, dtype: DType, value: Literal) -> u32 {
        let mut e = ir::Expression {
            code: ir::Op::Const as i32,
            dtype: dtype.to_ir() as i32,
            ..Default::default()
        };
        set_literal(&mut e, dtype, value);
        self.push(e)
    }

    /// Checks that expression `id` of trace `trace` may be used here and returns its index.
    pub fn operand(&mut self, location: &Location<'_>, trace: u32, id: u32) -> u32 {
        if trace != self.id {
            self.error(
                location,
                "a staged value created while tracing another operator (or an earlier call) was \
                 used here; staged values only live inside the operator that made them",
            );
            return id;
        }
        let region = self.expr_region.get(id as usize).copied().unwrap_or(0);
        if !self.regions.iter().any(|r| r.id == region) {
            self.error(
                location,
                "a value computed inside a staged `if`, `for` or `while` is used after that block \
                 ends; declare `let mut v = variable(..)` before the block and assign it inside",
            );
        }
        id
    }

    /// Whether expression `id` was created in the innermost open region.
    pub fn in_current_region(&self, id: u32) -> bool {
        self.expr_region.get(id as usize).copied() == Some(self.current_region())
    }

    pub fn open_region(&mut self, kind: RegionKind) {
        let id = self.next_region;
        self.next_region += 1;
        self.regions.push(Region { id, kind });
    }

    /// Closes the innermost region if it is of one of `kinds`; false otherwise.
    pub fn close_region(&mut self, kinds: &[RegionKind]) -> bool {
        match self.regions.last() {
            Some(r) if kinds.contains(&r.kind) && r.kind != RegionKind::Root => {
                self.regions.pop();
                true
            }
            _ => false,
        }
    }

    pub fn dtype_of(&self, id: u32) -> Option<DType> {
        self.exprs
            .get(id as usize)
            .and_then(|e| DType::from_ir(e.dtype))
    }
}

/// Stores `value` into the literal field of `e` that the IR uses for `dtype`.
pub(crate) fn set_literal(e: &mut ir::Expression, dtype: DType, value: Literal) {
    let as_f64 = match value {
        Literal::Float(f) => f,
        Literal::Int(i) => i as f64,
        Literal::UInt(u) => u as f64,
        Literal::Bool(b) => b as u8 as f64,
    };
    let as_i64 = match value {
        Literal::Float(f) => f as i64,
        Literal::Int(i) => i,
        Literal::UInt(u) => u as i64,
        Literal::Bool(b) => b as i64,
    };
    let as_u64 = match value {
        Literal::Float(f) => f as u64,
        Literal::Int(i) => i as u64,
        Literal::UInt(u) => u,
        Literal::Bool(b) => b as u64,
    };
    if dtype.is_float() {
        e.float_value = as_f64;
    } else if dtype.is_unsigned_int() {
        e.uint_value = as_u64;
    } else if dtype == DType::Bool {
        e.int_value = (as_i64 != 0 || as_f64 != 0.0) as i64;
    } else {
        e.int_value = as_i64;
    }
}
