//! Outputs read in place: the cut of a stacked product's result into the products' results
//! (`ovl_fuse::cut_offsets`: fusion stacks the T products `x_t W` of an LSTM layer into one)
//! copies nothing where each piece is a contiguous block of the stacked result: the readers of
//! piece `i` read the stacked result at the piece's offset, and the cut's kernel does not run
//! (at T = 20, B = 64, H = 1024 the copy moved 21 MB per stacked product). The stacked result
//! then lives until the last reader of any piece.

use super::{Sig, Slot};
use ovl_core::ir::{self, value_ref::Source};

/// Places the outputs of every cut of `dag` whose input is an intermediate and whose outputs
/// are all intermediates as views of that input (`op_slots` changed in place); returns, per
/// operator, whether it is such a cut (its kernel is not run).
pub(super) fn place(dag: &ir::OperatorDag, op_slots: &mut [Vec<Slot>], temps: &[Sig]) -> Vec<bool> {
    let mut viewed = vec![false; dag.operators.len()];
    for (i, op) in dag.operators.iter().enumerate() {
        let Some(offsets) = ovl_fuse::cut_offsets(op) else {
            continue;
        };
        let base = match dag.operator_inputs.get(i).map(|w| w.inputs.as_slice()) {
            Some([v]) => match &v.source {
                Some(Source::OpOutput(o)) if (o.operator as usize) < i => op_slots
                    .get(o.operator as usize)
                    .and_then(|s| s.get(o.output as usize))
                    .copied(),
                _ => None,
            },
            _ => None,
        };
        let Some(Slot::Temp(base)) = base else {
            continue;
        };
        let element = temps[base].dtype.size();
        let views: Option<Vec<Slot>> = op_slots[i]
            .iter()
            .zip(&offsets)
            .map(|(&slot, &offset)| match slot {
                Slot::Temp(own) => {
                    let offset = usize::try_from(offset).ok()?.checked_mul(element)?;
                    let fits = temps[own].dtype == temps[base].dtype
                        && offset.checked_add(temps[own].bytes())? <= temps[base].bytes();
                    fits.then_some(Slot::View { base, offset, own })
                }
                _ => None,
            })
            .collect();
        if let Some(views) = views.filter(|v| v.len() == op_slots[i].len()) {
            op_slots[i] = views;
            viewed[i] = true;
        }
    }
    viewed
}
