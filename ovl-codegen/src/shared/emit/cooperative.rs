//! Cooperative rows and columns on the GPU (`ovl_ir::cooperative`): a worker's top-level loops
//! split over the `width` threads of its group, each accumulator a per-thread chain folded
//! across the group after the loop, in the order `proto/ovl.proto` defines for the CUDA backend
//! ("Accumulators"): for rows by warp shuffles, then shared memory across the warps; for
//! columns by a pairwise tree in shared memory.

use super::{DType, Emitted, Emitter, Frame};
use crate::error::CodegenError;
use crate::shared::literal::vtype;
use ovl_ir::cooperative::{Layout, WARP};
use std::collections::BTreeMap;

impl Emitter<'_> {
    /// Whether RANGE `k` is a top-level loop split over a cooperative group.
    pub(super) fn is_split(&self, k: usize) -> bool {
        self.coop.as_ref().is_some_and(|c| c.loops.contains(&k))
    }

    /// A split loop: thread `ovl_lane` of the group runs iterations `ovl_lane, ovl_lane +
    /// width, ...`; each accumulator the loop reduces is the thread's chain `ovl_c<acc>`,
    /// starting at the combiner's identity. Three braces open; the fold goes after the first.
    pub(super) fn split_range(
        &mut self,
        k: usize,
        bounds: (usize, usize, usize),
        step: Option<i128>,
    ) -> Emitted {
        let width = self.coop.as_ref().map_or(1, |c| c.width);
        let mut chains = Vec::new();
        for acc in self.reductions.get(&k).cloned().unwrap_or_default() {
            let (combiner, d) = self.accumulator_kind(acc)?;
            chains.push(format!(
                "{} ovl_c{acc} = {};",
                vtype(d),
                self.identity(combiner, d)
            ));
        }
        self.counted_range_head(k, bounds, step, &chains);
        self.line(&format!(
            "for (uint32_t ovl_i{k} = ovl_lane; ovl_i{k} < (uint32_t)ovl_n{k}; ovl_i{k} += {width}u) {{"
        ));
        self.indent += 1;
        self.line(&format!(
            "const int64_t v{k} = (int64_t)((uint64_t)ovl_start{k} + (uint64_t)ovl_i{k} * (uint64_t)ovl_step{k});"
        ));
        self.split_open = Some(k);
        self.frames.push(Frame::Range {
            braces: 3,
            opener: k,
            inner: 1,
            block: None,
        });
        Ok(Some(DType::I64))
    }

    /// After a split loop (every thread of the group is here, the trip count is the group's):
    /// each chain folds across the group, `shfl_down` by 1, 2, 4, 8 and 16 within a warp, then
    /// (a group of several warps) each warp's lane 0 stores its fold in shared memory and every
    /// thread folds the warps' pairwise; the accumulator becomes accumulator ⊕ fold, the same
    /// in every thread.
    pub(super) fn fold_split(&mut self, range: usize) -> Result<(), CodegenError> {
        if self
            .coop
            .as_ref()
            .is_some_and(|c| c.layout == Layout::Columns)
        {
            return self.fold_columns(range);
        }
        let width = self.coop.as_ref().map_or(1, |c| c.width);
        let warps = (width / WARP) as usize;
        let accs = self.reductions.get(&range).cloned().unwrap_or_default();
        let mut kinds = Vec::new();
        for &acc in &accs {
            let (combiner, d) = self.accumulator_kind(acc)?;
            kinds.push((acc, combiner, d));
            self.line(&format!("{} ovl_t{acc} = ovl_c{acc};", vtype(d)));
            let mut offset = 1;
            while offset < WARP {
                let other = format!("ovl::shfl_down(ovl_t{acc}, {offset}u)");
                let c = self.combine(combiner, d, &format!("ovl_t{acc}"), &other)?;
                self.line(&format!("ovl_t{acc} = {c};"));
                offset *= 2;
            }
            if warps == 1 {
                self.line(&format!("ovl_t{acc} = ovl::shfl(ovl_t{acc}, 0);"));
            } else {
                // One array per loop and accumulator: an accumulator reduced by two loops of
                // one worker must not reuse an array another warp may still be reading.
                self.shared.push(format!(
                    "__shared__ {} ovl_red{range}_{acc}[{warps}];",
                    vtype(d)
                ));
                self.line(&format!(
                    "if ((threadIdx.x & {}u) == 0u) ovl_red{range}_{acc}[threadIdx.x >> 5] = ovl_t{acc};",
                    WARP - 1
                ));
            }
        }
        if warps > 1 && !kinds.is_empty() {
            self.line("__syncthreads();");
            for &(acc, combiner, d) in &kinds {
                let folded = self.pairwise_fold_of(combiner, d, warps, |l| {
                    format!("ovl_red{range}_{acc}[{l}]")
                })?;
                self.line(&format!("ovl_t{acc} = {folded};"));
            }
        }
        for &(acc, combiner, d) in &kinds {
            let c = self.combine(combiner, d, &format!("v{acc}"), &format!("ovl_t{acc}"))?;
            self.line(&format!("v{acc} = {c};"));
        }
        Ok(())
    }
}

impl Emitter<'_> {
    /// The guard of a WRITE to a tensor of `output` kind (else a local) in a cooperative
    /// kernel: outside its split loops a group writes from its thread 0 only, and in a column
    /// block a thread past the last worker (`ovl_active` false) writes no output.
    pub(super) fn write_guard(&self, output: bool) -> &'static str {
        let columns = match &self.coop {
            None => return "",
            Some(c) => c.layout == Layout::Columns,
        };
        match (self.split_open.is_some(), columns && output) {
            (true, false) => "",
            (true, true) => "if (ovl_active) ",
            (false, false) => "if (ovl_lane == 0u) ",
            (false, true) => "if (ovl_active && ovl_lane == 0u) ",
        }
    }

    /// A column block's fold buffers: per accumulator dtype, one slot of a block's threads for
    /// each accumulator of that dtype that one split loop reduces, at most. Returns the slot of
    /// each accumulator of RANGE `range`, with its buffer's name.
    fn column_slots(&mut self, range: usize) -> Result<Vec<(usize, String)>, CodegenError> {
        let Some(c) = self.coop.clone() else {
            return Ok(Vec::new());
        };
        let mut most: BTreeMap<DType, usize> = BTreeMap::new();
        let mut slots = Vec::new();
        for &k in &c.loops {
            let mut here: BTreeMap<DType, usize> = BTreeMap::new();
            for acc in self.reductions.get(&k).cloned().unwrap_or_default() {
                let (_, d) = self.accumulator_kind(acc)?;
                let n = here.entry(d).or_default();
                if k == range {
                    slots.push((*n, format!("ovl_red_{d}")));
                }
                *n += 1;
            }
            for (d, n) in here {
                let m = most.entry(d).or_default();
                *m = (*m).max(n);
            }
        }
        for (d, n) in most {
            let decl = format!(
                "__shared__ {} ovl_red_{d}[{}];",
                vtype(d),
                n * c.block() as usize
            );
            if !self.shared.contains(&decl) {
                self.shared.push(decl);
            }
        }
        Ok(slots)
    }

    /// After a split loop of a column block (every thread of the block is here): each thread
    /// stores its chain at its lane and column of the accumulator's slot, and the lanes fold
    /// pairwise in place, level by level (lane `j` takes lane `j + s` where `j` is a multiple
    /// of `2s`), a barrier after each level; the accumulator becomes accumulator ⊕ lane 0's
    /// fold, the same in every thread of the column. A barrier first: the previous fold's
    /// results may still be being read.
    fn fold_columns(&mut self, range: usize) -> Result<(), CodegenError> {
        let Some(c) = self.coop.clone() else {
            return Ok(());
        };
        let (block, cols) = (c.block(), c.workers_per_block);
        let accs = self.reductions.get(&range).cloned().unwrap_or_default();
        let slots = self.column_slots(range)?;
        let mut kinds = Vec::new();
        for (&acc, (slot, buffer)) in accs.iter().zip(&slots) {
            let (combiner, d) = self.accumulator_kind(acc)?;
            let at = |lane: &str| {
                format!(
                    "{buffer}[{}u + ({lane}) * {cols}u + ovl_col]",
                    slot * block as usize
                )
            };
            kinds.push((
                acc,
                combiner,
                d,
                at("ovl_lane"),
                at("ovl_lane + ovl_s"),
                at("0u"),
            ));
        }
        if kinds.is_empty() {
            return Ok(());
        }
        self.line("__syncthreads();");
        for (acc, _, _, mine, _, _) in &kinds {
            self.line(&format!("{mine} = ovl_c{acc};"));
        }
        self.line("__syncthreads();");
        self.line(&format!(
            "for (uint32_t ovl_s = 1u; ovl_s < {}u; ovl_s <<= 1) {{",
            c.width
        ));
        self.indent += 1;
        self.line("if ((ovl_lane & (2u * ovl_s - 1u)) == 0u) {");
        self.indent += 1;
        for (_, combiner, d, mine, next, _) in &kinds {
            let folded = self.combine(*combiner, *d, mine, next)?;
            self.line(&format!("{mine} = {folded};"));
        }
        self.indent -= 1;
        self.line("}");
        self.line("__syncthreads();");
        self.indent -= 1;
        self.line("}");
        for (acc, combiner, d, _, _, first) in &kinds {
            let c = self.combine(*combiner, *d, &format!("v{acc}"), first)?;
            self.line(&format!("v{acc} = {c};"));
        }
        Ok(())
    }
}
