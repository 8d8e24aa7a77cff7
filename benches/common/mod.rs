//! What the benchmarks that report against a bandwidth limit share (`benches/lstm.rs`,
//! `benches/reductions.rs`, included as `mod common;`): the command line, the timing loop, the
//! STREAM triad measured in the same run, and the machine's description for the record.

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The arguments every benchmark takes: `--quick` (fewer sizes and repetitions), `--out DIR`.
pub struct Args {
    pub quick: bool,
    pub out_dir: PathBuf,
    all: Vec<String>,
}

impl Args {
    /// Parses `std::env::args()`; `default_out` is the output directory without `--out`.
    pub fn parse(default_out: &str) -> Args {
        let all: Vec<String> = std::env::args().collect();
        let quick = all.iter().any(|a| a == "--quick");
        let out_dir = all
            .iter()
            .position(|a| a == "--out")
            .and_then(|i| all.get(i + 1))
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(default_out));
        Args {
            quick,
            out_dir,
            all,
        }
    }

    /// The value after the option `name`, if given.
    pub fn value(&self, name: &str) -> Option<String> {
        let i = self.all.iter().position(|a| a == name)?;
        self.all.get(i + 1).cloned()
    }

    /// Whether the flag `name` was given.
    pub fn flag(&self, name: &str) -> bool {
        self.all.iter().any(|a| a == name)
    }
}

/// The best and the median of a series of timed calls.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub best: Duration,
    pub median: Duration,
}

impl Timing {
    /// `bytes` moved in the best time, in GB/s.
    pub fn gb_per_s(&self, bytes: f64) -> f64 {
        bytes / self.best.as_secs_f64() / 1e9
    }
}

/// Calls `f` `warmup` times untimed (compiling, loading, faulting pages in), then `reps` times
/// timed (at least once); the first error stops it.
pub fn time_calls<E>(
    warmup: usize,
    reps: usize,
    mut f: impl FnMut() -> Result<(), E>,
) -> Result<Timing, E> {
    for _ in 0..warmup {
        f()?;
    }
    let mut times = Vec::with_capacity(reps.max(1));
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        f()?;
        times.push(start.elapsed());
    }
    times.sort();
    Ok(Timing {
        best: times[0],
        median: times[times.len() / 2],
    })
}

/// STREAM triad `a = b + 1.5 c` over 16M f32 on all cores, warm buffers: bytes per second
/// (3 x 4 bytes per element, best of `reps`).
pub fn triad_bandwidth(reps: usize) -> f64 {
    let n = 16 << 20;
    let b: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let c: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let mut a = vec![0.0f32; n];
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let chunk = n.div_ceil(threads);
    let mut best = Duration::MAX;
    for _ in 0..reps + 1 {
        let start = Instant::now();
        std::thread::scope(|s| {
            for ((a, b), c) in a
                .chunks_mut(chunk)
                .zip(b.chunks(chunk))
                .zip(c.chunks(chunk))
            {
                s.spawn(move || {
                    for ((x, y), z) in a.iter_mut().zip(b).zip(c) {
                        *x = y + 1.5 * z;
                    }
                });
            }
        });
        best = best.min(start.elapsed());
    }
    std::hint::black_box(&a);
    (3 * n * 4) as f64 / best.as_secs_f64()
}

/// The CPU for the record: its model, the core's generation where `/proc/cpuinfo` tells it
/// (a virtual machine may name only "AMD EPYC": the family and model then say Zen 4 or Zen 5,
/// whose vector units differ by 2x), the cores this process may use and the caches per core.
pub fn machine() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| -> Option<String> {
        info.lines()
            .find(|l| l.split(':').next().is_some_and(|k| k.trim() == name))
            .and_then(|l| l.split(':').nth(1))
            .map(|v| v.trim().to_string())
    };
    let model = field("model name").unwrap_or_else(|| "unknown CPU".into());
    let number = |name: &str| field(name).and_then(|v| v.parse::<u32>().ok());
    let core = match (
        field("vendor_id").as_deref(),
        number("cpu family"),
        number("model"),
    ) {
        (Some("AuthenticAMD"), Some(family), Some(m)) => {
            let generation = match family {
                23 => "Zen 1-2",
                25 if matches!(m, 0x10..=0x1f | 0x60..=0x7f | 0xa0..=0xaf) => "Zen 4",
                25 => "Zen 3",
                26 => "Zen 5",
                _ => "AMD",
            };
            format!(" ({generation}: family {family}, model {m})")
        }
        (Some(_), Some(family), Some(m)) => format!(" (family {family}, model {m})"),
        _ => String::new(),
    };
    let cores = std::thread::available_parallelism().map_or(1, |t| t.get());
    format!("{model}{core}, {cores} cores{}{}", caches(), isa_note())
}

/// ", ovl held to AVX2 (OVL_CPU_ISA=avx2)" when the switch holds ovl there (empty otherwise):
/// the label of every table measured so.
pub fn isa_note() -> String {
    match ovl::isa::process() {
        ovl::isa::CpuIsa::Native => String::new(),
        isa => format!(
            ", ovl held to {} (OVL_CPU_ISA={})",
            isa.name().to_uppercase(),
            isa.name()
        ),
    }
}

/// The data caches of CPU 0 from sysfs, e.g. ", L1d 48K, L2 1024K, L3 32768K" (empty when
/// not known).
fn caches() -> String {
    let mut out = String::new();
    for index in 0..8 {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{index}");
        let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
        let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
        else {
            break;
        };
        let suffix = match kind.trim() {
            "Data" => "d",
            "Unified" => "",
            _ => continue,
        };
        out.push_str(&format!(", L{}{suffix} {}", level.trim(), size.trim()));
    }
    out
}

/// What [`device_calls`] measured.
pub struct DeviceCalls {
    /// The host's clock around each call and the synchronization after it.
    pub wall: Timing,
    /// CUDA events around each call on the stream (`ovl::cuda::gpu_time`): the GPU's time
    /// from the call's first kernel to its last, gaps included.
    pub gpu: Timing,
    /// The last call's outputs, copied back.
    pub outputs: Vec<ndarray::ArrayD<f32>>,
}

/// A compiled graph called the way a GPU user calls it, on device tensors: `inputs` (one per
/// placeholder, row-major f32 arrays) are uploaded once, then each call is
/// `Compiled::run_device_into`, timed twice over: `warmup` untimed calls, then `reps` calls
/// each followed by `ovl::cuda::synchronize()` on the host's clock (launches, kernels and the
/// host's own work, no host copy), then `reps` calls between CUDA events.
pub fn device_calls(
    step: &ovl::Compiled,
    inputs: &[&ndarray::ArrayD<f32>],
    warmup: usize,
    reps: usize,
) -> Result<DeviceCalls, Box<dyn std::error::Error>> {
    use ovl::cuda::DeviceTensor;
    type BoxError = Box<dyn std::error::Error>;
    let feeds = inputs
        .iter()
        .map(|a| {
            let data: Vec<f32> = a.iter().copied().collect();
            let host = ovl::HostTensor::from_vec(a.shape(), data).ok_or("an input array")?;
            Ok(DeviceTensor::upload(&host)?)
        })
        .collect::<Result<Vec<_>, BoxError>>()?;
    let refs: Vec<&DeviceTensor> = feeds.iter().collect();
    let mut outputs = step.run_device(&refs)?;
    let wall = time_calls(warmup, reps, || -> Result<(), BoxError> {
        step.run_device_into(&refs, &mut outputs)?;
        ovl::cuda::synchronize()?;
        Ok(())
    })?;
    let mut times = Vec::with_capacity(reps.max(1));
    for _ in 0..reps.max(1) {
        let ((), t) = ovl::cuda::gpu_time(|| -> Result<(), BoxError> {
            step.run_device_into(&refs, &mut outputs)?;
            Ok(())
        })?;
        times.push(t);
    }
    times.sort();
    let gpu = Timing {
        best: times[0],
        median: times[times.len() / 2],
    };
    let outputs = outputs
        .iter()
        .map(|t| {
            let h = t.to_host()?;
            let data = h.as_slice::<f32>().ok_or("an f32 output")?.to_vec();
            Ok(ndarray::ArrayD::from_shape_vec(t.shape(), data)?)
        })
        .collect::<Result<Vec<_>, BoxError>>()?;
    Ok(DeviceCalls { wall, gpu, outputs })
}
