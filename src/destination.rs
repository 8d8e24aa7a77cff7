//! Where [`crate::evaluate_into_all`] and [`crate::Compiled::run_into`] write a graph's outputs:
//! arrays of any dtype and dimensionality, or host tensors, each moved into the run and back
//! (no copy), so that outputs of different dtypes can be written in one call.

use crate::error::{InternalError, Mismatch};
use crate::executor::Prepared;
use crate::options::Options;
use crate::Error;
use ndarray::{Array, Dimension};
use ovl_core::{DType, HostTensor, Scalar};

/// One output's destination: a mutable array of any element type and dimensionality
/// (`(&mut array).into()`) or a [`HostTensor`] (`(&mut tensor).into()`). It must have the
/// output's dtype and shape and own its whole buffer in row-major order; its memory is moved
/// into the run and back.
///
/// ```
/// use ovl::prelude::*;
/// use ovl::Destination;
///
/// #[operator]
/// fn halves(x: Tensor<i32>) -> (Tensor<i32>, Tensor<f64>) {
///     let i = position_in(x.shape())[0];
///     let (q, h) = (output_like(&x), output::<f64>(x.shape()));
///     q[[i]] = x[[i]] / 2;
///     h[[i]] = x[[i]].cast::<f64>() / 2.0;
///     (q, h)
/// }
///
/// let (q, h) = halves(&ndarray::array![1, 4, 7]);
/// let mut quotients = ndarray::Array1::<i32>::zeros(3);
/// let mut exact = ndarray::ArrayD::<f64>::zeros(ndarray::IxDyn(&[3]));
/// let mut dests = [Destination::from(&mut quotients), Destination::from(&mut exact)];
/// ovl::evaluate_into_all((&q, &h), &mut dests, &Options::interpreter()).unwrap();
/// assert_eq!(quotients, ndarray::array![0, 2, 3]);
/// assert_eq!(exact, ndarray::array![0.5, 2.0, 3.5].into_dyn());
/// ```
pub struct Destination<'a>(&'a mut dyn Buffer);

impl<'a, T: Scalar, D: Dimension + 'static> From<&'a mut Array<T, D>> for Destination<'a> {
    fn from(array: &'a mut Array<T, D>) -> Destination<'a> {
        Destination(array)
    }
}

impl<'a> From<&'a mut HostTensor> for Destination<'a> {
    fn from(tensor: &'a mut HostTensor) -> Destination<'a> {
        Destination(tensor)
    }
}

impl std::fmt::Debug for Destination<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Destination").finish_non_exhaustive()
    }
}

/// What receives a graph's outputs, one destination per output in order: a slice, `Vec` or
/// array of arrays of one dtype, of [`HostTensor`]s, or of [`Destination`]s (mixed dtypes).
pub trait Destinations {
    /// One destination per output.
    fn destinations(&mut self) -> Vec<Destination<'_>>;
}

impl<T: Scalar, D: Dimension + 'static> Destinations for [Array<T, D>] {
    fn destinations(&mut self) -> Vec<Destination<'_>> {
        self.iter_mut().map(Destination::from).collect()
    }
}

impl Destinations for [HostTensor] {
    fn destinations(&mut self) -> Vec<Destination<'_>> {
        self.iter_mut().map(Destination::from).collect()
    }
}

impl Destinations for [Destination<'_>] {
    fn destinations(&mut self) -> Vec<Destination<'_>> {
        self.iter_mut().map(|d| Destination(&mut *d.0)).collect()
    }
}

impl<X> Destinations for Vec<X>
where
    [X]: Destinations,
{
    fn destinations(&mut self) -> Vec<Destination<'_>> {
        self.as_mut_slice().destinations()
    }
}

impl<X, const N: usize> Destinations for [X; N]
where
    [X]: Destinations,
{
    fn destinations(&mut self) -> Vec<Destination<'_>> {
        self.as_mut_slice().destinations()
    }
}

/// A destination's memory, moved into a run as a host tensor and back.
trait Buffer {
    /// Moves the buffer out (the destination is left empty). A buffer that is not its
    /// elements in row-major order is left as it was (with its elements) and refused.
    fn take(&mut self) -> Result<HostTensor, Error>;
    /// Moves `tensor`, the result of output `output` (of the dtype and shape taken), in.
    fn put(&mut self, tensor: HostTensor, output: usize) -> Result<(), Error>;
}

impl<T: Scalar, D: Dimension> Buffer for Array<T, D> {
    fn take(&mut self) -> Result<HostTensor, Error> {
        if !self.is_standard_layout() {
            return Err(Error::OutputMismatch(Mismatch::NotRowMajor));
        }
        let dim = self.raw_dim();
        let len = self.len();
        let empty = Array::from_shape_vec(D::zeros(dim.ndim()), Vec::new());
        let Ok(empty) = empty else {
            // Only a zero-dimensional array has no empty form; its one element is copied.
            return HostTensor::from_vec(dim.slice(), self.iter().cloned().collect())
                .ok_or_else(|| shape_error(0, dim.slice(), len));
        };
        let array = std::mem::replace(self, empty);
        let (data, offset) = array.into_raw_vec_and_offset();
        let offset = offset.unwrap_or(0);
        if data.len() != len || offset != 0 {
            // A view into a larger buffer: give the array its elements back and refuse it.
            let own = data[offset..offset + len].to_vec();
            *self = Array::from_shape_vec(dim.clone(), own)
                .map_err(|_| shape_error(0, dim.slice(), len))?;
            return Err(Error::OutputMismatch(Mismatch::NotRowMajor));
        }
        HostTensor::from_vec(dim.slice(), data).ok_or_else(|| shape_error(0, dim.slice(), len))
    }

    fn put(&mut self, tensor: HostTensor, output: usize) -> Result<(), Error> {
        *self = into_array(tensor, output)?;
        Ok(())
    }
}

impl Buffer for HostTensor {
    fn take(&mut self) -> Result<HostTensor, Error> {
        let empty = HostTensor::zeros(self.dtype(), &[0]);
        Ok(std::mem::replace(self, empty))
    }

    fn put(&mut self, tensor: HostTensor, _output: usize) -> Result<(), Error> {
        *self = tensor;
        Ok(())
    }
}

/// Computed output `output` as an array of `T` and dimensionality `D`, its buffer moved (an
/// internal error if it has another dtype or rank).
pub(crate) fn into_array<T: Scalar, D: Dimension>(
    tensor: HostTensor,
    output: usize,
) -> Result<Array<T, D>, Error> {
    let dtype = tensor.dtype();
    let HostTensor { shape, data } = tensor;
    let data = T::unwrap(data).map_err(|_| InternalError::ResultDType {
        output,
        dtype,
        expected: T::DTYPE,
    })?;
    let len = data.len();
    if D::NDIM.is_some_and(|n| n != shape.len()) {
        return Err(shape_error(output, &shape, len));
    }
    let mut dim = D::zeros(shape.len());
    dim.slice_mut().copy_from_slice(&shape);
    Array::from_shape_vec(dim, data).map_err(|_| shape_error(output, &shape, len))
}

fn shape_error(output: usize, shape: &[usize], len: usize) -> Error {
    InternalError::ResultShape {
        output,
        shape: shape.to_vec(),
        len,
    }
    .into()
}

/// Runs a prepared graph, writing its requested outputs into `dests` (moved in and out, no
/// copy). On an error every destination keeps its dtype and shape, with unspecified contents.
pub(crate) fn run_into(
    prepared: &Prepared,
    fed: &[Option<&HostTensor>],
    options: &Options,
    dests: &mut [Destination<'_>],
) -> Result<(), Error> {
    let outputs = prepared.plan().outputs().len();
    if dests.len() != outputs {
        return Err(Error::OutputMismatch(Mismatch::OutputCount {
            outputs,
            arrays: dests.len(),
        }));
    }
    let mut taken: Vec<Option<HostTensor>> = Vec::with_capacity(dests.len());
    let mut kept: Vec<(DType, Vec<usize>)> = Vec::with_capacity(dests.len());
    for k in 0..dests.len() {
        match dests[k].0.take() {
            Ok(t) => {
                kept.push((t.dtype(), t.shape.clone()));
                taken.push(Some(t));
            }
            Err(e) => {
                // Give the buffers taken so far back, untouched.
                for (j, t) in taken.into_iter().enumerate() {
                    if let Some(t) = t {
                        dests[j].0.put(t, j)?;
                    }
                }
                return Err(e);
            }
        }
    }
    match prepared.run_into(fed, options, None, taken) {
        Ok(results) => {
            let mut first_error = None;
            for (k, (dest, t)) in dests.iter_mut().zip(results).enumerate() {
                if let Err(e) = dest.0.put(t, k) {
                    first_error.get_or_insert(e);
                }
            }
            first_error.map_or(Ok(()), Err)
        }
        Err(e) => {
            // The buffers went with the failed run: fresh ones of the same dtypes and shapes.
            for (k, (dest, (dtype, shape))) in dests.iter_mut().zip(kept).enumerate() {
                let fresh = HostTensor::try_zeros(dtype, &shape)
                    .unwrap_or_else(|_| HostTensor::zeros(dtype, &[0]));
                // A zero-filled tensor of the shape taken always fits back.
                let _ = dest.0.put(fresh, k);
            }
            Err(e)
        }
    }
}
