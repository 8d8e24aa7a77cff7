//! GEMM epilogue pairs: a library-call GEMM and the one kernel that reads its result C, run as
//! one step by the CPU runner (`ovl-runtime/src/gemm/epilogue.rs`): C is computed in blocks of rows, and
//! after each block the consumer's workers of those rows run on the same thread while the
//! block is still in cache.
//!
//! The pair is only a schedule: both kernels stay as they are in the graph (the interpreter
//! and CUDA run them one after the other, with the same values). The CPU runner runs the
//! pairs listed here as one step (`ovl::set_gemm_epilogue` says otherwise). It needs every worker of the
//! consumer to read C only in the rows it owns: the consumer's workgroup starts with C's rows
//! (`[m, ...]`, workers of row `r` a contiguous range), and every read of C has the worker's
//! row index as its row (an affine map of the position equal to `p0`, found by
//! [`ovl_ir::pattern`]; any column). The GEMM must be one 2-D product (no batch) with
//! concrete sizes, and C read by no other kernel (a requested output of the graph is fine:
//! every row of C is still written).
//!
//! And it must pay ([`FusionTarget::pays`]): every block reads the whole second operand W
//! again, which costs little only where the few-row kernel streams it (C of at most
//! [`FusionTarget::few_rows`] rows, W not transposed; with more rows every block's call would
//! pack W), W stays in the last-level cache and the blocks are few (the target's
//! [`FusionTarget::pair_weight_bytes`] and [`FusionTarget::pair_max_blocks`]). The rule is the measured one (`benches/gemm_epilogue.rs`,
//! docs/benchmarks.md "GEMM epilogue": `[20, 650] x [650, 2600]` in 2 blocks 3-7% faster
//! paired; W of 16 MB 1.6-1.7x slower, `[512, 1024] x [1024, 1024]` 7-12%). The report
//! assumes a parallel run on two threads (at least two blocks); the runner checks again with
//! its thread count and runs the kernels separately when the pair would not pay.

use crate::target::FusionTarget;
use ovl_ir::ir::{self, value_ref::Source};
use ovl_ir::library::{gemm_dims, is_library_call};
use ovl_ir::pattern::{Affine, PatternAnalysis};
use ovl_ir::typed::Kernel;
use std::fmt;

/// The rows per block of an `m`-row C of `row_bytes` bytes per row on `threads` threads, on
/// the CPU ([`FusionTarget::rows_per_block`] of [`FusionTarget::CPU`]).
pub fn rows_per_block(m: u64, row_bytes: u64, threads: u64) -> u64 {
    FusionTarget::CPU.rows_per_block(m, row_bytes, threads)
}

/// Whether computing the `rows` rows of C in `blocks` blocks, each reading the `weight_bytes`
/// of W again, pays on the CPU ([`FusionTarget::pays`] of [`FusionTarget::CPU`]).
pub fn pays(rows: u64, weight_bytes: u64, blocks: u64, transpose_b: bool) -> bool {
    FusionTarget::CPU.pays(rows, weight_bytes, blocks, transpose_b)
}

impl FusionTarget {
    /// Whether computing the `rows` rows of C in `blocks` blocks, each reading the
    /// `weight_bytes` of W again, pays (module documentation). Only where each block streams W,
    /// unpacked:
    /// - C has at most [`FusionTarget::few_rows`] rows. With more, every block's call packs W
    ///   again: `[512, 1024] x [1024, 1024]` measured 7-12% slower paired on the Zen 5 (three
    ///   runs).
    /// - W is not read transposed (`C = A · Wᵀ`, `transpose_b`). That product's few-row kernel
    ///   puts C's rows in the vector lanes, so a block of half the rows does half the work per
    ///   value of W it loads: the LSTM layer's backward `dz Uᵀ`, `[20, 2600] x [2600, 650]`,
    ///   took 0.32 ms per step paired against 0.22 separate, with its step's kernel. `C = A ·
    ///   W`'s register blocks of up to 12 rows are the same in a block of 10 rows
    ///   (`benches/gemm_epilogue.rs`: 3-7% faster paired).
    /// - W fits [`FusionTarget::pair_weight_bytes`] and the blocks are at most
    ///   [`FusionTarget::pair_max_blocks`].
    pub fn pays(&self, rows: u64, weight_bytes: u64, blocks: u64, transpose_b: bool) -> bool {
        self.refusal(rows, weight_bytes, blocks, transpose_b)
            .is_none()
    }

    /// Why computing C as [`FusionTarget::pays`] describes does not pay, or `None` where it
    /// does: the one rule, which the report names and the runner asks.
    fn refusal(
        &self,
        rows: u64,
        weight_bytes: u64,
        blocks: u64,
        transpose_b: bool,
    ) -> Option<NotPairedReason> {
        if transpose_b {
            Some(NotPairedReason::TransposedWeight)
        } else if rows > self.few_rows {
            Some(NotPairedReason::ManyRows { rows })
        } else if weight_bytes > self.pair_weight_bytes || blocks > self.pair_max_blocks {
            Some(NotPairedReason::CostsMore {
                blocks,
                weight_bytes,
            })
        } else {
            None
        }
    }
}

/// A GEMM run with its consumer as an epilogue (kernel indices of the fused graph).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpiloguePair {
    /// The inner dimension summed (all terms).
    pub k: u64,
    /// The GEMM's kernel.
    pub gemm: usize,
    /// The kernel reading C by rows.
    pub consumer: usize,
    /// The consumer's name (its label after fusion).
    pub consumer_name: String,
    /// C's rows.
    pub rows: u64,
}

impl fmt::Display for EpiloguePair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "epilogue pair: kernel {} `{}` runs after each block of the {} rows of the gemm \
             (kernel {}) on the same thread",
            self.consumer, self.consumer_name, self.rows, self.gemm
        )
    }
}

/// A GEMM whose consumer does not run as its epilogue, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotPaired {
    /// The GEMM's kernel.
    pub gemm: usize,
    /// Why not.
    pub reason: NotPairedReason,
}

impl fmt::Display for NotPaired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no epilogue pair for the gemm (kernel {}): {}",
            self.gemm, self.reason
        )
    }
}

/// Why a GEMM is not paired with a consumer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotPairedReason {
    /// The call's sizes are not those of one plain product.
    #[error("the call is not a gemm: {0}")]
    NotGemm(String),
    /// The product is batched (C has more than 2 dimensions).
    #[error("the product is batched ({batch} products)")]
    Batched {
        /// The number of products.
        batch: u64,
    },
    /// Sizes are given at run time.
    #[error("a size is given at run time")]
    Symbolic,
    /// No kernel reads C.
    #[error("no kernel reads its result")]
    NoReader,
    /// Several kernels read C.
    #[error("{count} kernels read its result")]
    SeveralReaders {
        /// How many.
        count: usize,
    },
    /// The reader is a library call itself.
    #[error("the reader (kernel {consumer}) is a library call")]
    ReaderIsLibraryCall {
        /// The reader.
        consumer: usize,
    },
    /// The reader's workgroup does not start with C's rows.
    #[error(
        "the reader `{consumer}`'s workgroup {workgroup:?} does not start with the {rows} rows"
    )]
    NotByRows {
        /// The reader's name.
        consumer: String,
        /// Its workgroup.
        workgroup: Vec<u64>,
        /// C's rows.
        rows: u64,
    },
    /// The reader already runs as the epilogue of another GEMM.
    #[error("the reader `{consumer}` is already the epilogue of the gemm of kernel {gemm}")]
    ReaderTaken {
        /// The reader's name.
        consumer: String,
        /// The other GEMM's kernel.
        gemm: usize,
    },
    /// Reading the second operand again per block costs more than it saves
    /// ([`FusionTarget::pays`]; the limits named are [`FusionTarget::CPU`]'s, the runner's).
    #[error(
        "{blocks} blocks of rows (at most {}) would each read the {weight_bytes}-byte \
         second operand (at most {})",
        FusionTarget::CPU.pair_max_blocks,
        FusionTarget::CPU.pair_weight_bytes
    )]
    CostsMore {
        /// Blocks of rows (two threads).
        blocks: u64,
        /// Bytes of the second operand (all terms).
        weight_bytes: u64,
    },
    /// The product reads W transposed ([`FusionTarget::pays`]).
    #[error(
        "the product reads its second operand transposed: blocks of fewer rows would run its \
         kernel with fewer rows in each vector"
    )]
    TransposedWeight,
    /// C has more rows than the kernel that streams W takes: every block would pack W
    /// ([`FusionTarget::pays`]; the limit named is [`FusionTarget::CPU`]'s, the runner's).
    #[error(
        "the product has {rows} rows, more than the {} of the kernel that streams its \
         second operand: every block of rows would pack it again",
        FusionTarget::CPU.few_rows
    )]
    ManyRows {
        /// C's rows.
        rows: u64,
    },
    /// A read of C is not at the worker's own row.
    #[error(
        "the reader `{consumer}` reads the result at another row (expression %{access}: {row})"
    )]
    OtherRow {
        /// The reader's name.
        consumer: String,
        /// The READ expression.
        access: usize,
        /// Its row index, as the pattern analysis sees it.
        row: String,
    },
}

/// The pairs of `dag` (in GEMM order) and the GEMMs not paired, with the reason, where they
/// pay on `target`.
pub fn epilogue_pairs(
    dag: &ir::OperatorDag,
    target: &FusionTarget,
) -> (Vec<EpiloguePair>, Vec<NotPaired>) {
    pairs_priced(dag, Some(target))
}

/// Every pair the rules allow, whether it pays or not (the runner decides that with its
/// thread count, or runs every pair when told to).
pub fn possible_pairs(dag: &ir::OperatorDag) -> Vec<EpiloguePair> {
    pairs_priced(dag, None).0
}

/// The pairs, priced on the target given (none: every pair the rules allow).
fn pairs_priced(
    dag: &ir::OperatorDag,
    priced: Option<&FusionTarget>,
) -> (Vec<EpiloguePair>, Vec<NotPaired>) {
    let (mut pairs, mut refused) = (Vec::new(), Vec::new());
    for (g, op) in dag.operators.iter().enumerate() {
        if !is_library_call(op) {
            continue;
        }
        match pair_of(dag, g, priced) {
            // A kernel runs as the epilogue of one GEMM at most (the first).
            Ok(pair) => match pairs
                .iter()
                .find(|p: &&EpiloguePair| p.consumer == pair.consumer)
            {
                Some(first) => refused.push(NotPaired {
                    gemm: g,
                    reason: NotPairedReason::ReaderTaken {
                        consumer: pair.consumer_name,
                        gemm: first.gemm,
                    },
                }),
                None => pairs.push(pair),
            },
            Err(reason) => refused.push(NotPaired { gemm: g, reason }),
        }
    }
    (pairs, refused)
}

fn pair_of(
    dag: &ir::OperatorDag,
    g: usize,
    priced: Option<&FusionTarget>,
) -> Result<EpiloguePair, NotPairedReason> {
    use NotPairedReason as No;
    let op = &dag.operators[g];
    let dims = gemm_dims(op).map_err(|e| No::NotGemm(e.to_string()))?;
    if op.symbol_count != 0 || !op.symbolic_workgroup.is_empty() || !dag.symbols.is_empty() {
        return Err(No::Symbolic);
    }
    if dims.batch != 1 || op.outputs.first().map_or(0, |t| t.shape.len()) != 2 {
        return Err(No::Batched { batch: dims.batch });
    }
    // The kernels reading C (output 0), and which of their input slots do.
    let reads_c = |v: &ir::ValueRef| matches!(&v.source, Some(Source::OpOutput(o)) if o.operator as usize == g && o.output == 0);
    let readers: Vec<usize> = dag
        .operator_inputs
        .iter()
        .enumerate()
        .filter(|(_, w)| w.inputs.iter().any(reads_c))
        .map(|(i, _)| i)
        .collect();
    let c = match readers[..] {
        [] => return Err(No::NoReader),
        [c] => c,
        _ => {
            return Err(No::SeveralReaders {
                count: readers.len(),
            })
        }
    };
    let consumer = &dag.operators[c];
    if is_library_call(consumer) {
        return Err(No::ReaderIsLibraryCall { consumer: c });
    }
    if consumer.symbol_count != 0 || !consumer.symbolic_workgroup.is_empty() {
        return Err(No::Symbolic);
    }
    let wg = &consumer.workgroup_shape;
    if wg.first() != Some(&dims.m) {
        return Err(No::NotByRows {
            consumer: consumer.name.clone(),
            workgroup: wg.clone(),
            rows: dims.m,
        });
    }
    let slots: Vec<bool> = dag.operator_inputs[c].inputs.iter().map(reads_c).collect();
    let own_row = Affine {
        coeffs: (0..wg.len()).map(|a| i64::from(a == 0)).collect(),
        constant: 0,
    };
    // The graph was validated (fusion's result, or the runner's plan of a validated graph).
    let kernel = Kernel::from_validated(consumer);
    let mut patterns = PatternAnalysis::new(&kernel, wg);
    for i in 0..kernel.exprs.len() {
        let reads_slot = kernel
            .input_read(i)
            .is_some_and(|t| slots.get(t as usize).copied().unwrap_or(false));
        if !reads_slot {
            continue;
        }
        let row = patterns.operand_maps(i).into_iter().next().flatten();
        if row.as_ref() != Some(&own_row) {
            return Err(No::OtherRow {
                consumer: consumer.name.clone(),
                access: i,
                row: match row {
                    Some(a) => format!("{a:?}"),
                    None => "not an affine map of the position".into(),
                },
            });
        }
    }
    let k = dims.k.saturating_mul(dims.terms);
    let row_bytes = dims.n.saturating_mul(dims.dtype.size() as u64);
    if let Some(target) = priced {
        let blocks = dims.m.div_ceil(target.rows_per_block(dims.m, row_bytes, 2));
        let weight_bytes = k.saturating_mul(row_bytes);
        if let Some(no) = target.refusal(dims.m, weight_bytes, blocks, dims.transpose_b) {
            return Err(no);
        }
    }
    Ok(EpiloguePair {
        gemm: g,
        consumer: c,
        consumer_name: consumer.name.clone(),
        rows: dims.m,
        k,
    })
}
