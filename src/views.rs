//! Borrowed inputs and outputs of a [`crate::Compiled`] run ([`crate::Compiled::run_views`]):
//! arrays and views read and written where they lie when their layout allows.
//!
//! A [`FeedView`] borrows an array for as long as it lives, so the borrow checker keeps the
//! array alive and unchanged until the run that reads it has returned: nothing is copied when
//! the elements are contiguous in row-major order (a C-order array, `&array`, a view of whole
//! rows); any other layout (Fortran order, a transposed or permuted view, stepped slices, a
//! broadcast view with zero strides) is copied once, when the `FeedView` is made, into
//! row-major order by [`ovl_core::lazy::layout::standard_order`] (a tiled transpose). An
//! [`OutputView`] borrows a mutable array or view: a row-major contiguous one is written in
//! place by the kernels; any other is computed into a buffer of the run and copied into it
//! ([`ovl_core::lazy::layout::assign_standard_order`], the same copies the other way).
//!
//! ```
//! use ovl::prelude::*;
//! use ovl::{FeedView, OutputView};
//!
//! let x = ovl::placeholder::<f32>("x", &[2, 3]);
//! let step = ovl::compile(&vec![x.clone()], &vec![ovl_stdlib::softmax(&x)], &Options::cpu()).unwrap();
//! let data = ndarray::array![[1.0f32, 2.0, 3.0], [0.0, 0.0, 0.0]];
//! let mut y = ndarray::Array2::<f32>::zeros((2, 3));
//! let feed = FeedView::from(&data);
//! assert!(feed.in_place()); // C order: the kernel reads `data` itself
//! step.run_views(&[feed], &mut [OutputView::from(&mut y)]).unwrap();
//! assert!((y[[1, 0]] - 1.0 / 3.0).abs() < 1e-6);
//! ```

use crate::error::{InternalError, Mismatch};
use crate::executor::Prepared;
use crate::options::Options;
use crate::Error;
use ndarray::{ArrayBase, ArrayView, ArrayViewMut, Data, DataMut, Dimension};
use ovl_core::lazy::layout::{assign_standard_order, standard_order};
use ovl_core::{DType, HostTensor, Scalar};
use ovl_runtime::plan::{Input, Output};
use std::ffi::c_void;
use std::marker::PhantomData;

/// One input of [`crate::Compiled::run_views`]: an array or view of any element type and
/// layout, borrowed for `'a` (see the module documentation for when it is copied).
pub struct FeedView<'a> {
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<usize>,
    pub(crate) data: FeedData<'a>,
}

/// Where a [`FeedView`]'s elements are.
pub(crate) enum FeedData<'a> {
    /// The borrowed array's own row-major elements.
    InPlace(*const c_void, PhantomData<&'a ()>),
    /// A row-major copy, made because the layout was not row-major contiguous.
    Copied(HostTensor),
}

impl<'a> FeedView<'a> {
    /// A view of any layout: borrowed in place when row-major contiguous, else copied.
    pub fn new<T: Scalar, D: Dimension>(view: ArrayView<'a, T, D>) -> FeedView<'a> {
        let shape = view.shape().to_vec();
        let data = if view.is_standard_layout() {
            FeedData::InPlace(view.as_ptr().cast(), PhantomData)
        } else {
            FeedData::Copied(HostTensor {
                shape: shape.clone(),
                data: T::wrap(standard_order(view)),
            })
        };
        FeedView {
            dtype: T::DTYPE,
            shape,
            data,
        }
    }

    /// Whether the run reads the borrowed elements themselves (no copy was made).
    pub fn in_place(&self) -> bool {
        matches!(self.data, FeedData::InPlace(..))
    }

    /// The address of the first element the kernels read: the array's own when
    /// [`in_place`](Self::in_place), else the copy's.
    pub fn data_ptr(&self) -> *const c_void {
        match &self.data {
            FeedData::InPlace(p, _) => *p,
            FeedData::Copied(t) => t.data.as_ptr().cast(),
        }
    }

    /// The same elements, borrowed from this feed (a copy made for a non-row-major layout is
    /// read in place, not copied again): to feed them to several runs.
    pub fn reborrow(&self) -> FeedView<'_> {
        FeedView {
            dtype: self.dtype,
            shape: self.shape.clone(),
            data: FeedData::InPlace(self.data_ptr(), PhantomData),
        }
    }

    /// The dtype and shape, as errors spell them (`f32[2, 3]`).
    pub(crate) fn describe(&self) -> String {
        format!("{}{:?}", self.dtype, self.shape)
    }
}

impl<'a, T: Scalar, S: Data<Elem = T>, D: Dimension> From<&'a ArrayBase<S, D>> for FeedView<'a> {
    fn from(a: &'a ArrayBase<S, D>) -> FeedView<'a> {
        FeedView::new(a.view())
    }
}

impl<'a, T: Scalar, D: Dimension> From<ArrayView<'a, T, D>> for FeedView<'a> {
    fn from(a: ArrayView<'a, T, D>) -> FeedView<'a> {
        FeedView::new(a)
    }
}

impl std::fmt::Debug for FeedView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedView")
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("in_place", &self.in_place())
            .finish()
    }
}

/// One output of [`crate::Compiled::run_views`]: a mutable array or view of any element type
/// and layout, borrowed for `'a`; written in place when row-major contiguous, else through a
/// buffer of the run copied into it.
pub struct OutputView<'a> {
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<usize>,
    pub(crate) target: Box<dyn ViewTarget + 'a>,
}

impl<'a> OutputView<'a> {
    /// A mutable view of any layout.
    pub fn new<T: Scalar, D: Dimension + 'static>(view: ArrayViewMut<'a, T, D>) -> OutputView<'a> {
        OutputView {
            dtype: T::DTYPE,
            shape: view.shape().to_vec(),
            target: Box::new(view),
        }
    }

    /// Whether the kernels write the borrowed elements themselves (no copy after the run).
    pub fn in_place(&self) -> bool {
        self.target.is_row_major()
    }

    /// The dtype and shape, as errors spell them.
    pub(crate) fn describe(&self) -> String {
        format!("{}{:?}", self.dtype, self.shape)
    }
}

impl<'a, T: Scalar, S: DataMut<Elem = T>, D: Dimension + 'static> From<&'a mut ArrayBase<S, D>>
    for OutputView<'a>
{
    fn from(a: &'a mut ArrayBase<S, D>) -> OutputView<'a> {
        OutputView::new(a.view_mut())
    }
}

impl<'a, T: Scalar, D: Dimension + 'static> From<ArrayViewMut<'a, T, D>> for OutputView<'a> {
    fn from(a: ArrayViewMut<'a, T, D>) -> OutputView<'a> {
        OutputView::new(a)
    }
}

impl std::fmt::Debug for OutputView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputView")
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("in_place", &self.in_place())
            .finish()
    }
}

/// A mutable view's memory, for the run.
pub(crate) trait ViewTarget {
    /// Whether the elements are row-major contiguous.
    fn is_row_major(&self) -> bool;
    /// The first element when the elements are row-major contiguous.
    fn row_major_ptr(&mut self) -> Option<*mut c_void>;
    /// Copies `t` (of the view's dtype and shape, checked by the caller) into the view.
    fn assign_from(&mut self, t: &HostTensor) -> bool;
}

impl<T: Scalar, D: Dimension> ViewTarget for ArrayViewMut<'_, T, D> {
    fn is_row_major(&self) -> bool {
        self.is_standard_layout()
    }

    fn row_major_ptr(&mut self) -> Option<*mut c_void> {
        self.is_standard_layout().then(|| self.as_mut_ptr().cast())
    }

    fn assign_from(&mut self, t: &HostTensor) -> bool {
        let Some(data) = T::unwrap_ref(&t.data) else {
            return false;
        };
        // The same copies as a FeedView's, the other way: a tiled transpose into a Fortran-order
        // or transposed view, line by line into a sub-block or stepped view.
        assign_standard_order(self, data)
    }
}

/// Runs `prepared` with graph inputs `fed` (see [`Prepared::run_in_place`]; raw ones are
/// [`FeedView`]s' row-major elements) and its requested output `k` written into `outputs[k]`:
/// in place when row-major contiguous, else through a buffer copied into the view.
pub(crate) fn run_into_views(
    prepared: &Prepared,
    fed: &[Option<Input<'_>>],
    options: &Options,
    outputs: &mut [OutputView<'_>],
) -> Result<(), Error> {
    let sigs = prepared.plan().outputs();
    if outputs.len() != sigs.len() {
        return Err(Error::OutputMismatch(Mismatch::OutputCount {
            outputs: sigs.len(),
            arrays: outputs.len(),
        }));
    }
    for (k, (out, sig)) in outputs.iter().zip(sigs).enumerate() {
        if out.dtype != sig.dtype || out.shape != sig.shape {
            return Err(Error::OutputMismatch(Mismatch::Output {
                output: k,
                given: out.describe(),
                wanted: sig.to_string(),
            }));
        }
    }
    // Outputs that are not row-major contiguous go through a buffer of the run.
    let mut buffers: Vec<Option<HostTensor>> = Vec::with_capacity(outputs.len());
    let mut raw: Vec<Option<*mut c_void>> = Vec::with_capacity(outputs.len());
    for (out, sig) in outputs.iter_mut().zip(sigs) {
        let p = out.target.row_major_ptr();
        raw.push(p);
        buffers.push(match p {
            Some(_) => None,
            None => Some(HostTensor::try_zeros(sig.dtype, &sig.shape)?),
        });
    }
    let mut run_outputs: Vec<Output<'_>> = raw
        .iter()
        .zip(buffers.iter_mut())
        .filter_map(|(p, b)| match (p, b) {
            (Some(p), _) => Some(Output::Raw(*p)),
            (None, Some(tensor)) => Some(Output::Host {
                tensor,
                zeroed: true,
            }),
            (None, None) => None,
        })
        .collect();
    // SAFETY: a raw input is the row-major contiguous elements of a FeedView of the graph
    // input's dtype and shape (checked by the caller), borrowed for this call; a raw output is
    // a mutable view's row-major contiguous elements of the output's dtype and shape (checked
    // above), exclusively borrowed, so it overlaps no other buffer of the run (no shared view
    // of the same memory can exist at the same time).
    unsafe { prepared.run_in_place(fed, options, &mut run_outputs)? };
    drop(run_outputs);
    for (k, (out, b)) in outputs.iter_mut().zip(&buffers).enumerate() {
        if let Some(t) = b {
            if !out.target.assign_from(t) {
                return Err(InternalError::ResultShape {
                    output: k,
                    shape: out.shape.clone(),
                    len: t.len(),
                }
                .into());
            }
        }
    }
    Ok(())
}
