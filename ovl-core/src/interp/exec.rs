//! Execution of a decoded program for a range of workers.

use super::program::{Code, Program};
use super::value::{self, Value};
use crate::host::{AllocError, TensorData};
use crate::ir::TensorKind;
use ovl_ir::ops::REDUCE_LANES;
use std::sync::atomic::{
    AtomicBool, AtomicI16, AtomicI32, AtomicI64, AtomicI8, AtomicU16, AtomicU32, AtomicU64,
    AtomicU8, Ordering::Relaxed,
};

/// An element type with an atomic twin of the same size, so that output buffers can be shared
/// between worker threads (different workers may write the same element: a race in the user's
/// program, which must still not be undefined behaviour in the interpreter).
pub(crate) trait AtomicElem: Copy + Send + Sync {
    type Atom: Send + Sync;
    fn atom(self) -> Self::Atom;
    fn load(a: &Self::Atom) -> Self;
    fn store(a: &Self::Atom, v: Self);
}

macro_rules! atomic_int {
    ($($t:ty => $a:ty),*) => {$(
        impl AtomicElem for $t {
            type Atom = $a;
            fn atom(self) -> $a { <$a>::new(self) }
            fn load(a: &$a) -> $t { a.load(Relaxed) }
            fn store(a: &$a, v: $t) { a.store(v, Relaxed) }
        }
    )*};
}
atomic_int!(i8 => AtomicI8, i16 => AtomicI16, i32 => AtomicI32, i64 => AtomicI64,
    u8 => AtomicU8, u16 => AtomicU16, u32 => AtomicU32, u64 => AtomicU64, bool => AtomicBool);

impl AtomicElem for f32 {
    type Atom = AtomicU32;
    fn atom(self) -> AtomicU32 {
        AtomicU32::new(self.to_bits())
    }
    fn load(a: &AtomicU32) -> f32 {
        f32::from_bits(a.load(Relaxed))
    }
    fn store(a: &AtomicU32, v: f32) {
        a.store(v.to_bits(), Relaxed)
    }
}

macro_rules! atomic_half {
    ($($t:ty),*) => {$(
        impl AtomicElem for $t {
            type Atom = AtomicU16;
            fn atom(self) -> AtomicU16 {
                AtomicU16::new(self.to_bits())
            }
            fn load(a: &AtomicU16) -> $t {
                <$t>::from_bits(a.load(Relaxed))
            }
            fn store(a: &AtomicU16, v: $t) {
                a.store(v.to_bits(), Relaxed)
            }
        }
    )*};
}
atomic_half!(half::f16, half::bf16);

impl AtomicElem for f64 {
    type Atom = AtomicU64;
    fn atom(self) -> AtomicU64 {
        AtomicU64::new(self.to_bits())
    }
    fn load(a: &AtomicU64) -> f64 {
        f64::from_bits(a.load(Relaxed))
    }
    fn store(a: &AtomicU64, v: f64) {
        a.store(v.to_bits(), Relaxed)
    }
}

/// An output buffer viewed as atomics: in place when size and alignment allow (always on
/// 64-bit targets), else through a copy written back by [`Shared::finish`].
pub(crate) enum Shared<'a, T: AtomicElem> {
    View(&'a [T::Atom]),
    Copy(Vec<T::Atom>, &'a mut [T]),
}

impl<'a, T: AtomicElem> Shared<'a, T> {
    fn new(data: &'a mut [T]) -> Shared<'a, T> {
        let same_size = std::mem::size_of::<T::Atom>() == std::mem::size_of::<T>();
        let aligned = (data.as_ptr() as usize) & (std::mem::align_of::<T::Atom>() - 1) == 0;
        if same_size && aligned {
            // SAFETY: `T::Atom` has the size and bit validity of `T` (every atomic here wraps an
            // integer or bool of the same size, and floats are stored through their bits), the
            // pointer is aligned for `T::Atom` (checked), and the unique borrow of `data` is held
            // for 'a, so nothing else accesses the memory while the atomic view exists.
            let view = unsafe {
                std::slice::from_raw_parts(data.as_mut_ptr() as *const T::Atom, data.len())
            };
            Shared::View(view)
        } else {
            Shared::Copy(data.iter().map(|&x| x.atom()).collect(), data)
        }
    }

    #[inline]
    fn slice(&self) -> &[T::Atom] {
        match self {
            Shared::View(v) => v,
            Shared::Copy(v, _) => v,
        }
    }

    fn finish(self) {
        if let Shared::Copy(atoms, data) = self {
            for (d, a) in data.iter_mut().zip(&atoms) {
                *d = T::load(a);
            }
        }
    }
}

/// An output tensor shared between worker threads.
pub(crate) enum OutView<'a> {
    F32(Shared<'a, f32>),
    F64(Shared<'a, f64>),
    I8(Shared<'a, i8>),
    I16(Shared<'a, i16>),
    I32(Shared<'a, i32>),
    I64(Shared<'a, i64>),
    U8(Shared<'a, u8>),
    U16(Shared<'a, u16>),
    U32(Shared<'a, u32>),
    U64(Shared<'a, u64>),
    Bool(Shared<'a, bool>),
    F16(Shared<'a, half::f16>),
    BF16(Shared<'a, half::bf16>),
}

impl<'a> OutView<'a> {
    pub(crate) fn new(data: &'a mut TensorData) -> OutView<'a> {
        match data {
            TensorData::F32(v) => OutView::F32(Shared::new(v)),
            TensorData::F64(v) => OutView::F64(Shared::new(v)),
            TensorData::I8(v) => OutView::I8(Shared::new(v)),
            TensorData::I16(v) => OutView::I16(Shared::new(v)),
            TensorData::I32(v) => OutView::I32(Shared::new(v)),
            TensorData::I64(v) => OutView::I64(Shared::new(v)),
            TensorData::U8(v) => OutView::U8(Shared::new(v)),
            TensorData::U16(v) => OutView::U16(Shared::new(v)),
            TensorData::U32(v) => OutView::U32(Shared::new(v)),
            TensorData::U64(v) => OutView::U64(Shared::new(v)),
            TensorData::Bool(v) => OutView::Bool(Shared::new(v)),
            TensorData::F16(v) => OutView::F16(Shared::new(v)),
            TensorData::BF16(v) => OutView::BF16(Shared::new(v)),
        }
    }

    /// Writes element `i`; false if the dtype differs or `i` is outside the buffer.
    #[inline]
    fn store(&self, i: usize, v: Value) -> bool {
        macro_rules! put {
            ($s:expr, $t:ty, $x:expr) => {
                match $s.slice().get(i) {
                    Some(a) => {
                        <$t>::store(a, $x);
                        true
                    }
                    None => false,
                }
            };
        }
        match (self, v) {
            (OutView::F32(s), Value::F32(x)) => put!(s, f32, x),
            (OutView::F64(s), Value::F64(x)) => put!(s, f64, x),
            (OutView::I8(s), Value::I8(x)) => put!(s, i8, x),
            (OutView::I16(s), Value::I16(x)) => put!(s, i16, x),
            (OutView::I32(s), Value::I32(x)) => put!(s, i32, x),
            (OutView::I64(s), Value::I64(x)) => put!(s, i64, x),
            (OutView::U8(s), Value::U8(x)) => put!(s, u8, x),
            (OutView::U16(s), Value::U16(x)) => put!(s, u16, x),
            (OutView::U32(s), Value::U32(x)) => put!(s, u32, x),
            (OutView::U64(s), Value::U64(x)) => put!(s, u64, x),
            (OutView::Bool(s), Value::Bool(x)) => put!(s, bool, x),
            (OutView::F16(s), Value::F16(x)) => put!(s, half::f16, x),
            (OutView::BF16(s), Value::BF16(x)) => put!(s, half::bf16, x),
            _ => false,
        }
    }

    /// Writes back a copied buffer (no-op for in-place views).
    pub(crate) fn finish(self) {
        match self {
            OutView::F32(s) => s.finish(),
            OutView::F64(s) => s.finish(),
            OutView::I8(s) => s.finish(),
            OutView::I16(s) => s.finish(),
            OutView::I32(s) => s.finish(),
            OutView::I64(s) => s.finish(),
            OutView::U8(s) => s.finish(),
            OutView::U16(s) => s.finish(),
            OutView::U32(s) => s.finish(),
            OutView::U64(s) => s.finish(),
            OutView::Bool(s) => s.finish(),
            OutView::F16(s) => s.finish(),
            OutView::BF16(s) => s.finish(),
        }
    }
}

/// A runtime error of one worker (turned into an `InterpError` by the caller).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Fault {
    IndexOutOfBounds {
        expression: usize,
        tensor: usize,
        axis: usize,
        index: i128,
        size: u64,
    },
    NonPositiveStep {
        expression: usize,
        step: i64,
    },
    /// A `while` loop (its WHILE_BEGIN) ran more than `limit` iterations.
    WhileLimit {
        expression: usize,
        limit: u64,
    },
    /// An inconsistency that validation should have excluded.
    Internal {
        expression: usize,
        message: &'static str,
    },
}

/// The first fault of a chunk of workers, with the worker's position.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FirstFault {
    pub fault: Fault,
    pub position: Vec<u64>,
}

/// What one thread needs to run workers: shared inputs and outputs, and its own scratch state.
pub(crate) struct Worker<'p, 'd> {
    prog: &'p Program,
    inputs: &'p [&'d TensorData],
    outputs: &'p [OutView<'d>],
    /// One value slot per expression.
    slots: Vec<Value>,
    /// Per RANGE loop: (end, step, iterations started).
    ranges: Vec<(i64, i64, u64)>,
    /// Per accumulator: its lanes in the running reduction loop (`Program::range_lanes` of it).
    lanes: Vec<Vec<Value>>,
    locals: Vec<TensorData>,
    local_ready: Vec<bool>,
    position: Vec<u64>,
    first: Option<FirstFault>,
    /// The bound on one `while` loop's iterations (0: none).
    while_limit: u64,
}

impl<'p, 'd> Worker<'p, 'd> {
    pub(crate) fn new(
        prog: &'p Program,
        inputs: &'p [&'d TensorData],
        outputs: &'p [OutView<'d>],
        while_limit: u64,
    ) -> Result<Worker<'p, 'd>, AllocError> {
        let locals = prog.tensors[prog.n_inputs + prog.n_outputs..]
            .iter()
            .map(|t| {
                let fail = || AllocError {
                    dtype: t.dtype,
                    shape: t.dims.clone(),
                };
                let len = ovl_ir::shape::checked_count(&t.dims)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(fail)?;
                TensorData::try_zeros(t.dtype, len).map_err(|_| fail())
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Worker {
            prog,
            inputs,
            outputs,
            slots: vec![Value::Bool(false); prog.instrs.len()],
            ranges: vec![(0, 0, 0); prog.n_ranges],
            lanes: vec![Vec::with_capacity(REDUCE_LANES); prog.n_accumulators],
            local_ready: vec![false; locals.len()],
            locals,
            position: vec![0; prog.workgroup.len()],
            first: None,
            while_limit,
        })
    }

    /// Runs the workers with row-major linear indices `start..end` and returns the first fault.
    pub(crate) fn run_chunk(mut self, start: u64, end: u64) -> Option<FirstFault> {
        // Position of worker `start`.
        let mut rest = start;
        for axis in (0..self.position.len()).rev() {
            let d = self.prog.workgroup[axis].max(1);
            self.position[axis] = rest % d;
            rest /= d;
        }
        for _ in start..end {
            self.run_worker();
            // Next position, row-major.
            for axis in (0..self.position.len()).rev() {
                self.position[axis] += 1;
                if self.position[axis] < self.prog.workgroup[axis] {
                    break;
                }
                self.position[axis] = 0;
            }
        }
        self.first
    }

    #[cold]
    fn fault(&mut self, fault: Fault) {
        if self.first.is_none() {
            self.first = Some(FirstFault {
                fault,
                position: self.position.clone(),
            });
        }
    }

    /// Makes sure a local tensor was initialized in this worker (zeros if its LOCAL_TENSOR did
    /// not run, for example because it sits in a branch not taken).
    #[inline]
    fn ready_local(&mut self, local: usize) {
        if !self.local_ready[local] {
            Value::zero(self.locals[local].dtype()).fill(&mut self.locals[local]);
            self.local_ready[local] = true;
        }
    }

    /// The linear element index of a READ/WRITE, or None (fault recorded: the caller ends the
    /// worker) if out of bounds.
    #[inline]
    fn element(&mut self, pc: usize) -> Option<usize> {
        let prog = self.prog;
        let ins = &prog.instrs[pc];
        let t = &prog.tensors[ins.tensor as usize];
        let start = ins.indices as usize;
        let mut linear = 0u64;
        for (axis, (&operand, (&dim, &stride))) in prog.pool[start..start + t.dims.len()]
            .iter()
            .zip(t.dims.iter().zip(&t.strides))
            .enumerate()
        {
            let Some(i) = self.slots[operand as usize].as_index() else {
                self.fault(Fault::Internal {
                    expression: pc,
                    message: "a non-integer index",
                });
                return None;
            };
            if i < 0 || i >= dim as i128 {
                self.fault(Fault::IndexOutOfBounds {
                    expression: pc,
                    tensor: ins.tensor as usize,
                    axis,
                    index: i,
                    size: dim,
                });
                return None;
            }
            linear += i as u64 * stride;
        }
        Some(linear as usize)
    }

    /// At the end of reduction loop `ordinal`: folds each accumulator's lanes pairwise and
    /// combines the fold into the accumulator (`proto/ovl.proto`, "Accumulators").
    fn fold_reductions(&mut self, ordinal: usize) -> Result<(), &'static str> {
        for &(acc, lanes_of, combiner) in &self.prog.reductions[ordinal] {
            let op = combiner.op();
            let combine =
                |x: Value, y: Value| value::binary(op, x, y).ok_or("lanes of the wrong dtype");
            let lanes = &self.lanes[lanes_of];
            let folded = ovl_ir::cooperative::pairwise_fold(lanes, |x, y| value::binary(op, x, y))
                .ok_or("lanes of the wrong dtype")?;
            self.slots[acc] = combine(self.slots[acc], folded)?;
        }
        Ok(())
    }

    /// Runs the program of the worker at `self.position`. A fault ends it: nothing after the
    /// faulting expression runs (enclosing loops exit, later writes do not happen).
    fn run_worker(&mut self) {
        let prog = self.prog;
        let n = prog.instrs.len();
        self.local_ready.fill(false);
        let mut pc = 0usize;
        while pc < n {
            let ins = &prog.instrs[pc];
            let (a, b, c) = (ins.a as usize, ins.b as usize, ins.c as usize);
            let result = match ins.code {
                Code::Const => ins.literal,
                Code::Position => Value::I64(self.position[ins.jump as usize] as i64),
                Code::Variable | Code::Accumulator => self.slots[a],
                Code::Cast => value::cast(self.slots[a], ins.dtype),
                Code::Unary(op) => match value::unary(op, self.slots[a]) {
                    Some(v) => v,
                    None => return self.internal(pc, "unary operand of the wrong dtype"),
                },
                Code::Binary(op) => match value::binary(op, self.slots[a], self.slots[b]) {
                    Some(v) => v,
                    None => return self.internal(pc, "binary operands of the wrong dtypes"),
                },
                Code::Compare(op) => match value::compare(op, self.slots[a], self.slots[b]) {
                    Some(v) => Value::Bool(v),
                    None => return self.internal(pc, "compared operands of the wrong dtypes"),
                },
                Code::Select => match self.slots[a].as_bool() {
                    Some(true) => self.slots[b],
                    Some(false) => self.slots[c],
                    None => return self.internal(pc, "a non-bool select condition"),
                },
                Code::Fma => match value::fma(self.slots[a], self.slots[b], self.slots[c]) {
                    Some(v) => v,
                    None => return self.internal(pc, "fma operands of the wrong dtypes"),
                },
                Code::Read => {
                    let t = &prog.tensors[ins.tensor as usize];
                    match self.element(pc) {
                        // A fault ends the worker (proto/ovl.proto).
                        None => return,
                        Some(i) => {
                            let loaded = match t.kind {
                                TensorKind::Input => Value::load(self.inputs[t.index], i),
                                TensorKind::Local => {
                                    self.ready_local(t.index);
                                    Value::load(&self.locals[t.index], i)
                                }
                                _ => None,
                            };
                            match loaded {
                                Some(v) => v,
                                None => return self.internal(pc, "a read outside the buffer"),
                            }
                        }
                    }
                }
                Code::Write => {
                    // A fault ends the worker (proto/ovl.proto).
                    let Some(i) = self.element(pc) else { return };
                    let t = &prog.tensors[ins.tensor as usize];
                    let v = self.slots[a];
                    let ok = match t.kind {
                        TensorKind::Output => self.outputs[t.index].store(i, v),
                        TensorKind::Local => {
                            self.ready_local(t.index);
                            v.store(&mut self.locals[t.index], i)
                        }
                        _ => false,
                    };
                    if !ok {
                        return self.internal(pc, "a write of the wrong dtype or outside");
                    }
                    pc += 1;
                    continue;
                }
                Code::Assign => {
                    self.slots[a] = self.slots[b];
                    pc += 1;
                    continue;
                }
                Code::Accumulate => {
                    // Iteration t of the reduction loop combines into lane t % its lane count.
                    let t = self.ranges[ins.jump as usize].2;
                    let lanes = &mut self.lanes[ins.aux as usize];
                    let at = (t % lanes.len().max(1) as u64) as usize;
                    let Some(lane) = lanes.get_mut(at) else {
                        return self.internal(pc, "an accumulate before its loop started");
                    };
                    let combiner = prog.combiners[ins.aux as usize];
                    match value::binary(combiner.op(), *lane, self.slots[b]) {
                        Some(v) => *lane = v,
                        None => {
                            return self.internal(pc, "an accumulated value of the wrong dtype")
                        }
                    }
                    pc += 1;
                    continue;
                }
                Code::LocalTensor => {
                    let local = prog.tensors[ins.tensor as usize].index;
                    if !ins.literal.fill(&mut self.locals[local]) {
                        return self.internal(pc, "a local fill of the wrong dtype");
                    }
                    self.local_ready[local] = true;
                    pc += 1;
                    continue;
                }
                Code::If => {
                    pc = match self.slots[a].as_bool() {
                        Some(true) => pc + 1,
                        Some(false) => ins.jump as usize,
                        None => return self.internal(pc, "a non-bool if condition"),
                    };
                    continue;
                }
                Code::Else => {
                    // End of the taken `then` branch.
                    pc = ins.jump as usize;
                    continue;
                }
                Code::EndIf => {
                    pc += 1;
                    continue;
                }
                Code::WhileBegin => {
                    // This entry's iteration count (the slot holds no value otherwise).
                    self.slots[pc] = Value::U64(0);
                    pc += 1;
                    continue;
                }
                Code::Range => {
                    let (Some(start), Some(end), Some(step)) = (
                        self.slots[a].as_i64(),
                        self.slots[b].as_i64(),
                        self.slots[c].as_i64(),
                    ) else {
                        return self.internal(pc, "non-i64 range bounds");
                    };
                    if step <= 0 {
                        // A fault ends the worker (proto/ovl.proto).
                        self.fault(Fault::NonPositiveStep {
                            expression: pc,
                            step,
                        });
                        return;
                    }
                    if start >= end {
                        pc = ins.jump as usize;
                        continue;
                    }
                    self.ranges[ins.aux as usize] = (end, step, 0);
                    let count = prog.range_lanes[ins.aux as usize];
                    for &(acc, ordinal, combiner) in &prog.reductions[ins.aux as usize] {
                        let d = prog.instrs[acc].dtype;
                        let lanes = &mut self.lanes[ordinal];
                        lanes.clear();
                        lanes.resize(count, Value::identity(combiner, d));
                    }
                    self.slots[pc] = Value::I64(start);
                    pc += 1;
                    continue;
                }
                Code::EndRange => {
                    let head = ins.jump as usize;
                    let ordinal = prog.instrs[head].aux as usize;
                    let (end, step, _) = self.ranges[ordinal];
                    let next = match self.slots[head].as_i64() {
                        Some(i) => i.checked_add(step),
                        None => return self.internal(pc, "a non-i64 loop index"),
                    };
                    match next {
                        Some(i) if i < end => {
                            self.slots[head] = Value::I64(i);
                            self.ranges[ordinal].2 += 1;
                            pc = head + 1;
                        }
                        _ => {
                            if let Err(m) = self.fold_reductions(ordinal) {
                                return self.internal(pc, m);
                            }
                            pc += 1;
                        }
                    }
                    continue;
                }
                Code::WhileCond => {
                    pc = match self.slots[a].as_bool() {
                        Some(true) => {
                            let begin = ins.aux as usize;
                            let Value::U64(n) = &mut self.slots[begin] else {
                                return self.internal(pc, "a while loop without its count");
                            };
                            *n += 1;
                            if *n > self.while_limit && self.while_limit != 0 {
                                // A fault ends the worker, as an index out of bounds does.
                                self.fault(Fault::WhileLimit {
                                    expression: begin,
                                    limit: self.while_limit,
                                });
                                return;
                            }
                            pc + 1
                        }
                        Some(false) => ins.jump as usize,
                        None => return self.internal(pc, "a non-bool while condition"),
                    };
                    continue;
                }
                Code::WhileEnd => {
                    pc = ins.jump as usize;
                    continue;
                }
            };
            self.slots[pc] = result;
            pc += 1;
        }
    }

    /// Records an internal fault and abandons this worker.
    #[cold]
    fn internal(&mut self, pc: usize, message: &'static str) {
        self.fault(Fault::Internal {
            expression: pc,
            message,
        });
    }
}

/// The dtype-independent size of a workgroup, in workers.
pub(crate) fn worker_count(prog: &Program) -> u64 {
    prog.workgroup.iter().product()
}
