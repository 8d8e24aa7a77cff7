//! `evaluate` and `profile`: run the lazy graph behind some handles and return arrays.

use crate::destination::{self, Destination, Destinations};
use crate::error::{InternalError, Mismatch};
use crate::options::Options;
use crate::plan_cache;
use crate::views::OutputView;
use crate::Error;
use ndarray::ArrayD;
use ovl_core::{HostTensor, Lazy, LazyTensor, Scalar};
use std::fmt;
use std::time::{Duration, Instant};

/// What can be evaluated: a handle, a tuple of handles (of any dtypes), or a slice, `Vec` or
/// array of handles (or of references to handles) of one dtype, or of untyped handles.
pub trait Evaluate {
    /// What evaluation returns: arrays in the same arrangement.
    type Output;
    /// The tensors to compute.
    fn tensors(&self) -> Vec<&LazyTensor>;
    /// Converts the computed tensors (in the order of `tensors`) into the output.
    fn convert(&self, results: &mut Results) -> Result<Self::Output, Error>;
}

/// The computed tensors handed to [`Evaluate::convert`], in the order of
/// [`Evaluate::tensors`].
#[derive(Debug)]
pub struct Results {
    tensors: std::vec::IntoIter<HostTensor>,
    next: usize,
}

impl Results {
    pub(crate) fn new(tensors: Vec<HostTensor>) -> Results {
        Results {
            tensors: tensors.into_iter(),
            next: 0,
        }
    }

    /// The next computed tensor.
    pub fn next_tensor(&mut self) -> Result<HostTensor, Error> {
        let output = self.next;
        self.next += 1;
        self.tensors
            .next()
            .ok_or_else(|| InternalError::MissingResult { output }.into())
    }

    /// The next computed tensor as an array of `T` (an error if it has another dtype).
    pub fn next_array<T: Scalar>(&mut self) -> Result<ArrayD<T>, Error> {
        let output = self.next;
        destination::into_array(self.next_tensor()?, output)
    }
}

impl<T: Scalar> Evaluate for &Lazy<T> {
    type Output = ArrayD<T>;
    fn tensors(&self) -> Vec<&LazyTensor> {
        vec![self.untyped()]
    }
    fn convert(&self, results: &mut Results) -> Result<ArrayD<T>, Error> {
        results.next_array()
    }
}

impl<T: Scalar> Evaluate for Lazy<T> {
    type Output = ArrayD<T>;
    fn tensors(&self) -> Vec<&LazyTensor> {
        vec![self.untyped()]
    }
    fn convert(&self, results: &mut Results) -> Result<ArrayD<T>, Error> {
        results.next_array()
    }
}

/// Slices, `Vec`s and arrays of typed handles, or of references to them.
macro_rules! typed_list_evaluate {
    ($($ty:ty),+) => {
        $(
            impl<'a, T: Scalar, const N: usize> Evaluate for $ty {
                type Output = Vec<ArrayD<T>>;
                fn tensors(&self) -> Vec<&LazyTensor> {
                    self.iter().map(|l| l.untyped()).collect()
                }
                fn convert(&self, results: &mut Results) -> Result<Self::Output, Error> {
                    self.iter().map(|_| results.next_array()).collect()
                }
            }
        )+
    };
}
typed_list_evaluate!(&[Lazy<T>; N], &[&'a Lazy<T>; N], [&'a Lazy<T>; N]);

macro_rules! typed_slice_evaluate {
    ($($ty:ty),+) => {
        $(
            impl<'a, T: Scalar> Evaluate for $ty {
                type Output = Vec<ArrayD<T>>;
                fn tensors(&self) -> Vec<&LazyTensor> {
                    self.iter().map(|l| l.untyped()).collect()
                }
                fn convert(&self, results: &mut Results) -> Result<Self::Output, Error> {
                    self.iter().map(|_| results.next_array()).collect()
                }
            }
        )+
    };
}
typed_slice_evaluate!(&[Lazy<T>], &Vec<Lazy<T>>, &[&'a Lazy<T>], &Vec<&'a Lazy<T>>);

/// Untyped handles (what an untyped [`crate::vmap`] returns) evaluate to host tensors of their
/// own dtypes.
macro_rules! untyped_evaluate {
    ($($ty:ty),+) => {
        $(
            impl<'a> Evaluate for $ty {
                type Output = Vec<HostTensor>;
                fn tensors(&self) -> Vec<&LazyTensor> {
                    self.iter()
                        .map(|t| <_ as std::borrow::Borrow<LazyTensor>>::borrow(t))
                        .collect()
                }
                fn convert(&self, results: &mut Results) -> Result<Self::Output, Error> {
                    self.iter().map(|_| results.next_tensor()).collect()
                }
            }
        )+
    };
}
untyped_evaluate!(
    &[LazyTensor],
    &Vec<LazyTensor>,
    &[&'a LazyTensor],
    &Vec<&'a LazyTensor>
);

macro_rules! tuple_evaluate {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: Evaluate),+> Evaluate for ($($name,)+) {
            type Output = ($($name::Output,)+);
            fn tensors(&self) -> Vec<&LazyTensor> {
                let mut v = Vec::new();
                $(v.extend(self.$idx.tensors());)+
                v
            }
            fn convert(&self, results: &mut Results) -> Result<Self::Output, Error> {
                Ok(($(self.$idx.convert(results)?,)+))
            }
        }
    };
}
tuple_evaluate!(A 0);
tuple_evaluate!(A 0, B 1);
tuple_evaluate!(A 0, B 1, C 2);
tuple_evaluate!(A 0, B 1, C 2, D 3);
tuple_evaluate!(A 0, B 1, C 2, D 3, E 4);
tuple_evaluate!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_evaluate!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_evaluate!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_evaluate!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_evaluate!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_evaluate!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_evaluate!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);

/// Evaluates on the default target (generated C++ on all cores) and returns the arrays.
///
/// `outputs` is a handle, a tuple of handles, or a slice of handles of one dtype.
///
/// A graph seen before costs a lookup: [`evaluate`], [`evaluate_with`], [`evaluate_into`],
/// [`evaluate_into_all`] and [`profile`] keep the fused, prepared plan of every graph they
/// run in a bounded cache keyed by the graph's structure (operators, wiring, input dtypes and
/// shapes) and the options that matter, never by host data, which is fed at every call. The
/// cache keeps the 128 most recently used plans (`OVL_PLAN_CACHE_SIZE` or
/// [`crate::set_plan_cache_capacity`] change that; 0 turns it off); see
/// [`crate::plan_cache_stats`] and [`crate::clear_plan_cache`].
pub fn evaluate<O: Evaluate>(outputs: O) -> Result<O::Output, Error> {
    evaluate_with(outputs, &Options::default())
}

/// Evaluates with the given options.
pub fn evaluate_with<O: Evaluate>(outputs: O, options: &Options) -> Result<O::Output, Error> {
    let prepared = plan_cache::prepare(&outputs.tensors(), options)?;
    let results = prepared.run(options, None)?;
    outputs.convert(&mut Results::new(results))
}

/// A lazy handle on a device tensor: operators take it like host data. On the GPU
/// ([`evaluate_device`], [`evaluate_with`] on [`Options::cuda()`], a graph [`crate::compile`]d
/// with it as a constant) the kernels read the tensor where it is, without a copy (the handle
/// shares its memory); a backend that runs on the host copies it there first. An error when
/// the tensor's dtype is not `T`.
///
/// ```no_run
/// # fn demo(xd: ovl::cuda::DeviceTensor) -> Result<(), ovl::Error> {
/// let x = ovl::from_device::<f32>(&xd)?;
/// let y = ovl_stdlib::tanh(&x);
/// let yd = ovl::evaluate_device(&y, &ovl::Options::cuda())?; // no host copy
/// # Ok(()) }
/// ```
pub fn from_device<T: ovl_core::Scalar>(
    tensor: &ovl_runtime::cuda::DeviceTensor,
) -> Result<crate::Lazy<T>, Error> {
    let handle = ovl_core::LazyTensor::device(std::sync::Arc::new(tensor.clone()));
    crate::Lazy::<T>::try_from(handle).map_err(|_| {
        Error::OutputMismatch(crate::Mismatch::DeviceDtype {
            given: tensor.describe(),
            wanted: T::DTYPE,
        })
    })
}

/// Evaluates on the GPU ([`Options::cuda()`]) and returns the outputs as device tensors, in the
/// order of `outputs.tensors()`: no host copy between the kernels of the graph nor of the
/// results (read them with [`ovl_runtime::cuda::DeviceTensor::to_host`]). The graph's host data
/// is uploaded at every call; for a loop, [`crate::compile`] the graph on placeholders and call
/// [`crate::Compiled::run_device`] with device tensors.
pub fn evaluate_device<O: Evaluate>(
    outputs: O,
    options: &Options,
) -> Result<Vec<ovl_runtime::cuda::DeviceTensor>, Error> {
    use ovl_runtime::cuda::DeviceTensor;
    if options.target != crate::Target::Cuda {
        return Err(crate::error::CompiledError::NotCuda {
            what: "evaluate_device",
            target: options.target,
        }
        .into());
    }
    let prepared = plan_cache::prepare(&outputs.tensors(), options)?;
    let inputs = prepared
        .inputs
        .iter()
        .map(|i| match i {
            ovl_core::GraphInput::Host(h) => Ok(DeviceTensor::upload(h)?),
            ovl_core::GraphInput::Device(d) => Ok(ovl_runtime::plan::on_device(&**d)?),
            ovl_core::GraphInput::Placeholder { name, .. } => {
                Err(Error::Placeholder { name: name.clone() })
            }
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let plan = prepared.plan();
    let results = plan
        .outputs()
        .iter()
        .enumerate()
        .map(|(k, sig)| DeviceTensor::uninit(sig.dtype, &sig.shape, &format!("output {k}")))
        .collect::<Result<Vec<_>, _>>()?;
    let ins: Vec<&DeviceTensor> = inputs.iter().collect();
    let outs: Vec<&DeviceTensor> = results.iter().collect();
    plan.run_device(&prepared.planned.kernels, &ins, &outs)?;
    Ok(results)
}

/// Timings of one operator over the profiled iterations.
#[derive(Clone, Debug)]
pub struct OperatorProfile {
    /// The operator's name.
    pub name: String,
    /// Kernels launched per evaluation for this operator.
    pub kernels: usize,
    /// The time of each iteration.
    pub times: Vec<Duration>,
}

impl OperatorProfile {
    /// The fastest iteration.
    pub fn min(&self) -> Duration {
        self.times.iter().copied().min().unwrap_or_default()
    }

    /// The median iteration.
    pub fn median(&self) -> Duration {
        let mut t = self.times.clone();
        t.sort();
        t.get(t.len() / 2).copied().unwrap_or_default()
    }

    /// The mean iteration.
    pub fn mean(&self) -> Duration {
        if self.times.is_empty() {
            return Duration::ZERO;
        }
        self.times.iter().sum::<Duration>() / self.times.len() as u32
    }
}

/// What [`profile`] measured.
#[derive(Clone, Debug)]
pub struct Profile {
    /// One entry per operator (kernel) in execution order.
    pub operators: Vec<OperatorProfile>,
    /// Time spent compiling or loading from the cache (before the timed iterations); a plan
    /// found in the plan cache costs only the lookup.
    pub prepare: Duration,
    /// The number of timed iterations.
    pub iterations: usize,
}

impl Profile {
    /// Kernels launched per evaluation.
    pub fn kernel_count(&self) -> usize {
        self.operators.iter().map(|o| o.kernels).sum()
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} kernel(s), {} iteration(s), prepare {:.3?}",
            self.kernel_count(),
            self.iterations,
            self.prepare
        )?;
        writeln!(
            f,
            "{:<32} {:>12} {:>12} {:>12}",
            "operator", "min", "median", "mean"
        )?;
        for op in &self.operators {
            writeln!(
                f,
                "{:<32} {:>12.3?} {:>12.3?} {:>12.3?}",
                op.name,
                op.min(),
                op.median(),
                op.mean()
            )?;
        }
        Ok(())
    }
}

/// Evaluates `output` into an array you already have, reusing its memory: the way to call an
/// operator in a hot loop without allocating (and page-faulting) a fresh output each time.
///
/// `dest` must have the output's shape and be a contiguous row-major (standard layout) array
/// that owns all of its buffer; anything else is an [`Error::OutputMismatch`]. Elements that no
/// worker writes are zeroed, exactly as in a fresh output. On error `dest` keeps its shape, but
/// its contents are unspecified.
///
/// ```
/// use ovl::prelude::*;
///
/// #[operator]
/// fn double(x: Tensor<f32>) -> Tensor<f32> {
///     let i = position_in(x.shape())[0];
///     let out = output_like(&x);
///     out[[i]] = 2.0 * x[[i]];
///     out
/// }
///
/// let x = ndarray::array![1.0f32, 2.0, 3.0];
/// let mut y = ndarray::ArrayD::<f32>::zeros(ndarray::IxDyn(&[3]));
/// for _ in 0..3 {
///     ovl::evaluate_into(&double(&x), &mut y, &Options::interpreter()).unwrap();
/// }
/// assert_eq!(y, ndarray::array![2.0f32, 4.0, 6.0].into_dyn());
/// ```
///
/// `dest` may have any dimensionality type: an `ArrayD`, or an `Array2` of the output's rank.
pub fn evaluate_into<T: Scalar, D: ndarray::Dimension + 'static>(
    output: &Lazy<T>,
    dest: &mut ndarray::Array<T, D>,
    options: &Options,
) -> Result<(), Error> {
    evaluate_into_all(output, &mut [Destination::from(dest)], options)
}

/// [`evaluate_into`] for several outputs, evaluated (and fused) together: output `k` of
/// `outputs` (anything [`Evaluate`] takes, e.g. `(&a, &b)` of different dtypes or a slice of
/// handles) is written into destination `k` of `dests`: a slice, `Vec` or array of arrays of
/// one dtype, of [`HostTensor`]s, or of [`Destination`]s (arrays of any dtypes).
pub fn evaluate_into_all<O: Evaluate, D: Destinations + ?Sized>(
    outputs: O,
    dests: &mut D,
    options: &Options,
) -> Result<(), Error> {
    let mut dests = dests.destinations();
    let tensors = outputs.tensors();
    if tensors.len() != dests.len() {
        return Err(Error::OutputMismatch(Mismatch::OutputCount {
            outputs: tensors.len(),
            arrays: dests.len(),
        }));
    }
    let prepared = plan_cache::prepare(&tensors, options)?;
    destination::run_into(&prepared, &[], options, &mut dests)
}

/// [`evaluate_into_all`] into borrowed arrays or views of any layout ([`OutputView`]): output
/// `k` of `outputs` is written into `dests[k]`, where it lies when that view is row-major
/// contiguous (for example a block of whole rows of a larger array), else through a buffer
/// copied into it (a Fortran-order array, every other column).
pub fn evaluate_into_views<O: Evaluate>(
    outputs: O,
    dests: &mut [OutputView<'_>],
    options: &Options,
) -> Result<(), Error> {
    let tensors = outputs.tensors();
    if tensors.len() != dests.len() {
        return Err(Error::OutputMismatch(Mismatch::OutputCount {
            outputs: tensors.len(),
            arrays: dests.len(),
        }));
    }
    let prepared = plan_cache::prepare(&tensors, options)?;
    crate::views::run_into_views(&prepared, &[], options, dests)
}

/// Evaluates `iterations` times (at least once) and returns the arrays of the last run together
/// with per-operator timings, like the original's `profile`.
pub fn profile<O: Evaluate>(
    outputs: O,
    options: &Options,
    iterations: usize,
) -> Result<(O::Output, Profile), Error> {
    let start = Instant::now();
    let prepared = plan_cache::prepare(&outputs.tensors(), options)?;
    let prepare = start.elapsed();
    let iterations = iterations.max(1);
    let plan = prepared.plan();
    let mut operators: Vec<OperatorProfile> = plan
        .dag()
        .operators
        .iter()
        .enumerate()
        .map(|(i, op)| OperatorProfile {
            name: op.name.clone(),
            kernels: usize::from(!plan.reads_in_place(i)),
            times: Vec::with_capacity(iterations),
        })
        .collect();
    let mut last = Vec::new();
    let mut times = Vec::with_capacity(operators.len());
    for _ in 0..iterations {
        times.clear();
        last = prepared.run(options, Some(&mut times))?;
        for (op, t) in operators.iter_mut().zip(&times) {
            op.times.push(*t);
        }
    }
    let arrays = outputs.convert(&mut Results::new(last))?;
    Ok((
        arrays,
        Profile {
            operators,
            prepare,
            iterations,
        },
    ))
}
