//! Cooperative rows on the GPU (`ovl_ir::cooperative`): a worker's top-level loops split over
//! the `width` threads of its group, each accumulator a per-thread chain folded across the group
//! after the loop (warp shuffles, then shared memory across the warps), in the order
//! `proto/ovl.proto` defines for the CUDA backend ("Accumulators").

use super::{DType, Emitted, Emitter, Frame};
use crate::error::CodegenError;
use crate::shared::literal::ctype;
use ovl_ir::cooperative::WARP;

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
                ctype(d),
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
        let width = self.coop.as_ref().map_or(1, |c| c.width);
        let warps = (width / WARP) as usize;
        let accs = self.reductions.get(&range).cloned().unwrap_or_default();
        let mut kinds = Vec::new();
        for &acc in &accs {
            let (combiner, d) = self.accumulator_kind(acc)?;
            kinds.push((acc, combiner, d));
            self.line(&format!("{} ovl_t{acc} = ovl_c{acc};", ctype(d)));
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
                    ctype(d)
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
