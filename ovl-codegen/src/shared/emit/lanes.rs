//! Vector lanes (CUDA only): one GPU thread runs [`WIDTH`] consecutive workers of a row, and
//! the accesses those workers make to consecutive elements become one 16-byte load or store.
//!
//! A GPU thread that loads one 4-byte element per worker keeps few bytes in flight; with the
//! arithmetic of an LSTM cell between its loads and stores, a kernel then reaches about 60% of
//! the device's copy bandwidth on an H200, where the same kernel with 16-byte loads and stores
//! reaches about 85% (a measurement of hand-written variants, 2026-11-26). The compiler does
//! not merge the scalar accesses of neighbouring workers by itself (it cannot prove alignment
//! and moves no load across a store), so the emitter does.
//!
//! The lane program is the worker program emitted [`WIDTH`] times, once per lane `j`, each in
//! its own block where the innermost position is `4 q + j`: every lane computes exactly what
//! its worker computes alone, in the same order, so results are bit for bit those of one
//! worker per thread. Only the accesses [`plan`] picks change form:
//!
//! - a READ of an input: lane 0 loads the 4 elements its index and the next 3 name
//!   (`ovl_vr<k> = ovl::ld4(&in[index])`), lane `j` takes element `j`;
//! - a WRITE to an output: lane `j` puts its value into element `j` of `ovl_vw<k>` (lane 0 also
//!   keeps the index), and after the lanes one `ovl::st4` writes the four, in program order.
//!
//! [`plan`] picks an access when it runs in every worker (straight-line code of the worker: not
//! in a loop or a branch), its tensor has 4-byte elements, and its index, flattened, is an
//! affine map of the position (`ovl_ir::pattern`) with coefficient 1 on the innermost position
//! and every other coefficient and the constant a multiple of 4, inside the tensor for every
//! worker: then lane `j`'s element is lane 0's plus `j`, and lane 0's is a multiple of 4
//! elements from the tensor's start. A write is picked only when every write of its output is,
//! so no scalar write of that output comes between. Deferring the stores keeps the value each
//! element ends with: two picked writes of one output by the thread's lanes touch the same
//! 4-element block or disjoint ones (their lane-0 indices differ by a multiple of 4), and within
//! a block element `j` is lane `j`'s alone, written by the writes in program order, as the
//! stores are made. (The gradient of an LSTM cell writes its four gates into one output at
//! four offsets.) The operator must
//! have no local tensor, sizes known when compiling, an innermost workgroup extent that 4
//! divides, and no fault check (the frame checks faults are impossible: `stops`), so that a
//! lane never ends early. The frame runs the lane program when every tensor it accesses by
//! vectors is 16-byte aligned (device blocks are), else the worker program.

use super::{ctype, tensor_name, vtype, Emitter};
use ovl_ir::ir::{self, TensorKind};
use ovl_ir::pattern::{IndexPattern, PatternAnalysis};
use ovl_ir::typed::{Inst, Kernel, TensorId};
use ovl_ir::DType;
use std::collections::{BTreeMap, BTreeSet};

/// Workers per thread, elements per vector access.
pub(crate) const WIDTH: u64 = 4;

/// The accesses a lane program makes by vectors (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// READ expressions loaded 4 at a time, each with its tensor's C++ element type.
    pub reads: BTreeMap<usize, DType>,
    /// WRITE expressions stored 4 at a time, each with its tensor's element type and C++ name.
    pub writes: BTreeMap<usize, (DType, String)>,
    /// The input and output tensors accessed by vectors (`in0`, `out1`): the frame checks
    /// their alignment.
    pub tensors: BTreeSet<String>,
}

/// The largest operator (in expressions) given a lane program: the CUDA frame writes the worker
/// program once more per lane. A recurrent layer's backward (T = 35, H = 1500) fuses every
/// step's elementwise work side by side into one 3,263-expression kernel, 880 KB of CUDA with
/// lanes; NVRTC compiled the layer's 74 kernels in 5.1 s with its lanes and 3.6 s without (one
/// thread, this project's 2-core development machine).
pub(crate) const MAX_EXPRESSIONS: usize = 1024;

/// The lane of the program being emitted.
#[derive(Clone, Debug)]
pub(super) struct Lane {
    pub lane: u64,
    pub plan: Plan,
}

/// The vector accesses of `dag` (decoded: `kernel`), or `None` when it has none or has not the
/// shape for lanes.
pub(crate) fn plan(dag: &ir::ExpressionDag, kernel: &Kernel) -> Option<Plan> {
    let workgroup = &dag.workgroup_shape;
    let innermost = *workgroup.last()?;
    if dag.symbol_count > 0
        || !dag.symbolic_workgroup.is_empty()
        || !dag.locals.is_empty()
        || innermost % WIDTH != 0
        || dag.library_call.is_some()
    {
        return None;
    }
    let last = workgroup.len() - 1;
    let mut patterns = PatternAnalysis::new(kernel, workgroup);
    // Whether lanes can share one vector access for access `k` of tensor `t` (see the module
    // documentation).
    let mut vectorizable = |k: usize, t: &ir::TensorType| -> bool {
        if kernel.exprs[k].block.is_some()
            || DType::from_ir(t.dtype).is_none_or(|d| d.size() != 4)
            || !t.symbolic.is_empty()
        {
            return false;
        }
        let pattern = patterns.access(k);
        if !pattern.in_bounds(workgroup, &t.shape) {
            return false;
        }
        let IndexPattern::Affine(maps) = pattern else {
            return false;
        };
        // Σ stride_a * map_a: coefficients per position axis, then the constant.
        let mut flat = vec![0i128; workgroup.len() + 1];
        let mut stride = 1i128;
        for (a, m) in maps.iter().enumerate().rev() {
            for (c, &coef) in m.coeffs.iter().enumerate() {
                flat[c] += stride * coef as i128;
            }
            flat[workgroup.len()] += stride * m.constant as i128;
            stride *= t.shape[a] as i128;
        }
        flat.iter().enumerate().all(|(c, &v)| {
            if c == last {
                v == 1
            } else {
                v % WIDTH as i128 == 0
            }
        })
    };
    let mut plan = Plan::default();
    let mut writes: BTreeMap<u32, OutputWrites> = BTreeMap::new();
    for (k, x) in kernel.exprs.iter().enumerate() {
        match x.inst {
            Inst::Read {
                tensor:
                    TensorId {
                        kind: TensorKind::Input,
                        index,
                    },
                ..
            } => {
                let t = &dag.inputs[index as usize];
                if vectorizable(k, t) {
                    plan.reads.insert(k, kernel.inputs[index as usize].dtype);
                    plan.tensors
                        .insert(tensor_name(TensorKind::Input, index as usize));
                }
            }
            Inst::Write {
                tensor:
                    TensorId {
                        kind: TensorKind::Output,
                        index,
                    },
                ..
            } => {
                let t = &dag.outputs[index as usize];
                let entry = writes.entry(index).or_insert(OutputWrites {
                    writes: Vec::new(),
                    vectors: true,
                });
                entry.writes.push(k);
                entry.vectors &= vectorizable(k, t);
            }
            _ => {}
        }
    }
    for (output, w) in writes {
        if !w.vectors {
            continue;
        }
        let ks = w.writes;
        let (dtype, name) = (
            kernel.outputs[output as usize].dtype,
            tensor_name(TensorKind::Output, output as usize),
        );
        for k in ks {
            plan.writes.insert(k, (dtype, name.clone()));
        }
        plan.tensors.insert(name);
    }
    (!plan.reads.is_empty() || !plan.writes.is_empty()).then_some(plan)
}

/// The writes of one output, while [`plan`] looks at them.
struct OutputWrites {
    writes: Vec<usize>,
    /// Whether all can be vectors.
    vectors: bool,
}

impl Plan {
    /// The declarations a lane program needs before its lanes: one vector per picked access,
    /// and the index of each picked write.
    pub(crate) fn declarations(&self) -> Vec<String> {
        let mut d: Vec<String> = self
            .reads
            .iter()
            .map(|(k, t)| format!("ovl::vec4<{}> ovl_vr{k};", ctype(*t)))
            .collect();
        for (k, (t, _)) in &self.writes {
            d.push(format!("ovl::vec4<{}> ovl_vw{k};", ctype(*t)));
            d.push(format!("int64_t ovl_vi{k} = 0;"));
        }
        d
    }

    /// The stores after the lanes, in program order.
    pub(crate) fn stores(&self) -> Vec<String> {
        self.writes
            .iter()
            .map(|(k, (_, name))| format!("ovl::st4(&{name}[ovl_vi{k}], ovl_vw{k});"))
            .collect()
    }
}

impl Emitter<'_> {
    /// In a lane program, the statements of a READ `plan` picked (see the module
    /// documentation); `None` for any other access. `linear` is the flattened index.
    pub(super) fn lane_read(&self, k: usize, name: &str, linear: &str) -> Option<Vec<String>> {
        let lane = self.lanes.as_ref()?;
        let t = *lane.plan.reads.get(&k)?;
        let j = lane.lane;
        let mut lines = Vec::new();
        if j == 0 {
            lines.push(format!("ovl_vr{k} = ovl::ld4(&{name}[{linear}]);"));
        }
        lines.push(format!("const {} v{k} = ovl_vr{k}.v[{j}];", vtype(t)));
        Some(lines)
    }

    /// In a lane program, the statements of a WRITE `plan` picked; `None` for any other access.
    pub(super) fn lane_write(&self, k: usize, linear: &str, value: usize) -> Option<Vec<String>> {
        let lane = self.lanes.as_ref()?;
        lane.plan.writes.get(&k)?;
        let j = lane.lane;
        let mut lines = Vec::new();
        if j == 0 {
            lines.push(format!("ovl_vi{k} = (int64_t)({linear});"));
        }
        lines.push(format!("ovl_vw{k}.v[{j}] = v{value};"));
        Some(lines)
    }
}
