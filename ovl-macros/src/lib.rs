//! The `#[operator]` and `#[helper]` attributes of ovl.
//!
//! An operator body is ordinary Rust that runs once, at trace time, on symbolic values. These
//! attributes rewrite the few pieces of syntax that Rust cannot overload (`if`, `for`, `while`,
//! comparisons, `&&`/`||`, `as`, `t[[i, j]]` and assignments) into calls to `::ovl::__rt`, which
//! dispatch on the operand types: plain Rust for trace-time values, IR for staged ones. The exact
//! expansion is the contract in `EXPANSION.md`, next to this crate's `Cargo.toml`.
//!
//! The crate is laid out by stage:
//!
//! - `signature`: the parameters (tensor, tensor list, constant) and outputs of an operator;
//! - `reject`: the constructs a body cannot use, as spanned compile errors;
//! - `rewrite`: the body rewrite, one module per construct;
//! - `expand`: the wrapper function of an operator, and the output on errors;
//! - `errors`: collecting every error rather than stopping at the first.

mod errors;
mod expand;
mod prelude_names;
mod reject;
mod rewrite;
mod signature;
#[cfg(test)]
mod tests;

use proc_macro::TokenStream;

/// Turns a Rust function into a tensor operator.
///
/// The body is written for **one worker** of a parallel-for, like a CUDA thread. Calling the
/// function does not run it on data: it *traces* the body once into the operator's IR and returns
/// lazy handles on its outputs, which `ovl::evaluate` compiles and runs.
///
/// ```ignore
/// use ovl::prelude::*;
///
/// /// Running sum along each row, one worker per row.
/// #[operator]
/// fn cumsum_rows(x: Tensor<f32>) -> Tensor<f32> {
///     let [rows, cols] = x.dims::<2>();          // shapes are static: plain usize at trace time
///     let row = position_in([rows])[0];           // the workgroup: one worker per row
///     let out = output_like(&x);
///     let mut acc = variable(0.0f32);             // a worker-local mutable scalar
///     for j in 0..cols {                          // a staged loop: one RANGE in the IR
///         acc += x[[row, j]];                     // a read
///         out[[row, j]] = acc;                    // a write to an output
///     }
///     out
/// }
///
/// let y = cumsum_rows(&ndarray::array![[1.0f32, 2.0], [3.0, 4.0]]);  // a lazy handle
/// ```
///
/// # Signature
///
/// - A parameter of type `Tensor<E>` is a tensor input; the caller passes anything that converts
///   to a lazy tensor (another operator's output, an `ndarray` array, ...).
/// - A parameter of type `Vec<Tensor<E>>` is a list of tensor inputs (`Vec<Lazy<E>>` for the
///   caller).
/// - Every other parameter is a **trace-time constant**: it is part of the operator's identity
///   and its value is baked into the IR.
/// - The function returns its output tensor(s): a `Tensor<E>`, a tuple, array or `Vec` of them.
///   The caller gets the matching lazy handles.
///
/// Generics, `where` clauses, visibility, doc comments and other attributes are kept. In a
/// generic operator (`fn op<T: Num>(x: Tensor<T>) ..`), plain integers coerce to `T` as they do
/// to a concrete type (`x[[i]] == 0`, `select(c, 1, 0)`, `x[[i]] * 2`), plain floats coerce to
/// `T: Float`, and `T::ONE` / `T::ZERO` (the prelude's `One` and `Zero`) give constants; a
/// value that does not fit the actual type is a trace error. Tensor
/// parameters must be bound to a plain name (`x` or `mut x`). Not allowed: `self`, `async`,
/// `const`, `unsafe`, `extern`, `impl Trait` parameters or return type, a missing return type.
///
/// # Gradients: `#[operator(gradient = grad_fn)]`
///
/// Without the argument, or with `#[operator(gradient = auto)]` (which says so explicitly;
/// `auto` is reserved there), `ovl::backward` derives the gradient from the traced IR (see
/// docs/gradients.md); a written gradient always wins.
///
/// The attribute's only argument names the function that computes the input gradients of a
/// call; it is attached to **every call** of the operator, as `ovl::set_gradient` would, so that
/// `ovl::backward` differentiates through it. `grad_fn` is called with, in order:
///
/// 1. the operator's tensor parameters, as lazy handles (`Tensor<E>` → `Lazy<E>`,
///    `Vec<Tensor<E>>` → `Vec<Lazy<E>>`);
/// 2. the gradient flowing into each output, shaped like what the caller gets back (a
///    `Lazy<E>` per `Tensor<E>` of the return type; zeros for an output that does not reach the
///    seeds);
/// 3. the operator's other (constant) parameters, cloned.
///
/// It returns one gradient per tensor parameter, in order (a tuple when there are several): a
/// `Lazy<E>` of that input's dtype, or an `Option<Lazy<E>>` (`None`: no gradient flows, e.g. to
/// an index tensor), or a `Vec` of either for a `Vec<Tensor<E>>` parameter. It is usually
/// another operator, but any function with those types works.
///
/// ```ignore
/// #[operator(gradient = clip_grad)]
/// fn clip(x: Tensor<f64>, lo: f64, hi: f64) -> Tensor<f64> {
///     let i = position_in(x.shape())[0];
///     let out = output_like(&x);
///     out[[i]] = min(max(x[[i]], lo), hi);
///     out
/// }
///
/// #[operator]
/// fn clip_grad(x: Tensor<f64>, dy: Tensor<f64>, lo: f64, hi: f64) -> Tensor<f64> {
///     let i = position_in(x.shape())[0];
///     let dx = output_like(&x);
///     dx[[i]] = select(x[[i]] > lo && x[[i]] < hi, dy[[i]], 0.0);
///     dx
/// }
///
/// let y = clip(&x, 0.1, 0.9);
/// let dx = ovl::backward(&[(&y, &dy)], &[&x])?.of(&x);   // through clip_grad
/// ```
///
/// The macro writes that call as ordinary typed Rust, so a gradient function of the wrong arity
/// or with the wrong types (an `f32` gradient for an `f64` operator, one gradient for two inputs,
/// ...) is a compile error at `gradient = ..`. The constants must be `Clone + Send + Sync +
/// 'static` and bound to plain names (the gradient lives as long as the graph). A `Vec` output
/// takes every remaining output gradient, so it must be returned last.
///
/// # Trace time and staged values: the rule
///
/// Inside an operator, ordinary Rust runs at **trace time**, once. Values of type `Expr<T>`,
/// `Var<T>` and `Tensor<T>` are **staged**: operations on them build the IR, which runs later
/// for every worker. The macro rewrites only the syntax Rust cannot overload, and each rewrite
/// dispatches on the operand types, so the same syntax means plain Rust on trace-time values and
/// builds IR on staged ones:
///
/// | syntax | trace-time operands | staged operands |
/// |---|---|---|
/// | `if c { .. } else if .. else { .. }` (a statement) | Rust `if` | IF / ELSE / END_IF |
/// | `for i in a..b`, `a..=b`, `(a..b).step_by(s)`, each also `.rev()`; `arange(a, b, s)` | always staged: one RANGE (bounds may be plain) | RANGE |
/// | `for x in anything_else`, `#[unroll] for ..` | Rust loop, unrolled at trace time | - |
/// | `while c { .. }` | Rust loop | WHILE |
/// | `a < b`, `<= > >= == !=` | Rust comparison (numbers, `char`, strings, and shapes: slices, `Vec`s, arrays) | `Expr<bool>` |
/// | `a && b`, `a \|\| b` | Rust (short-circuit) | AND / OR |
/// | `e as T` | Rust `as` | CAST |
/// | `t[[i, j]]` (array-literal index) | - | READ |
/// | `t[[i, j]] = v`, `t[[i, j]] op= v` | - | WRITE (and READ) |
/// | `x = v` | Rust assignment | ASSIGN when `x: Var<T>` |
///
/// Arithmetic, unary `!`, compound assignment on a `Var`, and `t[pos]` (an index that is
/// not an array literal) need no rewrite: they are trait implementations.
///
/// Unary `-` applies to signed types only, as in Rust: negating an unsigned value (`-x[[i]]` on
/// a `Tensor<u8>`) would wrap (2 becomes 254), so it is a compile error that says so; cast first,
/// or write `wrapping_neg(x)` when the wrap is meant. A generic operator that negates bounds
/// its element type by `Signed` (`Float` implies it).
///
/// So a loop over a **range** is always one staged loop, however many iterations it has, while a
/// loop over anything else (a `Vec` of inputs, an array of gates) runs at trace time and is
/// unrolled into the IR.
///
/// Descending loops are staged too: `(a..b).rev()`, `(a..=b).rev()` and
/// `(a..b).step_by(s).rev()` visit the same indices as in Rust, last first, and
/// `arange(start, stop, step)` counts like numpy's `arange` (Python's `range`): up while below
/// `stop` for a positive step, down while above it for a negative one, e.g.
/// `for k in arange(n as i64 - 1, -1, -1)` visits `n-1, .., 0`. They are lowered onto an
/// ascending RANGE over a counter (`i = first + k * step`), so every backend runs them. A zero
/// `arange` step is a trace error (a fault when it is staged). The index is an `Expr<i64>`.
///
/// To unroll a range loop, mark it:
///
/// ```ignore
/// #[unroll]
/// for gate in 0..4 {        // gate: usize, four copies of the body in the IR
///     acc += w[[gate, j]] * x[[j]];
/// }
/// ```
///
/// # `if` as a statement and as a value
///
/// An `if` whose value is discarded (a statement, the body of a loop or branch) works on both
/// kinds of condition. An `if` whose value is used (`let v = if c { a } else { b };`, an argument,
/// the returned value) is a Rust `if`: its condition must be a trace-time `bool`. For a staged
/// choice of a value use `select(c, a, b)`, or a `variable` assigned in each branch:
///
/// ```ignore
/// let mut y = variable(0.0f32);
/// if x[[i]] > 0.0 { y = x[[i]]; } else { y = -x[[i]]; }      // staged
/// let scale = if n > 1024 { 0.5 } else { 1.0 };               // trace time: n is a usize
/// ```
///
/// `if let` and `while let` stay Rust.
///
/// # Loops
///
/// - A staged `for` (over a range) is traced once: `break` and `continue` in its body are compile
///   errors (a nested Rust loop may still use them for itself).
/// - `while` on a trace-time condition is a Rust loop (`break`/`continue` work); on a staged
///   condition it is one WHILE loop, whose body must not `break` or `continue` (a trace error).
///
/// # Your own functions named like DSL functions
///
/// `use ovl::prelude::*` is a glob import, and in Rust a name of your module wins over a glob
/// import *silently*: with your own `fn log(message: &str)` (or `use std::cmp::max`) in the
/// module, a bare `log(x[[i]])` would call yours, and the error would be about your function's
/// parameter. So a bare call, in an operator or helper body, of a name that `ovl::prelude`
/// exports must mean the prelude's function: where your module gives the name another meaning,
/// the compiler reports "`log` is ambiguous" at the call. Write `ovl::prelude::log(x)` for the
/// DSL function and `self::log(x)` (or any other path) for your own; calls written with a path
/// are never checked. (The expansion declares, first in the body, a module that glob-imports
/// both your module and the prelude and names the prelude functions the body calls.)
///
/// # Not supported (compile errors that say what to write instead)
///
/// `match` (use `if` / `else if` / `else`, or a plain helper function for trace-time matching),
/// `loop` (use `while`), closures (use a `#[helper]` function or a `for` loop), `return` except as
/// the last statement, `async` / `.await`, `unsafe` blocks, `break` / `continue` in a staged `for`,
/// a `for` over a range without an end.
///
/// Macro invocations (`println!`, `assert!`, ...) and nested items (`fn`, `struct`, ...) are not
/// rewritten: their contents keep their plain Rust meaning.
///
/// Mistakes that only show when tracing (writing an input, reading an output, a second
/// `position_in`, mismatched dtypes, ...) are errors that name the operator and the line of the
/// offending code.
#[proc_macro_attribute]
pub fn operator(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::operator(attr.into(), item.into())
        .into_tokens()
        .into()
}

/// Applies the body rewrite of [`macro@operator`] to a plain function, without making it an
/// operator, so that operators can call it with staged values.
///
/// ```ignore
/// use ovl::prelude::*;
///
/// #[helper]
/// fn clamp01(v: Expr<f32>) -> Expr<f32> {
///     let mut r = variable(v);
///     if v < 0.0 { r = 0.0; } else if v > 1.0 { r = 1.0; }
///     r.get()
/// }
/// ```
///
/// The same constructs are rejected as in an operator. Unlike an operator, a helper may take
/// `self` and any parameter type; when it returns `()`, the tail of its body is a statement (so a
/// final `if` is staged control flow).
#[proc_macro_attribute]
pub fn helper(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::helper(attr.into(), item.into())
        .into_tokens()
        .into()
}
