//! Tensors inside an operator: inputs, outputs and worker-local tensors, the worker's position,
//! and element reads and writes.

use super::expr::{Expr, IntoExpr, One, Typed, Var};
use super::state::{self, TraceState};
use crate::dtype::DType;
use crate::host::Scalar;
use crate::ir;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Index;
use std::panic::Location;
use std::rc::Rc;

/// Which of an operator's tensors a [`Tensor`] handle names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorKind {
    Input,
    Output,
    Local,
}

impl TensorKind {
    pub(crate) fn to_ir(self) -> ir::TensorKind {
        match self {
            TensorKind::Input => ir::TensorKind::Input,
            TensorKind::Output => ir::TensorKind::Output,
            TensorKind::Local => ir::TensorKind::Local,
        }
    }
}

struct TensorInner<T> {
    kind: TensorKind,
    index: u32,
    trace: u32,
    shape: Vec<usize>,
    name: String,
    /// Storage for the values returned by `Index` (which must hand out references).
    reads: typed_arena::Arena<Expr<T>>,
}

/// A tensor inside an operator: an input, an output (from [`output`]) or a worker-local tensor
/// (from [`zeros`]/[`ones`]). Its shape is static: a plain `usize` array at trace time.
///
/// Read an element with `t[[i, j]]` (or `t[pos]` with a whole [`Position`]); write one with
/// `out[[i, j]] = v`. Inputs are read-only and outputs write-only; local tensors are both.
pub struct Tensor<T> {
    inner: Rc<TensorInner<T>>,
    _t: PhantomData<T>,
}

impl<T> Clone for Tensor<T> {
    fn clone(&self) -> Self {
        Tensor {
            inner: self.inner.clone(),
            _t: PhantomData,
        }
    }
}

impl<T: Scalar> fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor<{}>({} {:?})",
            T::DTYPE,
            self.inner.name,
            self.inner.shape
        )
    }
}

impl<T: Scalar> Tensor<T> {
    pub(crate) fn new(
        kind: TensorKind,
        index: u32,
        trace: u32,
        shape: Vec<usize>,
        name: String,
    ) -> Self {
        Tensor {
            inner: Rc::new(TensorInner {
                kind,
                index,
                trace,
                shape,
                name,
                reads: typed_arena::Arena::new(),
            }),
            _t: PhantomData,
        }
    }

    /// The shape (static at trace time).
    pub fn shape(&self) -> &[usize] {
        &self.inner.shape
    }

    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.inner.shape.len()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.inner.shape.iter().product()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        T::DTYPE
    }

    /// The shape as an array of `N` dimensions: `let [rows, cols] = x.dims::<2>();`.
    /// A rank other than `N` is a trace error (the result is then all zeros).
    #[track_caller]
    pub fn dims<const N: usize>(&self) -> [usize; N] {
        let mut out = [0; N];
        if self.rank() == N {
            out.copy_from_slice(&self.inner.shape);
        } else {
            let loc = Location::caller();
            let msg = format!(
                "{} has shape {:?} (rank {}) but `dims::<{N}>()` asks for rank {N}",
                self.inner.name,
                self.inner.shape,
                self.rank()
            );
            state::with(|s| s.error(loc, msg));
        }
        out
    }

    /// The size of dimension `axis` (a trace error if out of range).
    #[track_caller]
    pub fn dim(&self, axis: usize) -> usize {
        match self.inner.shape.get(axis) {
            Some(&d) => d,
            None => {
                let loc = Location::caller();
                let msg = format!(
                    "{} has rank {}, it has no dimension {axis}",
                    self.inner.name,
                    self.rank()
                );
                state::with(|s| s.error(loc, msg));
                0
            }
        }
    }

    pub(crate) fn kind(&self) -> TensorKind {
        self.inner.kind
    }

    pub(crate) fn index_in_operator(&self) -> u32 {
        self.inner.index
    }

    pub(crate) fn trace_id(&self) -> u32 {
        self.inner.trace
    }

    fn tensor_ref(&self) -> ir::TensorRef {
        ir::TensorRef {
            kind: self.inner.kind.to_ir() as i32,
            index: self.inner.index,
        }
    }

    /// Reads one element: `indices` has one entry per dimension.
    #[track_caller]
    pub fn read(&self, indices: impl IntoIndices) -> Expr<T> {
        let loc = Location::caller();
        let indices = indices.into_indices();
        state::with(|s| {
            if self.inner.kind == TensorKind::Output {
                s.error(
                    loc,
                    format!(
                        "{} is an output, and outputs are write-only; keep the value in a \
                         `variable(..)` or a local tensor (`zeros(..)`) and read that",
                        self.inner.name
                    ),
                );
            }
            let operands = self.index_operands(s, loc, &indices);
            let id = s.push(ir::Expression {
                code: ir::Op::Read as i32,
                dtype: T::DTYPE.to_ir() as i32,
                operands,
                tensor: Some(self.tensor_ref()),
                ..Default::default()
            });
            Expr::from_id(s.id, id)
        })
    }

    /// Writes one element: `indices` has one entry per dimension.
    #[track_caller]
    pub fn write(&self, indices: impl IntoIndices, value: impl IntoExpr<T>) {
        let loc = Location::caller();
        let indices = indices.into_indices();
        let value = value.into_expr();
        state::with(|s| {
            if self.inner.kind == TensorKind::Input {
                s.error(
                    loc,
                    format!(
                        "{} is an input, and inputs are read-only; write to an output made with \
                         `output(..)`/`output_like(..)`, or to a local tensor",
                        self.inner.name
                    ),
                );
            }
            let mut operands = self.index_operands(s, loc, &indices);
            operands.push(s.operand(loc, value.trace, value.id));
            s.push(ir::Expression {
                code: ir::Op::Write as i32,
                operands,
                tensor: Some(self.tensor_ref()),
                ..Default::default()
            });
        })
    }

    fn index_operands(&self, s: &mut TraceState, loc: &Location<'_>, indices: &[Idx]) -> Vec<u32> {
        if self.inner.trace != s.id {
            s.error(
                loc,
                format!("{} belongs to another operator's trace", self.inner.name),
            );
        }
        let parts: Vec<IdxPart> = indices
            .iter()
            .flat_map(|i| i.parts.iter().copied())
            .collect();
        if parts.len() != self.rank() {
            s.error(
                loc,
                format!(
                    "{} has rank {} (shape {:?}) but is indexed with {} indices",
                    self.inner.name,
                    self.rank(),
                    self.inner.shape,
                    parts.len()
                ),
            );
        }
        parts
            .iter()
            .enumerate()
            .map(|(axis, part)| match *part {
                IdxPart::Const(c) => {
                    if let Some(&dim) = self.inner.shape.get(axis) {
                        if c < 0 || c as u128 >= dim as u128 {
                            s.error(
                                loc,
                                format!(
                                    "constant index {c} is out of bounds for axis {axis} of {} \
                                     (shape {:?})",
                                    self.inner.name, self.inner.shape
                                ),
                            );
                        }
                    }
                    s.push_const(DType::I64, crate::Literal::Int(c))
                }
                IdxPart::Staged { trace, id } => s.operand(loc, trace, id),
            })
            .collect()
    }
}

/// One index of an element access: a trace-time integer, a staged integer, or a whole
/// [`Position`] (one index per workgroup dimension). Built by [`ix`].
#[derive(Clone, Debug)]
pub struct Idx {
    parts: Vec<IdxPart>,
}

#[derive(Clone, Copy, Debug)]
enum IdxPart {
    Const(i64),
    Staged { trace: u32, id: u32 },
}

/// Values usable as an index: trace-time integers, staged integers, a [`Position`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be used as a tensor index",
    note = "indices are integers: trace-time (`usize`, `i32`, ...) or staged (`Expr<i64>`, a loop index, a position component); cast a float with `as i64`"
)]
pub trait IndexPart {
    #[track_caller]
    fn to_idx(self) -> Idx;
}

/// Records an error in the operator being traced, at the caller's line: the operator still
/// traces to the end, and evaluating anything that depends on it returns the error. For checks
/// an operator makes of its arguments (shapes that do not fit, an axis out of range, ...).
///
/// The `ovl` crate's documentation has an example (section "Checking arguments").
#[track_caller]
pub fn trace_error(message: impl Into<String>) {
    let loc = Location::caller();
    let message = message.into();
    state::with(|s| s.error(loc, message));
}

/// Converts one index of an array-literal tensor access (`t[[i, j]]` becomes `t.read([ix(i), ix(j)])`).
#[track_caller]
pub fn ix(i: impl IndexPart) -> Idx {
    i.to_idx()
}

macro_rules! plain_index {
    ($($t:ty),*) => {$(
        impl IndexPart for $t {
            #[allow(clippy::unnecessary_cast)]
            fn to_idx(self) -> Idx {
                let v = i64::try_from(self as i128).unwrap_or(i64::MAX);
                Idx { parts: vec![IdxPart::Const(v)] }
            }
        }
    )*};
}
plain_index!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

macro_rules! staged_index {
    ($($t:ty),*) => {$(
        impl IndexPart for Expr<$t> {
            fn to_idx(self) -> Idx {
                Idx { parts: vec![IdxPart::Staged { trace: self.trace, id: self.id }] }
            }
        }
        impl IndexPart for Var<$t> {
            #[track_caller]
            fn to_idx(self) -> Idx {
                self.get().to_idx()
            }
        }
    )*};
}
staged_index!(i8, i16, i32, i64, u8, u16, u32, u64);

impl IndexPart for Idx {
    fn to_idx(self) -> Idx {
        self
    }
}

impl IndexPart for &Position {
    fn to_idx(self) -> Idx {
        let used = if self.scalar { 0 } else { self.axes.len() };
        Idx {
            parts: self.axes[..used]
                .iter()
                .map(|e| IdxPart::Staged {
                    trace: e.trace,
                    id: e.id,
                })
                .collect(),
        }
    }
}

impl IndexPart for Position {
    fn to_idx(self) -> Idx {
        (&self).to_idx()
    }
}

/// A full index: what `Tensor::read`/`write` accept.
pub trait IntoIndices {
    #[track_caller]
    fn into_indices(self) -> Vec<Idx>;
}

impl<const N: usize> IntoIndices for [Idx; N] {
    fn into_indices(self) -> Vec<Idx> {
        self.into()
    }
}

impl IntoIndices for Vec<Idx> {
    fn into_indices(self) -> Vec<Idx> {
        self
    }
}

impl<I: IndexPart> IntoIndices for I {
    #[track_caller]
    fn into_indices(self) -> Vec<Idx> {
        vec![self.to_idx()]
    }
}

impl<T: Scalar, I: IndexPart> Index<I> for Tensor<T> {
    type Output = Expr<T>;
    #[track_caller]
    fn index(&self, index: I) -> &Expr<T> {
        let e = self.read(index);
        self.inner.reads.alloc(e)
    }
}

/// The worker's position in the workgroup, from [`position_in`]: `pos[k]` is its index along
/// workgroup dimension `k` (a staged `i64`).
#[derive(Clone, Debug)]
pub struct Position {
    axes: Vec<Expr<i64>>,
    /// Declared with the 0-d shape `[]`: one worker, and as an index it has no component (it
    /// indexes a 0-d tensor), while `pos[0]` is still 0.
    scalar: bool,
}

impl Position {
    /// The number of workgroup dimensions.
    pub fn rank(&self) -> usize {
        self.axes.len()
    }

    /// The components as an array of `N` (a trace error if the rank differs).
    #[track_caller]
    pub fn axes<const N: usize>(&self) -> [Expr<i64>; N] {
        if self.axes.len() != N {
            let loc = Location::caller();
            let msg = format!("the workgroup has rank {}, not {N}", self.axes.len());
            state::with(|s| s.error(loc, msg));
            let zero = super::expr::constant(0i64);
            return [zero; N];
        }
        std::array::from_fn(|i| self.axes[i])
    }
}

impl Index<usize> for Position {
    type Output = Expr<i64>;
    #[track_caller]
    fn index(&self, axis: usize) -> &Expr<i64> {
        match self.axes.get(axis) {
            Some(e) => e,
            None => {
                let loc = Location::caller();
                let msg = format!(
                    "the workgroup has rank {}, there is no position component {axis}",
                    self.axes.len()
                );
                state::with(|s| s.error(loc, msg));
                &self.axes[0]
            }
        }
    }
}

/// Declares the workgroup (one worker per element of `shape`) and returns this worker's position.
/// Call it exactly once per operator. A shape with a zero dimension declares no worker (the
/// operator runs nothing; outputs no worker writes are zeros); the 0-d shape `[]` declares one
/// worker, at position `[0]`.
#[track_caller]
pub fn position_in(shape: impl AsRef<[usize]>) -> Position {
    let loc = Location::caller();
    let shape = shape.as_ref();
    state::with(|s| {
        if s.workgroup.is_some() {
            s.error(
                loc,
                "position_in(..) is called a second time; an operator has exactly one workgroup",
            );
        }
        if shape_too_large(shape, 1).is_some() {
            s.error(
                loc,
                format!(
                    "the workgroup {shape:?} has more workers than the limit, {}: declare a \
                     smaller workgroup",
                    isize::MAX
                ),
            );
        }
        if s.workgroup.is_none() {
            // A 0-d shape (a scalar) has one element: one worker, at position 0. A shape with a
            // zero dimension (an empty tensor) has no worker: the operator runs nothing and its
            // outputs are zeros (empty when they are shaped like the input).
            s.workgroup = Some(if shape.is_empty() {
                vec![1]
            } else {
                shape.iter().map(|&d| d as u64).collect()
            });
        }
        let axes = (0..shape.len().max(1))
            .map(|axis| {
                let id = s.push(ir::Expression {
                    code: ir::Op::Position as i32,
                    dtype: DType::I64.to_ir() as i32,
                    axis: axis as u32,
                    ..Default::default()
                });
                Expr::from_id(s.id, id)
            })
            .collect();
        Position {
            axes,
            scalar: shape.is_empty(),
        }
    })
}

fn tensor_type(dtype: DType, shape: &[usize]) -> ir::TensorType {
    ir::TensorType {
        symbolic: Vec::new(),
        dtype: dtype.to_ir() as i32,
        shape: shape.iter().map(|&d| d as u64).collect(),
    }
}

pub(crate) fn declare_input<T: Scalar>(
    s: &mut TraceState,
    shape: Vec<usize>,
    name: String,
) -> Tensor<T> {
    let index = s.inputs.len() as u32;
    s.inputs.push(tensor_type(T::DTYPE, &shape));
    s.input_names.push(name.clone());
    Tensor::new(TensorKind::Input, index, s.id, shape, name)
}

/// `Some(message)` when a tensor of `shape` with elements of `size` bytes is larger than any
/// allocation can be (2^63 - 1 bytes), saying how large it is.
fn shape_too_large(shape: &[usize], size: usize) -> Option<String> {
    let elements = ovl_ir::shape::checked_count(shape);
    match elements.and_then(|n| n.checked_mul(size as u64)) {
        Some(bytes) if bytes <= isize::MAX as u64 => None,
        Some(bytes) => Some(format!("{bytes} bytes")),
        None => Some("more than 2^64 bytes".into()),
    }
}

/// A new output tensor of the given shape (its elements start at zero).
#[track_caller]
pub fn output<T: Scalar>(shape: impl AsRef<[usize]>) -> Tensor<T> {
    let loc = Location::caller();
    let shape = shape.as_ref().to_vec();
    state::with(|s| {
        if let Some(size) = shape_too_large(&shape, T::DTYPE.size()) {
            s.error(
                loc,
                format!(
                    "an output of shape {shape:?} and dtype {} takes {size}; the limit of one \
                     tensor is {} bytes: make the output smaller",
                    T::DTYPE,
                    isize::MAX
                ),
            );
        }
        let index = s.outputs.len() as u32;
        s.outputs.push(tensor_type(T::DTYPE, &shape));
        Tensor::new(
            TensorKind::Output,
            index,
            s.id,
            shape,
            format!("output {index}"),
        )
    })
}

/// A new output tensor with the dtype and shape of `like`.
#[track_caller]
pub fn output_like<T: Scalar>(like: &Tensor<T>) -> Tensor<T> {
    output(like.shape())
}

const MAX_LOCAL_BYTES: usize = ovl_ir::limits::PORTABLE_LOCAL_BYTES as usize;

#[track_caller]
fn local<T: Scalar>(shape: &[usize], fill: T) -> Tensor<T> {
    let loc = Location::caller();
    state::with(|s| {
        let bytes = ovl_ir::shape::checked_count(shape)
            .and_then(|n| n.checked_mul(T::DTYPE.size() as u64))
            .map_or("more than 2^64".to_string(), |b| b.to_string());
        if shape_too_large(shape, T::DTYPE.size()).is_some()
            || shape.iter().product::<usize>() * T::DTYPE.size() > MAX_LOCAL_BYTES
        {
            s.error(
                loc,
                format!(
                    "a local tensor of shape {shape:?} takes {bytes} bytes per worker; the limit \
                     is {MAX_LOCAL_BYTES} bytes: use a smaller tile or an output tensor"
                ),
            );
        }
        let index = s.locals.len() as u32;
        s.locals.push(tensor_type(T::DTYPE, shape));
        let mut e = ir::Expression {
            code: ir::Op::LocalTensor as i32,
            dtype: T::DTYPE.to_ir() as i32,
            tensor: Some(ir::TensorRef {
                kind: ir::TensorKind::Local as i32,
                index,
            }),
            ..Default::default()
        };
        super::state::set_literal(&mut e, T::DTYPE, fill.to_literal());
        s.push(e);
        Tensor::new(
            TensorKind::Local,
            index,
            s.id,
            shape.to_vec(),
            format!("local {index}"),
        )
    })
}

/// A worker-local tensor filled with zeros (readable and writable, private to each worker).
#[track_caller]
pub fn zeros<T: Scalar>(shape: impl AsRef<[usize]>) -> Tensor<T> {
    local(shape.as_ref(), T::default())
}

/// A worker-local tensor filled with ones.
#[track_caller]
pub fn ones<T: Scalar + One>(shape: impl AsRef<[usize]>) -> Tensor<T> {
    local(shape.as_ref(), T::ONE)
}

/// A worker-local mutable scalar initialized to `init`; its dtype is `init`'s
/// (`variable(0.0f32)` is a `Var<f32>`, `variable(x[[i]])` has `x`'s dtype).
#[track_caller]
pub fn variable<I: Typed>(init: I) -> Var<I::Elem> {
    let loc = Location::caller();
    let init = init.to_expr();
    state::with(|s| {
        let v = s.operand(loc, init.trace, init.id);
        let id = s.push_op(ir::Op::Variable, Some(<I::Elem as Scalar>::DTYPE), vec![v]);
        Var {
            expr: Expr::from_id(s.id, id),
        }
    })
}
