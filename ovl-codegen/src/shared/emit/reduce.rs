//! Accumulators: the lanes of a reduction (`proto/ovl.proto`, "Accumulators"), their
//! identities, the combiner of each iteration and the pairwise fold of the lanes at the end.

use super::{Emitted, Emitter};
use crate::error::CodegenError;
use crate::shared::literal::{narrow, vtype, widen};
use ovl_ir::ops::{self, Combiner, REDUCE_LANES};
use ovl_ir::typed::{Expr, Inst, ValueId};
use ovl_ir::DType;

impl Emitter<'_> {
    /// After a reduction loop ran: each accumulator becomes accumulator ⊕ the pairwise fold of
    /// its lanes (`proto/ovl.proto`, "Accumulators").
    pub(super) fn fold_lanes(&mut self, range: usize) -> Result<(), CodegenError> {
        if self.is_split(range) {
            return self.fold_split(range);
        }
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
    pub(super) fn pairwise_fold(
        &self,
        combiner: Combiner,
        d: DType,
        lane: impl Fn(usize) -> String,
    ) -> Result<String, CodegenError> {
        self.pairwise_fold_of(combiner, d, REDUCE_LANES, lane)
    }

    /// The pairwise fold of `count` (a power of two) values, each spelled by `lane`.
    pub(super) fn pairwise_fold_of(
        &self,
        combiner: Combiner,
        d: DType,
        count: usize,
        lane: impl Fn(usize) -> String,
    ) -> Result<String, CodegenError> {
        let mut level: Vec<String> = (0..count.max(1)).map(lane).collect();
        while level.len() > 1 {
            level = level
                .chunks(2)
                .map(|p| self.combine(combiner, d, &p[0], &p[1]))
                .collect::<Result<_, _>>()?;
        }
        Ok(level.swap_remove(0))
    }

    /// `x ⊕ y` for a combiner on dtype `d`, spelled as the op table spells its binary op.
    pub(super) fn combine(
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
        let (x, y) = (widen(d, &x), widen(d, &y));
        row.spelling
            .for_dtype(d.compute())
            .apply(&[&x, &y])
            .map(|e| narrow(d, &e))
            .ok_or_else(|| self.err(None, format!("{} does not take {d}", row.name)))
    }

    /// `lane ⊕ value`, the update of a reduction lane in its loop: [`Emitter::combine`], except
    /// that a float MIN/MAX uses `ovl::lane_min`/`ovl::lane_max`, equal to `ovl::fmin`/`fmax`
    /// for a lane that is not NaN. A lane never is: it starts at the identity (+-inf) and
    /// takes a value only when that value compares smaller (larger), which NaN never does.
    /// (The fold of the lanes and the accumulator's own value keep the full NaN test: an
    /// accumulator may start at NaN.)
    pub(super) fn lane_update(
        &self,
        combiner: Combiner,
        d: DType,
        lane: &str,
        value: &str,
    ) -> Result<String, CodegenError> {
        match (combiner, d) {
            (Combiner::Min, DType::F32 | DType::F64) => {
                Ok(format!("ovl::lane_min({lane}, {value})"))
            }
            (Combiner::Max, DType::F32 | DType::F64) => {
                Ok(format!("ovl::lane_max({lane}, {value})"))
            }
            _ => self.combine(combiner, d, lane, value),
        }
    }

    /// The combiner and dtype of accumulator `acc`.
    pub(super) fn accumulator_kind(&self, acc: usize) -> Result<(Combiner, DType), CodegenError> {
        match self.kernel.exprs[acc] {
            Expr {
                inst: Inst::Accumulator { combiner, .. },
                dtype: Some(d),
                ..
            } => Ok((combiner, d)),
            _ => Err(self.err(Some(acc), "not an accumulator")),
        }
    }

    /// An ACCUMULATOR: a mutable local like a VARIABLE (its lanes live with its reduction loop).
    pub(super) fn accumulator(&mut self, k: usize, init: ValueId) -> Emitted {
        let (init, d) = self.value(init);
        self.line(&format!("{} v{k} = v{init};", vtype(d)));
        Ok(Some(d))
    }

    /// An ACCUMULATE of `value` into `acc` at the current iteration of `range` (the innermost
    /// loop around it, as validation proved): into the lane of the iteration.
    pub(super) fn accumulate(
        &mut self,
        k: usize,
        acc: ValueId,
        value: ValueId,
        range: ValueId,
    ) -> Emitted {
        let (acc, range) = (acc as usize, range as usize);
        if !self.reductions.contains_key(&range) {
            return Err(self.err(Some(k), "an accumulate outside a reduction loop"));
        }
        let (combiner, d) = self.accumulator_kind(acc)?;
        if self.is_split(range) {
            // The thread's own chain (see `cooperative`).
            let chain = format!("ovl_c{acc}");
            let combined = self.combine(combiner, d, &chain, &format!("v{value}"))?;
            self.line(&format!("{chain} = {combined};"));
            return Ok(None);
        }
        let lane = format!("ovl_lanes{acc}[ovl_l{range}]");
        let combined = self.lane_update(combiner, d, &lane, &format!("v{value}"))?;
        self.line(&format!("{lane} = {combined};"));
        Ok(None)
    }

    /// The identity of a combiner on dtype `d`, as a literal of the dialect.
    pub(super) fn identity(&self, combiner: Combiner, d: DType) -> String {
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

    /// A reduction loop (`proto/ovl.proto`, "Accumulators"): each accumulator's lanes start at the
    /// combiner's identity, and the iterations run in blocks of `REDUCE_LANES`, iteration `l`
    /// of a block combining into lane `l`, so that the inner loop's lanes are independent and
    /// vectorize. Returns the braces opened; the fold goes after the inner two.
    pub(super) fn reduction_range(
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
                vtype(d)
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
}
