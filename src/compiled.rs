//! Record once, run many times: a graph on placeholders, fused and compiled by [`compile`], then
//! run with new data for its placeholders on every call. A training loop that records its step
//! once pays tracing, fusion and the cache lookup once instead of at every step.
//!
//! ```
//! use ovl::prelude::*;
//!
//! #[operator]
//! fn axpy(a: Tensor<f32>, x: Tensor<f32>, y: Tensor<f32>) -> Tensor<f32> {
//!     let i = position_in(x.shape())[0];
//!     let out = output_like(&x);
//!     out[[i]] = a[[0]] * x[[i]] + y[[i]];
//!     out
//! }
//!
//! let x = ovl::placeholder::<f32>("x", &[3]);
//! let y = ovl::placeholder::<f32>("y", &[3]);
//! let a = Lazy::from(ndarray::array![2.0f32]); // host data is baked in
//! let step = ovl::compile((&x, &y), &axpy(&a, &x, &y), &Options::interpreter()).unwrap();
//!
//! let mut out = vec![ndarray::ArrayD::<f32>::zeros(ndarray::IxDyn(&[3]))];
//! for k in 0..3 {
//!     let xv = Lazy::from(ndarray::array![1.0f32, 2.0, 3.0]);
//!     let yv = Lazy::from(ndarray::Array1::from_elem(3, k as f32));
//!     step.run_into((&xv, &yv), &mut out).unwrap();
//!     assert_eq!(out[0], ndarray::array![2.0 + k as f32, 4.0 + k as f32, 6.0 + k as f32].into_dyn());
//! }
//! ```

use crate::destination::{self, Destinations};
use crate::error::{CompiledError, InternalError};
use crate::evaluate::Evaluate;
use crate::executor::{self, Prepared};
use crate::export::feed_slots;
use crate::options::Options;
use crate::views::{FeedData, FeedView, OutputView};
use crate::Error;
use ovl_core::lazy::GraphInput;
use ovl_core::lazy::Node;
use ovl_core::{DType, HostTensor, LazyTensor};
use ovl_runtime::cuda::{DeviceError, DeviceTensor};
use ovl_runtime::plan::Input;

/// A graph fused and compiled once by [`compile`]; [`run_into`](Compiled::run_into) runs it
/// with new data for its placeholders.
pub struct Compiled {
    prepared: Prepared,
    feeds: Vec<Feed>,
    options: Options,
    /// The graph's own host data on the GPU, uploaded by the first device run.
    device_data: std::sync::OnceLock<Vec<Option<DeviceTensor>>>,
    /// Device runs as a CUDA graph: recorded by the second run, replayed from then on.
    device_graph: std::sync::Mutex<DeviceGraphState>,
}

/// Whether device runs may be recorded as CUDA graphs (`OVL_CUDA_GRAPHS=0` says no).
fn cuda_graphs_enabled() -> bool {
    std::env::var("OVL_CUDA_GRAPHS").map_or(true, |v| v.trim() != "0")
}

/// Where a [`Compiled`] stands with CUDA graphs (`OVL_CUDA_GRAPHS=0`: never recorded).
enum DeviceGraphState {
    /// Device runs so far, each run eagerly.
    Eager(u32),
    /// Recorded: every device run replays it.
    Recorded(ovl_runtime::plan::DeviceGraph),
    /// Not recorded (disabled, or recording failed): every device run is eager.
    Off,
}

/// One placeholder of a [`Compiled`] graph.
struct Feed {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    /// The graph input it supplies; `None` when the outputs do not read it.
    graph_input: Option<usize>,
}

/// Fuses and compiles (or finds in the operator cache) the graph behind `outputs`, whose
/// placeholders are `inputs` (made with [`crate::placeholder`], in the order
/// [`Compiled::run_into`] takes their data). Host data in the graph is kept as it is.
///
/// Errors: an input that is not a placeholder or is listed twice, a placeholder the outputs
/// read that is not among the inputs, and whatever [`crate::evaluate`] reports while tracing,
/// fusing or compiling.
pub fn compile<I: Evaluate, O: Evaluate>(
    inputs: I,
    outputs: O,
    options: &Options,
) -> Result<Compiled, Error> {
    let inputs: Vec<LazyTensor> = inputs.tensors().into_iter().cloned().collect();
    let outputs = outputs.tensors();
    if outputs.is_empty() {
        return Err(CompiledError::NoOutputs.into());
    }
    let graph = ovl_core::lazy::build_graph(&outputs)?;
    let graph = executor::fuse(graph, options)?;
    let slots = feed_slots(&inputs, &graph)?;
    let prepared = executor::prepare(graph, options)?;
    let feeds = inputs
        .iter()
        .zip(slots)
        .map(|(t, graph_input)| Feed {
            name: t
                .placeholder_node()
                .map(|p| p.name.clone())
                .unwrap_or_default(),
            dtype: t.dtype,
            shape: t.shape.to_vec(),
            graph_input,
        })
        .collect();
    Ok(Compiled {
        prepared,
        feeds,
        options: options.clone(),
        device_data: std::sync::OnceLock::new(),
        device_graph: std::sync::Mutex::new(DeviceGraphState::Eager(0)),
    })
}

impl Compiled {
    /// Runs the graph with `feeds` (host data, one per placeholder, in the order given to
    /// [`compile`], for example `(&Lazy::from(array), ..)`), writing output `k` into destination
    /// `k` of `dests` (of the output's dtype and shape, in row-major order; moved in and out,
    /// not copied): arrays of one dtype, [`HostTensor`]s, or [`crate::Destination`]s of any
    /// dtypes.
    ///
    /// A feed of the wrong dtype or shape, or that is not host data, is an error that names it;
    /// on any error the arrays keep their shapes, with unspecified contents.
    pub fn run_into<D: Destinations + ?Sized>(
        &self,
        feeds: impl Evaluate,
        dests: &mut D,
    ) -> Result<(), Error> {
        let mut dests = dests.destinations();
        let given = feeds.tensors();
        if given.len() != self.feeds.len() {
            return Err(CompiledError::FeedCount {
                device: false,
                given: given.len(),
                placeholders: self.feeds.len(),
            }
            .into());
        }
        let mut fed: Vec<Option<&HostTensor>> = vec![None; self.prepared.inputs.len()];
        for (k, (feed, t)) in self.feeds.iter().zip(given).enumerate() {
            let data = match &*t.node {
                Node::Host(h) => &**h,
                _ => {
                    return Err(CompiledError::NotHostData {
                        index: k,
                        name: feed.name.clone(),
                    }
                    .into())
                }
            };
            if data.dtype() != feed.dtype || data.shape != feed.shape {
                return Err(CompiledError::FeedType {
                    index: k,
                    name: feed.name.clone(),
                    given: format!("{}{:?}", data.dtype(), data.shape),
                    wanted: format!("{}{:?}", feed.dtype, feed.shape),
                }
                .into());
            }
            if let Some(i) = feed.graph_input {
                fed[i] = Some(data);
            }
        }
        destination::run_into(&self.prepared, &fed, &self.options, &mut dests)
    }

    /// Runs the graph with borrowed data: `feeds[i]` for placeholder `i` (in the order given to
    /// [`compile`]) and output `k` written into `outputs[k]`, each an array or view of any
    /// layout (see [`crate::views`]). A row-major contiguous feed is read where it lies and a
    /// row-major contiguous output written where it lies: no copy, the borrows keep them alive
    /// and untouched by anything else until the call returns. Other layouts were copied when
    /// their [`FeedView`] was made (feeds) or are copied into after the run (outputs).
    ///
    /// Errors name the buffer: a count, dtype or shape that does not match; on an error the
    /// outputs hold unspecified values.
    pub fn run_views(
        &self,
        feeds: &[FeedView<'_>],
        outputs: &mut [OutputView<'_>],
    ) -> Result<(), Error> {
        if feeds.len() != self.feeds.len() {
            return Err(CompiledError::FeedCount {
                device: false,
                given: feeds.len(),
                placeholders: self.feeds.len(),
            }
            .into());
        }
        let mut fed: Vec<Option<Input<'_>>> = vec![None; self.prepared.inputs.len()];
        for (k, (feed, given)) in self.feeds.iter().zip(feeds).enumerate() {
            if given.dtype != feed.dtype || given.shape != feed.shape {
                return Err(CompiledError::FeedType {
                    index: k,
                    name: feed.name.clone(),
                    given: given.describe(),
                    wanted: format!("{}{:?}", feed.dtype, feed.shape),
                }
                .into());
            }
            if let Some(i) = feed.graph_input {
                fed[i] = Some(match &given.data {
                    FeedData::InPlace(p, _) => Input::Raw(*p),
                    FeedData::Copied(t) => Input::Host(t),
                });
            }
        }
        crate::views::run_into_views(&self.prepared, &fed, &self.options, outputs)
    }

    /// Runs the graph on the GPU with device tensors, one per placeholder in the order given to
    /// [`compile`]; returns the outputs as new device tensors (from the caching allocator).
    /// Needs a graph compiled with [`Options::cuda()`]. Nothing is copied to or from the host
    /// except, on the first device run, the graph's own host data (uploaded once and kept).
    /// See [`Compiled::run_device_into`].
    pub fn run_device(&self, feeds: &[&DeviceTensor]) -> Result<Vec<DeviceTensor>, Error> {
        self.check_device_target()?;
        let outputs = self
            .prepared
            .plan()
            .outputs()
            .iter()
            .enumerate()
            .map(|(k, sig)| DeviceTensor::uninit(sig.dtype, &sig.shape, &format!("output {k}")))
            .collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<&DeviceTensor> = outputs.iter().collect();
        self.run_device_refs(feeds, &refs)?;
        Ok(outputs)
    }

    /// [`Compiled::run_device`], writing output `k` into `outputs[k]` (a device tensor of its
    /// dtype and shape, not shared with a feed). The call queues the kernels on the GPU's stream
    /// and returns without waiting for them, except that a graph with a kernel that can fault
    /// (a checked index or range step) waits to read the fault statuses: a fault is then an
    /// error naming the operator and the worker. [`DeviceTensor::to_host`] waits for the
    /// results.
    ///
    /// Errors name the tensor: a feed or output of the wrong dtype or shape, a wrong count, a
    /// graph not compiled for the GPU, device memory running out.
    pub fn run_device_into(
        &self,
        feeds: &[&DeviceTensor],
        outputs: &mut [DeviceTensor],
    ) -> Result<(), Error> {
        let refs: Vec<&DeviceTensor> = outputs.iter().collect();
        self.run_device_refs(feeds, &refs)
    }

    fn run_device_refs(
        &self,
        feeds: &[&DeviceTensor],
        outputs: &[&DeviceTensor],
    ) -> Result<(), Error> {
        self.check_device_target()?;
        if feeds.len() != self.feeds.len() {
            return Err(CompiledError::FeedCount {
                device: true,
                given: feeds.len(),
                placeholders: self.feeds.len(),
            }
            .into());
        }
        let n = self.prepared.inputs.len();
        let mut inputs: Vec<Option<&DeviceTensor>> = vec![None; n];
        for (k, (feed, t)) in self.feeds.iter().zip(feeds).enumerate() {
            t.check(
                &format!("the device tensor for placeholder {k} (`{}`)", feed.name),
                feed.dtype,
                &feed.shape,
            )?;
            if let Some(i) = feed.graph_input {
                inputs[i] = Some(t);
            }
        }
        let own = self.device_data()?;
        // Graph inputs the caller feeds at every call (the others are the graph's own data).
        let fed: Vec<bool> = inputs.iter().map(Option::is_some).collect();
        let inputs: Vec<&DeviceTensor> = inputs
            .into_iter()
            .zip(own)
            .enumerate()
            .map(|(i, (fed, own))| {
                fed.or(own.as_ref())
                    .ok_or_else(|| match &self.prepared.inputs[i] {
                        GraphInput::Placeholder { name, .. } => {
                            Error::Placeholder { name: name.clone() }
                        }
                        GraphInput::Host(_) | GraphInput::Device(_) => {
                            InternalError::NotUploaded { input: i }.into()
                        }
                    })
            })
            .collect::<Result<_, _>>()?;
        let (plan, kernels) = (self.prepared.plan(), &self.prepared.planned.kernels[..]);
        // One device run of this graph at a time: a CUDA graph replays at fixed addresses.
        let mut state = self.device_graph.lock().unwrap_or_else(|p| p.into_inner());
        if let DeviceGraphState::Eager(runs) = *state {
            if runs >= 1 && cuda_graphs_enabled() {
                // Bad tensors are the caller's error, not a reason to give up on graphs.
                plan.check_device(kernels, &inputs, outputs)?;
                *state = match plan.capture_device(kernels, &inputs, &fed) {
                    Ok(graph) => DeviceGraphState::Recorded(graph),
                    // Whatever kept the run from being recorded, it still runs eagerly.
                    Err(_) => DeviceGraphState::Off,
                };
            }
        }
        match &mut *state {
            DeviceGraphState::Recorded(graph) => {
                if graph.replay(plan, kernels, &inputs, outputs)? {
                    return Ok(());
                }
                *state = DeviceGraphState::Off;
            }
            DeviceGraphState::Eager(runs) => *runs += 1,
            DeviceGraphState::Off => {}
        }
        plan.run_device(kernels, &inputs, outputs)?;
        Ok(())
    }

    /// Whether device runs replay a recorded CUDA graph: true from the second
    /// [`Compiled::run_device_into`] (or [`Compiled::run_device`]) on, unless `OVL_CUDA_GRAPHS=0`
    /// or recording failed (then every run queues its kernels one by one, with the same
    /// results). A replay launches the whole graph at once: the graph owns a copy of every fed
    /// input and of every output (each call copies the fed inputs in and the outputs out, on the
    /// device) and its intermediates, for as long as this `Compiled` lives.
    pub fn runs_as_cuda_graph(&self) -> bool {
        matches!(
            *self.device_graph.lock().unwrap_or_else(|p| p.into_inner()),
            DeviceGraphState::Recorded(_)
        )
    }

    fn check_device_target(&self) -> Result<(), Error> {
        if self.options.target != crate::Target::Cuda {
            return Err(CompiledError::NotCuda {
                what: "a run on device tensors",
                target: self.options.target,
            }
            .into());
        }
        Ok(())
    }

    /// The graph's own data on the GPU (host data uploaded on first use, device data as it is;
    /// `None` for placeholders).
    fn device_data(&self) -> Result<&[Option<DeviceTensor>], DeviceError> {
        if let Some(d) = self.device_data.get() {
            return Ok(d);
        }
        let uploaded = self
            .prepared
            .inputs
            .iter()
            .map(|i| match i {
                GraphInput::Host(h) => DeviceTensor::upload(h).map(Some),
                GraphInput::Device(d) => ovl_runtime::plan::on_device(&**d).map(Some),
                GraphInput::Placeholder { .. } => Ok(None),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(self.device_data.get_or_init(|| uploaded))
    }

    /// How many kernels one run launches (after fusion; an operator whose outputs are read in
    /// place, the cut of a stacked product's result, launches none).
    pub fn kernel_count(&self) -> usize {
        let plan = self.prepared.plan();
        (0..plan.dag().operators.len())
            .filter(|&i| !plan.reads_in_place(i))
            .count()
    }
}
