//! The cut of a stacked product's result: an IR construct of its own, like a library call
//! ([`crate::library`]), which every pass and runner asks about through [`UnstackRows::of`]
//! instead of comparing names.
//!
//! Fusion stacks GEMM calls that share their second operand into one product over their first
//! operands stacked along the rows (`ovl-fuse`'s `stack`: the T input products `x_t W` of an
//! LSTM layer become one); one operator then cuts the stacked result into the products'
//! results, output `i` reading rows `i m ..` of its input. That operator is an ordinary worker
//! program (the interpreter and every backend run it as any other), serialized as such under
//! the name [`NAME`]; what makes it the cut is that name together with exactly the program
//! [`UnstackRows::operator`] writes, which [`UnstackRows::of`] checks. Where each piece is a
//! contiguous block of the input ([`UnstackRows::offsets`]), a runner may let the readers of
//! piece `i` read the input at the piece's offset instead of running the copy, and fusion never
//! merges the cut (it is a boundary, as a library call is).

use crate::builder::{Builder, IN, OUT};
use crate::dtype::DType;
use crate::ir::{self, Op};

/// The name the cut is serialized under (the operator's `name`): the one place it is written.
pub const NAME: &str = "unstack_rows";

/// The cut of a stacked result shaped `stacked` into `count` pieces shaped `piece` along the
/// rows (axis `r - 2` of a rank-`r` piece, `r >= 2`): output `i` reads rows `i m ..` of the
/// input, `m` the piece's rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnstackRows {
    /// The element type of the input and of every piece.
    pub dtype: DType,
    /// The stacked result's shape (the input).
    pub stacked: Vec<u64>,
    /// Each piece's shape (every output).
    pub piece: Vec<u64>,
    /// The number of pieces.
    pub count: usize,
}

impl UnstackRows {
    /// The operator of the cut (its workgroup the piece's shape), without a source location.
    ///
    /// # Panics
    ///
    /// When the piece's rank is below 2 (it has no rows).
    pub fn operator(&self) -> ir::ExpressionDag {
        let (piece, r) = (&self.piece, self.piece.len());
        assert!(r >= 2, "a piece of a stacked product has rows and columns");
        let mut b = Builder::new(NAME, piece);
        b.input(self.dtype, &self.stacked);
        let pos: Vec<u32> = (0..r as u32).map(|d| b.position(d)).collect();
        for i in 0..self.count as u32 {
            b.output(self.dtype, piece);
            let mut at = pos.clone();
            let offset = b.i64((i as u64 * piece[r - 2]) as i64);
            at[r - 2] = b.op(Op::Add, &[pos[r - 2], offset]);
            let v = b.read(IN, 0, &at);
            b.write(OUT, i, &pos, v);
        }
        b.build()
    }

    /// The cut `op` is, when it is one (and nothing else): named [`NAME`], of concrete sizes,
    /// one input, and exactly the program [`UnstackRows::operator`] writes for its types.
    pub fn of(op: &ir::ExpressionDag) -> Option<UnstackRows> {
        if op.name != NAME
            || op.library_call.is_some()
            || op.symbol_count != 0
            || !op.symbolic_workgroup.is_empty()
            || op.inputs.len() != 1
            || op.outputs.is_empty()
        {
            return None;
        }
        let piece = &op.outputs[0];
        if piece.shape.len() < 2 {
            return None;
        }
        let cut = UnstackRows {
            dtype: DType::from_ir(piece.dtype)?,
            stacked: op.inputs[0].shape.clone(),
            piece: piece.shape.clone(),
            count: op.outputs.len(),
        };
        let expected = cut.operator();
        let same = expected.expressions == op.expressions
            && expected.inputs == op.inputs
            && expected.outputs == op.outputs
            && expected.locals == op.locals
            && expected.workgroup_shape == op.workgroup_shape;
        same.then_some(cut)
    }

    /// When each piece is a contiguous block of the input (every axis before the rows of
    /// extent 1): the offset, in elements, of each piece's block in the input.
    pub fn offsets(&self) -> Option<Vec<u64>> {
        let r = self.piece.len();
        if r < 2 || self.piece[..r - 2].iter().any(|&d| d != 1) {
            return None;
        }
        let size: u64 = self.piece.iter().product();
        Some((0..self.count as u64).map(|i| i * size).collect())
    }
}

/// When `op` is the cut of a stacked result ([`UnstackRows::of`]) whose pieces are contiguous
/// blocks of its input: each piece's offset in elements ([`UnstackRows::offsets`]). A runner
/// may then let the readers of output `i` read the input at that offset instead of running
/// the copy; fusion never merges such a cut.
pub fn cut_offsets(op: &ir::ExpressionDag) -> Option<Vec<u64>> {
    UnstackRows::of(op)?.offsets()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(dtype: DType, stacked: &[u64], piece: &[u64], count: usize) -> ir::ExpressionDag {
        UnstackRows {
            dtype,
            stacked: stacked.to_vec(),
            piece: piece.to_vec(),
            count,
        }
        .operator()
    }

    /// The cut stacking makes is recognized, with each piece's offset; pieces in batches (not
    /// contiguous) and any other operator are not.
    #[test]
    fn cut_offsets_recognize_the_cut_alone() {
        let c = cut(DType::F32, &[12, 5], &[4, 5], 3);
        crate::validate::validate(&c).unwrap();
        assert_eq!(cut_offsets(&c), Some(vec![0, 20, 40]));
        let unit_batch = cut(DType::F64, &[1, 6, 2], &[1, 3, 2], 2);
        assert_eq!(cut_offsets(&unit_batch), Some(vec![0, 6]));
        let batched = cut(DType::F32, &[2, 12, 5], &[2, 4, 5], 3);
        assert_eq!(cut_offsets(&batched), None);
        assert!(UnstackRows::of(&batched).is_some());
        let mut renamed = c.clone();
        renamed.name = "copy".into();
        assert_eq!(cut_offsets(&renamed), None);
        assert_eq!(UnstackRows::of(&renamed), None);
        // Another program under the same name (pieces read from other rows).
        let mut other = c.clone();
        let constant = other
            .expressions
            .iter_mut()
            .rev()
            .find(|e| e.int_value != 0)
            .expect("an offset constant");
        constant.int_value += 1;
        assert_eq!(cut_offsets(&other), None);
    }
}
