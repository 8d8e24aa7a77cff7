//! What fusion knows of the machine a graph runs on: the measured constants its rules are tuned
//! by, one place each. Fusion is given a [`FusionTarget`] ([`crate::fuse_for`]; the other
//! entry points take [`FusionTarget::default`], the CPU as measured), and the CPU runner asks
//! the same values ([`FusionTarget::CPU`]), so a rule and the code it predicts never disagree.
//!
//! Today the target tunes the GEMM epilogue pairs (`gemm_pair`): which GEMM and consumer run
//! as one step, a schedule of the CPU runner (the interpreter and CUDA run the two kernels one
//! after the other). The targets' limits on worker-local memory stay with the IR
//! (`ovl_ir::limits`: they are what every backend accepts, not tuning) and the row buffers'
//! budgets in [`crate::RowBudget`].

/// The machine-dependent constants fusion's rules go by. [`Default`] is [`FusionTarget::CPU`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FusionTarget {
    /// The most rows of C for which the CPU runs a GEMM without packing its second operand:
    /// the few-row kernels stream it (`ovl-runtime/src/gemm/small`), where a product with more rows
    /// packs it on every call. The runner's kernels and the rule that pairs a GEMM with its
    /// consumer (`gemm_pair`, each block of rows a call) both go by it: with more rows, every
    /// block's call packs W again (`[512, 1024] x [1024, 1024]` measured 7-12% slower paired
    /// on the Zen 5, three runs).
    pub few_rows: u64,
    /// The most bytes of C per block of rows of an epilogue pair: well inside a core's L2
    /// cache, which also holds the GEMM's packed operands.
    pub pair_block_bytes: u64,
    /// The most bytes of the second operand W an epilogue pair reads again per block: a quarter
    /// of the 32 MiB L3 cache of the machine measured (W of 16 MB ran 1.6-1.7x slower paired,
    /// `benches/gemm_epilogue.rs`, docs/benchmarks.md "GEMM epilogue").
    pub pair_weight_bytes: u64,
    /// The most blocks of rows an epilogue pair computes C in (each a call of the library, each
    /// reading W again; `[20, 650] x [650, 2600]` in 2 blocks measured 3-7% faster paired;
    /// docs/benchmarks.md "GEMM epilogue").
    pub pair_max_blocks: u64,
}

impl FusionTarget {
    /// The CPU ovl's rules were measured on (a Zen 5 with AVX-512, 32 MiB of L3 cache) and its
    /// runner (`ovl-runtime/src/plan`).
    pub const CPU: FusionTarget = FusionTarget {
        few_rows: 64,
        pair_block_bytes: 256 << 10,
        pair_weight_bytes: 8 << 20,
        pair_max_blocks: 8,
    };

    /// The rows per block of an `m`-row C of `row_bytes` bytes per row on `threads` threads
    /// for an epilogue pair: at most [`FusionTarget::pair_block_bytes`] of C, at least one
    /// block per thread where there are rows for it.
    pub fn rows_per_block(&self, m: u64, row_bytes: u64, threads: u64) -> u64 {
        let by_cache = (self.pair_block_bytes / row_bytes.max(1)).max(1);
        by_cache.min(m.div_ceil(threads.max(1))).max(1)
    }
}

impl Default for FusionTarget {
    /// [`FusionTarget::CPU`].
    fn default() -> Self {
        FusionTarget::CPU
    }
}
