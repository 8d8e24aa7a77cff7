//! What can go wrong when a program runs on a caller's stream (`cuda::stream::StreamCall`);
//! beside that module so that device tensors' errors can carry it.

/// A run on the caller's CUDA stream that cannot be made: no GPU, a device or stream that does
/// not fit, a buffer on another device, something that cannot be done while the stream is
/// capturing a CUDA graph, a scratch allocation that failed. Each message says what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// No GPU can be used: no driver, no device.
    #[error("no GPU for a run on a CUDA stream: {message}")]
    NoGpu {
        /// What is missing.
        message: String,
    },
    /// The call names a device ordinal the driver does not have.
    #[error(
        "CUDA device {device} does not exist: the driver reports {count} GPU(s); pass the \
         ordinal of the device the tensors are on"
    )]
    NoSuchDevice {
        /// The ordinal asked for.
        device: i32,
        /// How many GPUs the driver reports.
        count: i32,
    },
    /// A buffer on another GPU than the call's.
    #[error(
        "{tensor} is on CUDA device {on}, but the call runs on device {device}; pass tensors \
         of one device and that device's stream"
    )]
    WrongDevice {
        /// Which buffer.
        tensor: String,
        /// The device it is on.
        on: i32,
        /// The call's device.
        device: i32,
    },
    /// An address CUDA does not know as device memory (host memory, a freed block).
    #[error(
        "{tensor} (address {ptr:#x}) is not CUDA device memory ({message}); pass a GPU \
         tensor, or run on the host"
    )]
    NotDeviceMemory {
        /// Which buffer.
        tensor: String,
        /// Its address.
        ptr: u64,
        /// The driver's answer.
        message: String,
    },
    /// A stream of another context than the device's primary context (the one PyTorch, JAX
    /// and the CUDA runtime use), or of another device.
    #[error(
        "stream {stream:#x} does not belong to CUDA device {device}'s primary context \
         ({why}); pass the framework's current stream of the device the tensors are on"
    )]
    ForeignStream {
        /// The stream handle.
        stream: usize,
        /// The call's device.
        device: i32,
        /// What the driver said.
        why: String,
    },
    /// Something that needs an allocation or a synchronization was asked for while the stream
    /// captures a CUDA graph.
    #[error(
        "{what} needs {action}, which cannot be done while stream {stream:#x} is capturing a \
         CUDA graph; call the program once on device {device} before the capture (a warm-up \
         call, as `torch.cuda.graph` recommends), or prepare it for the device first"
    )]
    Capturing {
        /// The stream handle.
        stream: usize,
        /// The call's device.
        device: i32,
        /// What needed it.
        what: String,
        /// What it needed.
        action: &'static str,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver error on device {device} while {action}: {message}")]
    Driver {
        /// The device.
        device: i32,
        /// What was attempted.
        action: String,
        /// The driver's error.
        message: String,
    },
    /// The scratch source could not give memory.
    #[error(
        "could not allocate {bytes} bytes of scratch for {what} on CUDA device {device}: {message}"
    )]
    Alloc {
        /// The device.
        device: i32,
        /// The size asked for.
        bytes: usize,
        /// What the memory was for.
        what: String,
        /// Why not.
        message: String,
    },
}

impl StreamError {
    /// A driver error of `device` while `action`.
    pub(crate) fn driver(device: i32, action: impl Into<String>, message: impl ToString) -> Self {
        StreamError::Driver {
            device,
            action: action.into(),
            message: message.to_string(),
        }
    }
}
