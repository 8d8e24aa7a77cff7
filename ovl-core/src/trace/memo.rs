//! Memoized operator traces: an operator called again with the same input dtypes and shapes and
//! the same trace-time arguments reuses its traced IR (and the operator's key, hashed once)
//! instead of running its body again.
//!
//! The key of a call ([`TraceKey`], built by the code `#[operator]` generates) holds the
//! operator's identity (its site and the Rust type of its body, which names every generic
//! argument), the dtype and shape of every tensor input, and the value of every trace-time
//! argument. An argument whose type cannot be keyed soundly (it implements neither [`TraceArg`]
//! nor [`crate::Scalar`], or its parameter is a pattern) makes the call unkeyable: it is traced
//! as usual, never served from the memo. Traces that recorded an error are not kept.
//!
//! The body of an operator must compute its IR from its arguments alone (the DSL's rule): a
//! body that reads global mutable state at trace time would be served the first trace. Set
//! `OVL_TRACE_MEMO=0` (read once) or call [`set_trace_memo`]`(false)` to trace every call.
//!
//! Arithmetic on lazy handles (`&a + &b`, `2.0 * &x`) is memoized the same way, by operator,
//! dtype, operand shapes and literals, and the source line it names.
//!
//! The memo is bounded like every in-memory cache of ovl ([`crate::lru`]): it keeps the
//! [`CAPACITY`] most recently used traces (least recently used evicted first).

use crate::dtype::{DType, Literal};
use crate::hash::Digest;
use crate::host::Scalar;
use crate::ir;
use crate::lazy::{Lazy, LazyTensor};
use crate::lru::{CacheControl, SharedLru};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// The most traces the memo keeps unless `ovl::set_cache_capacity` says otherwise.
pub const CAPACITY: usize = 4096;

/// What an operator returns, described well enough to rebuild its lazy handles on a memoized
/// call: the shape of each returned tensor, and the length of each returned `Vec`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Returned {
    /// One tensor, of this shape.
    Tensor(Arc<[usize]>),
    /// A `Vec` of this many entries (which follow).
    List(usize),
}

pub(crate) struct Memoized {
    pub dag: Arc<ir::ExpressionDag>,
    pub key: Digest,
    pub returned: Vec<Returned>,
}

/// The key of one operator call, built before its body runs: tensor inputs (dtype, shape) and
/// trace-time arguments (their value), in parameter order. The inputs are kept too: on a
/// memoized call they become the recorded node's inputs.
#[doc(hidden)]
pub struct TraceKey {
    bytes: Vec<u8>,
    keyable: bool,
    pub(crate) inputs: Vec<LazyTensor>,
}

impl Default for TraceKey {
    fn default() -> Self {
        TraceKey::new()
    }
}

impl TraceKey {
    /// An empty key.
    pub fn new() -> TraceKey {
        TraceKey {
            bytes: Vec::with_capacity(128),
            keyable: true,
            inputs: Vec::new(),
        }
    }

    /// A tensor input.
    pub fn tensor<T: Scalar>(&mut self, x: &Lazy<T>) {
        self.tensor_untyped(x.untyped());
    }

    /// A list of tensor inputs.
    pub fn tensors<T: Scalar>(&mut self, xs: &[Lazy<T>]) {
        self.bytes.push(b'L');
        self.len(xs.len());
        for x in xs {
            self.tensor_untyped(x.untyped());
        }
    }

    fn tensor_untyped(&mut self, x: &LazyTensor) {
        self.bytes.push(b'T');
        self.bytes.push(x.dtype.to_ir() as u8);
        self.len(x.shape.len());
        for &d in x.shape.iter() {
            self.len(d);
        }
        self.inputs.push(x.clone());
    }

    /// An argument that cannot be keyed: the call is traced, not memoized.
    pub fn unkeyable(&mut self) {
        self.keyable = false;
    }

    /// Raw bytes of a trace-time argument (what [`TraceArg`] implementations write).
    pub fn bytes(&mut self, b: &[u8]) {
        self.bytes.extend_from_slice(b);
    }

    /// The key's bytes (the tensor inputs' dtypes and shapes and the trace-time arguments).
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// A length or count.
    pub fn len(&mut self, n: usize) {
        self.bytes.extend_from_slice(&(n as u64).to_le_bytes());
    }

    fn scalar<T: Scalar>(&mut self, v: T) {
        self.bytes.push(b'S');
        self.bytes.push(T::DTYPE.to_ir() as u8);
        let (tag, bits) = match v.to_literal() {
            Literal::Float(f) => (0u8, f.to_bits()),
            Literal::Int(i) => (1, i as u64),
            Literal::UInt(u) => (2, u),
            Literal::Bool(b) => (3, b as u64),
        };
        self.bytes.push(tag);
        self.bytes.extend_from_slice(&bits.to_le_bytes());
    }
}

/// A trace-time argument type whose value can key a memoized trace: equal bytes mean equal
/// values as far as the operator body can tell (floats by their bit pattern).
pub trait TraceArg {
    /// Writes the value, self-delimited, into the key.
    fn write_key(&self, key: &mut TraceKey);
}

macro_rules! int_args {
    ($($t:ty),*) => {$(
        impl TraceArg for $t {
            fn write_key(&self, key: &mut TraceKey) {
                key.bytes(stringify!($t).as_bytes());
                key.bytes(&self.to_le_bytes());
            }
        }
    )*};
}
int_args!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64);

impl TraceArg for bool {
    fn write_key(&self, key: &mut TraceKey) {
        key.bytes(&[b'b', *self as u8]);
    }
}

impl TraceArg for char {
    fn write_key(&self, key: &mut TraceKey) {
        key.bytes(b"char");
        key.bytes(&(*self as u32).to_le_bytes());
    }
}

impl TraceArg for () {
    fn write_key(&self, key: &mut TraceKey) {
        key.bytes(b"()");
    }
}

impl TraceArg for str {
    fn write_key(&self, key: &mut TraceKey) {
        key.bytes(b"str");
        key.len(self.len());
        key.bytes(self.as_bytes());
    }
}

impl TraceArg for String {
    fn write_key(&self, key: &mut TraceKey) {
        self.as_str().write_key(key)
    }
}

impl TraceArg for DType {
    fn write_key(&self, key: &mut TraceKey) {
        key.bytes(&[b'D', self.to_ir() as u8]);
    }
}

/// A literal by its kind and bits (what a generic `T: Scalar` value becomes with
/// `to_literal()`, for keys of values of a generic type).
impl TraceArg for Literal {
    fn write_key(&self, key: &mut TraceKey) {
        let (tag, bits) = match *self {
            Literal::Float(f) => (b'f', f.to_bits()),
            Literal::Int(i) => (b'i', i as u64),
            Literal::UInt(u) => (b'u', u),
            Literal::Bool(b) => (b'b', b as u64),
        };
        key.bytes(&[b'l', tag]);
        key.bytes(&bits.to_le_bytes());
    }
}

impl<T: TraceArg + ?Sized> TraceArg for &T {
    fn write_key(&self, key: &mut TraceKey) {
        (**self).write_key(key)
    }
}

impl<T: TraceArg> TraceArg for [T] {
    fn write_key(&self, key: &mut TraceKey) {
        key.bytes(b"[]");
        key.len(self.len());
        self.iter().for_each(|v| v.write_key(key));
    }
}

impl<T: TraceArg, const N: usize> TraceArg for [T; N] {
    fn write_key(&self, key: &mut TraceKey) {
        self[..].write_key(key)
    }
}

impl<T: TraceArg> TraceArg for Vec<T> {
    fn write_key(&self, key: &mut TraceKey) {
        self[..].write_key(key)
    }
}

impl<T: TraceArg> TraceArg for Option<T> {
    fn write_key(&self, key: &mut TraceKey) {
        match self {
            None => key.bytes(b"None"),
            Some(v) => {
                key.bytes(b"Some");
                v.write_key(key)
            }
        }
    }
}

macro_rules! tuple_args {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: TraceArg),+> TraceArg for ($($name,)+) {
            fn write_key(&self, key: &mut TraceKey) {
                key.bytes(b"(");
                $(self.$idx.write_key(key);)+
                key.bytes(b")");
            }
        }
    };
}
tuple_args!(A 0);
tuple_args!(A 0, B 1);
tuple_args!(A 0, B 1, C 2);
tuple_args!(A 0, B 1, C 2, D 3);
tuple_args!(A 0, B 1, C 2, D 3, E 4);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5);

/// Wraps a reference to a trace-time argument for the generated code's key dispatch:
/// `(&&&KeyWrap(&arg)).__ovl_key(&mut key)` picks [`KeyByTraceArg`] when the argument's type
/// implements [`TraceArg`], else [`KeyByScalar`] when it is a [`Scalar`] (a generic `T: Num`
/// argument), else [`KeyNone`] (the call is not memoized).
#[doc(hidden)]
pub struct KeyWrap<'a, T: ?Sized>(pub &'a T);

/// See [`KeyWrap`].
#[doc(hidden)]
pub trait KeyByTraceArg {
    fn __ovl_key(&self, key: &mut TraceKey);
}

/// See [`KeyWrap`].
#[doc(hidden)]
pub trait KeyByScalar {
    fn __ovl_key(&self, key: &mut TraceKey);
}

/// See [`KeyWrap`].
#[doc(hidden)]
pub trait KeyNone {
    fn __ovl_key(&self, key: &mut TraceKey);
}

impl<T: TraceArg + ?Sized> KeyByTraceArg for &&KeyWrap<'_, T> {
    fn __ovl_key(&self, key: &mut TraceKey) {
        key.bytes(b"A");
        self.0.write_key(key);
    }
}

impl<T: Scalar> KeyByScalar for &KeyWrap<'_, T> {
    fn __ovl_key(&self, key: &mut TraceKey) {
        key.scalar(*self.0);
    }
}

impl<T: ?Sized> KeyNone for KeyWrap<'_, T> {
    fn __ovl_key(&self, key: &mut TraceKey) {
        key.unkeyable();
    }
}

/// The memo. Its misses are the keyable calls traced and kept (a call whose trace recorded an
/// error is neither a hit nor a miss).
static MEMO: SharedLru<Vec<u8>, Arc<Memoized>> = SharedLru::new("trace_memo", CAPACITY);

/// The memo, for `ovl::cache_stats`, `ovl::clear_caches` and `ovl::set_cache_capacity`.
pub fn cache() -> &'static dyn CacheControl {
    &MEMO
}
/// 0: not read yet, 1: on, 2: off.
static ENABLED: AtomicU8 = AtomicU8::new(0);

pub(crate) fn enabled() -> bool {
    match ENABLED.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let on = std::env::var("OVL_TRACE_MEMO").map_or(true, |v| v.trim() != "0");
            ENABLED.store(if on { 1 } else { 2 }, Ordering::Relaxed);
            on
        }
    }
}

/// Turns memoized traces on (the default, unless `OVL_TRACE_MEMO=0`) or off.
pub fn set_trace_memo(on: bool) {
    ENABLED.store(if on { 1 } else { 2 }, Ordering::Relaxed);
}

/// Counters of memoized traces since the process started (or [`clear_trace_memo`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceMemoStats {
    /// Operator calls served from the memo (their body did not run).
    pub hits: u64,
    /// Keyable calls traced and kept.
    pub misses: u64,
    /// Traces kept now.
    pub entries: usize,
}

/// The counters of memoized traces.
pub fn trace_memo_stats() -> TraceMemoStats {
    let c = MEMO.counters();
    TraceMemoStats {
        hits: c.hits,
        misses: c.misses,
        entries: c.entries,
    }
}

/// Forgets every memoized trace and resets the counters.
pub fn clear_trace_memo() {
    MEMO.clear();
}

/// The full key of a call: the operator's identity, then its [`TraceKey`].
///
/// The identity is the site and the type names of the body closure `F` and of `R` (they name
/// every generic argument), each a `&'static str` taken by address and length: equal
/// (address, length) pairs are equal strings, so this can only miss where the contents would
/// hit (when one string is emitted twice), never hit where they would miss.
pub(crate) fn full_key<R, F>(site: &super::OperatorSite, key: &TraceKey) -> Option<Vec<u8>> {
    if !key.keyable || !enabled() {
        return None;
    }
    let mut k = Vec::with_capacity(key.bytes.len() + 73);
    k.push(b'O');
    for s in [
        site.name,
        site.file,
        std::any::type_name::<F>(),
        std::any::type_name::<R>(),
    ] {
        k.extend_from_slice(&(s.as_ptr() as u64).to_le_bytes());
        k.extend_from_slice(&(s.len() as u64).to_le_bytes());
    }
    k.extend_from_slice(&site.line.to_le_bytes());
    k.extend_from_slice(&site.column.to_le_bytes());
    k.extend_from_slice(&key.bytes);
    Some(k)
}

/// What the memo key of an elementwise operator records of one operand: a tensor's shape, or
/// a literal's value.
pub(crate) enum OperandKey<'a> {
    /// A tensor operand of this shape.
    Shape(&'a [usize]),
    /// A literal operand.
    Literal(Literal),
}

/// The memo key of an elementwise operator recorded by arithmetic on lazy handles
/// (`&a + &b`, `2.0 * &x`): its name, opcode, dtype, each operand (a tensor's shape, a
/// literal's bits) and the source location it names. `None` when the memo is off.
pub(crate) fn elementwise_key(
    name: &'static str,
    op: i32,
    dtype: DType,
    operands: &[OperandKey<'_>],
    at: &'static std::panic::Location<'static>,
) -> Option<Vec<u8>> {
    if !enabled() {
        return None;
    }
    let mut k = Vec::with_capacity(96);
    k.push(b'E');
    for s in [name, at.file()] {
        k.extend_from_slice(&(s.as_ptr() as u64).to_le_bytes());
        k.extend_from_slice(&(s.len() as u64).to_le_bytes());
    }
    k.extend_from_slice(&at.line().to_le_bytes());
    k.extend_from_slice(&at.column().to_le_bytes());
    k.extend_from_slice(&op.to_le_bytes());
    k.push(dtype.to_ir() as u8);
    for o in operands {
        match o {
            OperandKey::Shape(shape) => {
                k.push(b'T');
                k.extend_from_slice(&(shape.len() as u64).to_le_bytes());
                for &d in shape.iter() {
                    k.extend_from_slice(&(d as u64).to_le_bytes());
                }
            }
            OperandKey::Literal(lit) => {
                let (tag, bits) = match *lit {
                    Literal::Float(f) => (0u8, f.to_bits()),
                    Literal::Int(i) => (1, i as u64),
                    Literal::UInt(u) => (2, u),
                    Literal::Bool(b) => (3, b as u64),
                };
                k.push(b'S');
                k.push(tag);
                k.extend_from_slice(&bits.to_le_bytes());
            }
        }
    }
    Some(k)
}

pub(crate) fn lookup(key: &[u8]) -> Option<Arc<Memoized>> {
    MEMO.lock().find(key)
}

pub(crate) fn remember(key: Vec<u8>, entry: Memoized) {
    let mut memo = MEMO.lock();
    memo.note_miss();
    memo.insert(key, Arc::new(entry));
}
