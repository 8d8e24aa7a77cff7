//! A device run recorded once as a CUDA graph and replayed (`Compiled::run_device_into` from
//! its second call on): one launch for the whole graph instead of one per kernel, which is what
//! a graph of many small kernels (a recurrent layer's steps) spends its time on.
//!
//! A graph replays at the addresses it was recorded with, so it owns every block it touches: a
//! copy of each input the caller feeds (filled from the caller's tensor before each replay),
//! the inputs it reads where they are (the compiled graph's own data, held), its outputs
//! (copied into the caller's after each replay), its intermediates (one block per size at a
//! time, reused within the graph as the eager run would) and its fault statuses (zeroed by the
//! graph's first node). The copies cost one device-to-device transfer of the fed inputs and the
//! outputs per call.

use super::device::STREAM;
use super::{Kernel, Plan, RunFailure};
use crate::cuda::{capture, CapturedGraph, DeviceTensor, StatusBlock};

/// A plan's device run recorded as a CUDA graph, with the blocks it owns.
pub struct DeviceGraph {
    graph: CapturedGraph,
    /// Per graph input: the graph's copy of an input fed at every call, or the input itself
    /// (held) when it is read where it is.
    inputs: Vec<(DeviceTensor, bool)>,
    outputs: Vec<DeviceTensor>,
    /// Intermediates; held, never read here.
    _temps: Vec<DeviceTensor>,
    statuses: StatusBlock,
    can_fault: bool,
}

impl Plan {
    /// Records the device run of `kernels` as a CUDA graph: graph input `i` is `inputs[i]`, read
    /// where it is and held by the graph unless `fed[i]`, in which case the graph reads its own
    /// copy, filled at every [`DeviceGraph::replay`]. Nothing runs yet. Errors as for
    /// [`Plan::run_device`], or the driver's when the run cannot be recorded.
    pub fn capture_device(
        &self,
        kernels: &[Kernel],
        inputs: &[&DeviceTensor],
        fed: &[bool],
    ) -> Result<DeviceGraph, RunFailure> {
        let owned: Vec<(DeviceTensor, bool)> = inputs
            .iter()
            .zip(fed.iter().chain(std::iter::repeat(&false)))
            .map(|(t, &fed)| {
                let t = match fed {
                    true => DeviceTensor::uninit(t.dtype(), t.shape(), "a CUDA graph's input")?,
                    false => (*t).clone(),
                };
                Ok((t, fed))
            })
            .collect::<Result<_, RunFailure>>()?;
        let outputs: Vec<DeviceTensor> = self
            .outputs
            .iter()
            .map(|sig| DeviceTensor::uninit(sig.dtype, &sig.shape, "a CUDA graph's output"))
            .collect::<Result<_, _>>()?;
        let ins: Vec<&DeviceTensor> = owned.iter().map(|(t, _)| t).collect();
        let outs: Vec<&DeviceTensor> = outputs.iter().collect();
        self.check_device(kernels, &ins, &outs)?;
        let statuses = StatusBlock::new(self.dag.operators.len())?;
        let mut temps = Vec::new();
        let _alone = STREAM.write().unwrap_or_else(|p| p.into_inner());
        let (can_fault, graph) = capture(|| -> Result<bool, RunFailure> {
            statuses.reset()?;
            self.queue_device(kernels, &ins, &outs, &statuses, Some(&mut temps))
        })?;
        Ok(DeviceGraph {
            graph,
            inputs: owned,
            outputs,
            _temps: temps,
            statuses,
            can_fault,
        })
    }
}

impl DeviceGraph {
    /// Runs the recorded graph on `inputs` into `outputs` (as [`Plan::run_device`], the same
    /// checks first): copies the fed inputs in, launches, copies the outputs out, and reads the
    /// fault statuses when a kernel can fault. `Ok(false)`: an input the graph reads where it is
    /// is not the tensor it was recorded with; nothing ran (run the plan eagerly instead).
    pub fn replay(
        &self,
        plan: &Plan,
        kernels: &[Kernel],
        inputs: &[&DeviceTensor],
        outputs: &[&DeviceTensor],
    ) -> Result<bool, RunFailure> {
        plan.check_device(kernels, inputs, outputs)?;
        if self
            .inputs
            .iter()
            .zip(inputs)
            .any(|((own, fed), t)| !fed && own.ptr() != t.ptr())
        {
            return Ok(false);
        }
        let _shared = STREAM.read().unwrap_or_else(|p| p.into_inner());
        for ((own, fed), t) in self.inputs.iter().zip(inputs) {
            if *fed {
                own.copy_from(t)?;
            }
        }
        self.graph.launch()?;
        for (own, t) in self.outputs.iter().zip(outputs) {
            t.copy_from(own)?;
        }
        if self.can_fault {
            plan.check_statuses(kernels, &self.statuses)?;
        }
        Ok(true)
    }
}
