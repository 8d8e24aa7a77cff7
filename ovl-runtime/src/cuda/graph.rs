//! CUDA graphs: the work one call queues on the process's stream, recorded once (stream capture)
//! and replayed with one launch, so that a graph of hundreds of small kernels costs the host
//! one call instead of one launch each. What is recorded keeps its device addresses: the caller
//! owns every block the recorded work touches for as long as it replays it.

use super::tensor::{bound_device, DeviceError};
use cudarc::driver::{sys, CudaGraph};
use std::sync::Mutex;

/// A recorded CUDA graph, instantiated, ready to replay on the process's stream.
pub struct CapturedGraph {
    graph: Mutex<CudaGraph>,
}

// SAFETY: the graph is touched only under its mutex (the driver requires calls on one graph to
// be serialized), and its handles are valid in any thread with the process's context bound,
// which `launch` binds.
unsafe impl Send for CapturedGraph {}
// SAFETY: as above; `&CapturedGraph` gives access only through the mutex.
unsafe impl Sync for CapturedGraph {}

impl std::fmt::Debug for CapturedGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CapturedGraph")
    }
}

/// Records the work `f` queues on the process's stream (nothing runs while it records: copies,
/// fills, kernels and cuBLAS calls become the graph's nodes), then instantiates it. Allocation
/// is allowed meanwhile (relaxed capture mode); waiting for the stream is not, and fails the
/// capture. The stream is left usable whatever happens; an error of `f` is returned as it is,
/// and a failed or empty capture as [`DeviceError::Driver`].
pub fn capture<T, E: From<DeviceError>>(
    f: impl FnOnce() -> Result<T, E>,
) -> Result<(T, CapturedGraph), E> {
    let dev = bound_device()?;
    let err = |action: &str, message: String| DeviceError::Driver {
        action: action.into(),
        message,
    };
    dev.stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .map_err(|e| err("starting a CUDA graph capture", e.to_string()))?;
    let value = f();
    // Ended whatever `f` returned, so that the stream runs work again.
    let ended = dev.stream.end_capture(sys::CUgraphInstantiate_flags(0));
    let value = value?;
    let graph = ended
        .map_err(|e| err("capturing a CUDA graph", e.to_string()))?
        .ok_or_else(|| err("capturing a CUDA graph", "nothing was recorded".into()))?;
    graph
        .upload()
        .map_err(|e| err("uploading a CUDA graph", e.to_string()))?;
    Ok((
        value,
        CapturedGraph {
            graph: Mutex::new(graph),
        },
    ))
}

impl CapturedGraph {
    /// Queues one replay of the graph on the process's stream; returns without waiting.
    pub fn launch(&self) -> Result<(), DeviceError> {
        bound_device()?;
        self.graph
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .launch()
            .map_err(|e| DeviceError::Driver {
                action: "launching a CUDA graph".into(),
                message: e.to_string(),
            })
    }
}
